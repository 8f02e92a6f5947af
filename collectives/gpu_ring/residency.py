"""Co-residency: the ring's blocks spin on each other, so every one of them must be running.

Three cases, decided here from facts the caller gathers (pure functions, tested with
fakes in tests/test_ring_residency.py):

- **Virtual ranks in one process** (one GPU): a cooperative launch of all of them (the
  driver refuses one that cannot be resident at once), else one launch per rank on its
  own non-blocking stream with ranks x channels <= SMs (one block per SM is always
  resident, whatever else runs), with fewer channels if need be.
- **Processes sharing a GPU**: without MPS their kernels time-slice, so a spinning block
  may wait for a peer that is not running: refused. Under MPS, only after the handshake
  probe (rz_probe: PROBE_ROUNDS round trips within PROBE_DEADLINE_S, which time-sliced
  contexts cannot do) succeeded.
- **One rank per GPU**: nothing more to ask.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import tuning


@dataclass(frozen=True)
class Residency:
    """How the ranks of a launch get to run at once, or why they cannot."""
    ok: bool
    mode: str      # "cooperative", "streams", "one-per-gpu", "mps", or "refused"
    channels: int  # channels per rank the launch may use
    reason: str


@dataclass(frozen=True)
class ProbeResult:
    """What rz_probe reported: done (1 in time, 2 late, 0 never finished), rounds, nanoseconds."""
    done: int
    rounds: int
    elapsed_ns: int

    @property
    def ok(self) -> bool:
        return self.done == 1 and self.rounds >= tuning.PROBE_ROUNDS


def virtual_ranks(nlocal: int, channels: int, sm_count: int, cooperative: bool, max_coop_blocks: int) -> Residency:
    """Virtual ranks in one process on one GPU.

    Args:
      nlocal: ranks launched from this process on this GPU.
      channels: channels per rank wanted.
      sm_count: the GPU's SMs.
      cooperative: the device supports cooperative launches.
      max_coop_blocks: blocks a cooperative launch of this kernel may have
        (occupancy per SM x SMs).
    """
    if nlocal < 1 or channels < 1:
        raise ValueError(f"bad nlocal={nlocal} or channels={channels}")
    if cooperative and nlocal * channels <= max_coop_blocks:
        return Residency(True, "cooperative", channels,
                         f"{nlocal} ranks x {channels} channels in one cooperative launch (<= {max_coop_blocks} blocks)")
    fit = min(channels, sm_count // nlocal)
    if fit < 1:
        return Residency(False, "refused", 0, f"{nlocal} ranks cannot each have a block on {sm_count} SMs")
    cut = "" if fit == channels else f" (cut from {channels} so that every block has an SM)"
    return Residency(True, "streams", fit,
                     f"{nlocal} launches on non-blocking streams, {fit} channels each: {nlocal * fit} <= {sm_count} SMs{cut}")


def processes(ranks_on_gpu: int, channels: int, mps: bool, probe: Callable[[], ProbeResult] | None) -> Residency:
    """Ranks that are separate processes; ``ranks_on_gpu`` of them share this rank's GPU.

    Args:
      ranks_on_gpu: processes (this one included) whose rank runs on this GPU.
      channels: channels per rank wanted.
      mps: an MPS control daemon serves this process (:func:`mps_active`).
      probe: runs the handshake with the other process on this GPU (None: not available).
    """
    if ranks_on_gpu <= 1:
        return Residency(True, "one-per-gpu", channels, "one rank per GPU: its blocks never wait for another context")
    if ranks_on_gpu > 2:
        return Residency(False, "refused", 0, f"{ranks_on_gpu} processes on one GPU: the probe pairs two only")
    if not mps:
        return Residency(False, "refused", 0, "two processes on one GPU without MPS: their kernels time-slice and "
                                              "a spinning block would wait for a peer that is not running")
    if probe is None:
        return Residency(False, "refused", 0, "two processes on one GPU under MPS, but no handshake probe was run")
    r = probe()
    if not r.ok:
        return Residency(False, "refused", 0,
                         f"MPS handshake failed: {r.rounds} of {tuning.PROBE_ROUNDS} round trips in "
                         f"{r.elapsed_ns / 1e6:.1f} ms (deadline {tuning.PROBE_DEADLINE_S * 1e3:.0f} ms, done={r.done})")
    return Residency(True, "mps", channels,
                     f"two processes under MPS: {r.rounds} round trips in {r.elapsed_ns / 1e3:.0f} us")


def mps_active(env: dict | None = None, exists: Callable[[Path], bool] | None = None) -> bool:
    """Whether an MPS control daemon's pipe is where CUDA will look for it.

    Args:
      env: the environment (os.environ).
      exists: a path test (Path.exists); injectable for tests.
    """
    env = os.environ if env is None else env
    exists = (lambda p: p.exists()) if exists is None else exists
    pipe = Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")
    return exists(pipe / "control")
