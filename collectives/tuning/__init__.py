"""Every threshold, chunk size and switch of the library, with where it was measured.

``load()`` reads them once per Communicator: the defaults below, then the file
``bench/tune.py`` writes (``RINGZERO_TUNING``, else ``~/.config/ringzero/tuning.json``
when it exists), then each setting's environment variable. Nothing else in the
library reads the environment or keeps a threshold of its own.

    python -m collectives.tuning        # every setting, its value now and its source
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..dtypes import DATA_COLLECTIVES

CPU2 = "2 ranks on the 2-core x86 development machine"
TUNE_FILE = "bench/results/2026-12-01-cpu2-tune/tune-n2.json"
UNMEASURED = "unmeasured: a guess from the algorithm's shape and NCCL's choices, for bench/gpu_ring.py to measure"


@dataclass(frozen=True)
class Setting:
    """One tunable value.

    Attributes:
      name: the attribute of ``Tuning`` and the key in a tuning file.
      default: the value where nothing overrides it (its type is the setting's type).
      env: the environment variable that overrides it (set it alike on every rank), or None.
      doc: what it decides.
      source: where the default was measured (machine, ranks, results file), or why it is what it is.
    """

    name: str
    default: object
    env: str | None
    doc: str
    source: str


KiB, MiB = 1 << 10, 1 << 20
SETTINGS = (
    # roads between point-to-point messages
    Setting("chunk_bytes", 1 * MiB, None, "the host ring's chunk (each message's size)",
            f"{CPU2}: fewer, larger messages won (a rendezvous costs ~10 us); bench/results/2026-11-29-cpu2-ring/"),
    Setting("small_bytes", 128 * KiB, None,
            "all-reduces up to this size ride in the header exchange (reduce-scatters and all-gathers up to a quarter)",
            f"{CPU2} and 4 ranks; {TUNE_FILE} re-measures it"),
    Setting("pair_inplace_bytes", 4 * MiB, None,
            "two ranks, in place: segments up to this size go as one message into scratch, larger vectors in "
            "blocks whose halves are this size",
            "bounds the scratch an in-place two-rank all-reduce takes; past it, blocks at 0.99x raw MPI's "
            "in-place 16 MiB all-reduce where the chunked ring was 0.86x (medians of three launches, "
            "bench/results/2026-12-03-cpu2e-in-place/tables.md)"),
    Setting("device_chunk_bytes", 16 * MiB, None, "the ring's chunk for device buffers (chunk_bytes left at default)",
            "one H200, 2 ranks: 64 MiB all-reduce 8967 us at 1 MiB chunks, 1123 us at 16 MiB; "
            "bench/results/2026-11-30-h200-run1/"),
    # the GPU kernel ring (collectives/gpu_ring): no GPU has run these kernels yet
    Setting("cuda_ring", 0, "COLLECTIVES_CUDA_RING",
            "device arrays take the GPU kernel ring where it can serve them (1), else the device ring",
            "off until a GPU run verifies the kernels on hardware (bench/gpu_check.sh --only kring)"),
    Setting("cuda_oneshot_max_bytes", 64 * KiB, None, "GPU all-reduces up to this size: the one-shot kernel",
            UNMEASURED),
    Setting("cuda_twoshot_max_bytes", 512 * KiB, None, "GPU all-reduces up to this size: the two-shot kernel",
            UNMEASURED),
    Setting("cuda_small_max_bytes", 64 * KiB, None, "GPU reduce-scatters and all-gathers up to this: one-shot",
            UNMEASURED),
    Setting("cuda_slots", 8, None, "the kernel ring's receive slots per channel", UNMEASURED),
    Setting("cuda_slot_bytes", 128 * KiB, None, "one receive slot (one step of one channel)", UNMEASURED),
    Setting("cuda_max_channels", 16, None, "channels (thread blocks) a workspace is built for", UNMEASURED),
    Setting("cuda_channel_min_bytes", 1 * MiB, None, "a channel per this many bytes of a rank's buffer",
            UNMEASURED),
    Setting("cuda_small_block_bytes", 32 * KiB, None, "one-/two-shot kernels: a block per this many bytes",
            UNMEASURED),
    Setting("async_grace_us", 200, "COLLECTIVES_ASYNC_GRACE_US",
            "queued calls are left to their caller's wait() until it has queued nothing for this long; then the "
            "progress thread takes them (0: the thread is woken for every call)",
            f"{CPU2}: an async 1 KiB dist.all_reduce 28.5-31.3 us with the thread woken per call, "
            "16.1-18.9 us with it waiting in C; bench/results/2026-12-04-cpu2f-async-gate/"),
    Setting("async_patience_us", 3200, "COLLECTIVES_ASYNC_PATIENCE_US",
            "the oldest queued call waits at most this long for its caller, however fast it queues more",
            f"{CPU2}: 64 async 1 KiB dist.all_reduce queued, then waited: bench/results/2026-12-06-cpu2g-async-batch/"),
    # the symmetric heap and the direct roads
    Setting("stage", "auto", "COLLECTIVES_STAGE",
            "ordinary host arrays copied into the heap: 0 never, 1 at every size on any node, auto below stage_max_*",
            "auto where measured to win: stage_ranks ranks of one node"),
    Setting("stage_ranks", 2, None, "the node size the stage_max_* limits were measured at (auto stages only there)",
            CPU2),
    Setting("stage_max_all_reduce", 1 * MiB, None, "staged all-reduces up to this size; larger ones take the ring",
            "2 ranks on a 2-core Intel VM (2 MiB L2, 480 MiB L3): one phase through the stage 1.42-1.51x raw MPI "
            "at 1 MiB, 0.95-0.97x at 1.5-2 MiB, where the staged-ring is 1.03-1.10x; bench/tune.py 1 MiB "
            "(bench/results/2026-12-06-cpu2g-baselines/two-mib.txt). The 2 MiB that bench/tune.py gave on the "
            f"first machine ({TUNE_FILE}) was measured on inputs never written, whose stage copy reads one zero page"),
    Setting("stage_max_reduce_scatter", 2 * MiB, None, "staged reduce-scatters up to this size",
            f"{CPU2}, C programs from the first line: staged 0.37-0.60x the time of the staged-ring at "
            f"1-2 MiB, 1.29x at 4 MiB; {TUNE_FILE}"),
    Setting("stage_max_all_gather", 1 * MiB, None,
            "staged all-gathers up to this piece size (pieces below cma_min_bytes, or all where cma is off)",
            f"{CPU2}, C programs from the first line (fast/lane.py): staged 1.6-2.5x raw MPI at 128 KiB-2 MiB "
            "out, read in place 1.0-1.1x; at 4 MiB out the three copies meet the edge of the 32 MiB L3 and lost "
            "to MPI in full sweeps (0.35-0.47x), at 16 MiB always (0.45-0.8x); "
            "bench/results/2026-12-01-cpu2-baselines/ag-stage-vs-cma.txt"),
    Setting("stage_max_broadcast", 2 * MiB, None, "staged broadcasts up to this size",
            f"{CPU2} (won at every size; the stage window is twice this on every rank); {TUNE_FILE}"),
    Setting("rs_parts_min_bytes", 512 * KiB, None,
            "staged reduce-scatters this large copy in only the segments peers read",
            f"{CPU2} (0.84x the time of a whole copy at 1 MiB, 0.71x at 4 MiB; no gain up to 256 KiB)"),
    Setting("one_phase_bytes", 32 * KiB, None, "direct all-reduces this small take one phase on any node",
            f"{CPU2}"),
    Setting("one_phase_2_bytes", 16 * MiB, None,
            "two ranks: one phase up to this size for heap inputs that neither push nor reduce in place",
            f"{CPU2} (1.4-1.7x faster at 64 KiB-1 MiB, even at 16 MiB, behind at 64 MiB)"),
    Setting("reduce_chunk_bytes", 64 * KiB, None, "a direct reduction's chunk: the partial sum stays in L2",
            "the L2 of the development machine's cores"),
    Setting("push_chunk_bytes", 256 * KiB, None, "a pushed chunk is written to every peer while it is in cache", CPU2),
    Setting("push_min_all_gather", 1 * MiB, None, "all-gathers from this size of out are pushed where they can be",
            f"{CPU2} (1.16-1.37x the pull from 1 MiB, 0.94-1.00x at 4-512 KiB); {TUNE_FILE}"),
    Setting("cma", 1, "COLLECTIVES_CMA",
            "all-gather pieces and broadcasts of private arrays read in place with process_vm_readv",
            "Linux only, where the kernel allows it (probed at setup)"),
    Setting("cma_min_bytes", 8 * KiB, None,
            "all-gather pieces and broadcasts from this size are read in place instead of staged",
            f"{CPU2} and on a second 2-core x86 machine (2 MiB L2, 480 MiB L3): read in place 1.0-1.1x raw MPI "
            "on the first, 1.00-1.45x at every size on the second; staged 1.6-2.5x on the first, 0.59-0.86x "
            "from 16 KiB pieces on the second; bench/results/2026-12-02-cpu2b-all-gather/, "
            "bench/results/2026-12-01-cpu2-baselines/ag-stage-vs-cma.txt; broadcasts on the second: "
            "bench/results/2026-12-02-cpu2b-broadcast/"),
    Setting("stream_min_bytes", 1 * MiB, "COLLECTIVES_STREAM_MIN",
            "copies this large into the caller's out (an all-gather's own piece, a piece from a peer's heap or "
            "stage window, a broadcast's) use streaming stores, which skip reading out's lines (0: never)",
            "2 ranks on a 2-core Intel VM (2 MiB L2, 300 MiB L3): one process alone copies 4-32 MiB at 20.0 GB/s "
            "with streaming stores, 17.1 with numpy, and 1 MiB (in L2) at 23.7 against 26.4; the all-gather of "
            "ordinary arrays at 16-64 MiB of out 1.05-1.10x raw MPI, where it was 1.01x (medians of three "
            "launches; bench/results/2026-12-07-cpu2h-stream/)"),
    Setting("pipe", 1, "COLLECTIVES_PIPE", "the pipe for staged all-reduces and all-gathers from pipe_min_* (0: never)",
            CPU2),
    Setting("pipe_min_all_reduce", 0, "COLLECTIVES_PIPE_MIN",
            "staged all-reduces from this size take the pipe (0: never; they take the staged-ring)",
            "never by default: the pipe swings within one launch between 6 and 19 ms a 32 MiB call, 10 and 47 ms "
            "a 64 MiB one, on a 2-core machine with a 32 MiB L3, 1.05-3.54x raw MPI in four launches, where the "
            "staged-ring is 2.98-3.71x in every launch (bench/results/2026-12-03-cpu2d-pipe-ag/rounds-ar.txt); "
            f"on the first machine it won from 4 MiB, 1.26-2.1x the staged-ring ({TUNE_FILE}), on a 480 MiB-L3 "
            "one only at 64 MiB, 1.19x (bench/results/2026-12-02-cpu2b-tune/tune-n2.json): a tuning file "
            "(bench/tune.py --only pipe) may set it there"),
    Setting("pipe_min_all_gather", 0, "COLLECTIVES_PIPE_MIN", "staged all-gathers from this size of out take the pipe "
            "(0: never; they read in place)",
            "never by default: at 64 MiB of out the pipe swings within one launch between 8 and 25 ms a call on two "
            "2-core machines with a 32 MiB L3 (0.35-0.44x raw MPI in four launches on the fourth, 0.79-0.94x in "
            "sweeps on the first), where reading in place is 0.98-1.05x, bound by the same copies as MPI; "
            "bench/results/2026-12-03-cpu2d-pipe-ag/, bench/results/2026-12-02-cpu2-baselines/; 1.05-1.18x MPI "
            "on machines with a 105 and a 480 MiB L3 (bench/results/2026-12-02-cpu2c-baselines/, "
            "bench/results/2026-12-02-cpu2b-baselines/): a tuning file may set it there"),
    Setting("pipe_chunk_bytes", 256 * KiB, "COLLECTIVES_PIPE_CHUNK", "the pipe's chunk (whole cache lines)",
            f"{CPU2} (128 KiB-1 MiB chunks within a few percent)"),
    Setting("pipe_depth", 4, None, "the pipe's slots per rank", f"{CPU2} (2-8 deep within a few percent)"),
    Setting("fast", 1, "COLLECTIVES_FAST", "repeated direct calls run as C programs (0: always in Python)",
            f"{CPU2} (1 KiB all-reduce 12.7 -> ~4.5 us); bench/results/2026-11-30-cpu2-programs/"),
    Setting("fast_max_bytes", 1 * MiB, None, "C programs for reductions up to this size",
            f"{CPU2} (a staged 512 KiB-1 MiB all-reduce 1.45-1.87x MPI's time in C, 1.10-1.26x in Python)"),
    Setting("fast_max_copy_bytes", 64 * MiB, None, "C programs for all-gathers and pushed all-reduces up to this size",
            f"{CPU2} (the pushed all-reduce in C 1.07-1.16x the Python push at 2-16 MiB)"),
    Setting("torch_lane", 1, "COLLECTIVES_TORCH_LANE",
            "the torch group's blocking one-tensor calls read in C++ (0: the Python methods)",
            f"{CPU2} (the group's share of a 1 KiB dist.all_reduce 2-3 -> 0.3-0.8 us); "
            "bench/results/2026-12-02-cpu2-torch-lane/"),
    Setting("node_size", 0, "COLLECTIVES_NODE_SIZE",
            "treat every k consecutive ranks as one node (0: the ranks that share a host)", "for tests on one machine"),
    Setting("shm_dir", "/dev/shm", "RINGZERO_SHM_DIR", "where the heap's shared-memory segments live",
            "POSIX shared memory on Linux"),
    Setting("host_cxx", "g++", "CXX", "the C++ compiler of the GPU kernels' host build (gpu_ring/host.py)",
            "any g++ or clang++ with -pthread (and -fsanitize=thread for the TSan run)"),
    Setting("host_cache", "", "RZ_HOST_CACHE", "where the host build's libraries are cached (empty: a temp folder)",
            "a cache: built once per source hash"),
    # how a torch backend's ranks meet (bootstrap/choose.py)
    Setting("world", "auto", "RINGZERO_WORLD",
            "mpi: the MPI launcher's world; store: torch's store and Gloo, never MPI; auto: from the launcher",
            "auto follows the launcher's variables (LAUNCHER_VARS; bootstrap/choose.py)"),
    # waiting
    Setting("spin_s", 20e-3, None, "a caller's wait spins this long (with a core per rank) before it yields",
            f"{CPU2}: yielding at once with a core per rank was 2x slower"),
    Setting("thread_spin_s", 1e-3, None, "the progress thread, with a spare core, spins this long", CPU2),
    Setting("yield_s", 2e-3, None, "then a wait yields the core this long before it sleeps", CPU2),
    Setting("max_sleep_s", 200e-6, None, "the longest sleep between polls (a late message costs at most this)",
            "bounds the latency a sleeping wait adds"),
    # what a call takes, and what is recorded
    Setting("road", "", "COLLECTIVES_ROAD",
            "force a road: a name (every collective it serves) or collective:name,... (roads.py)", "tests, benchmarks"),
    Setting("trace", "", "COLLECTIVES_TRACE", "write a Chrome trace per rank to this path at exit", "teach/trace.py"),
    Setting("ipc_stream_waits", 1, "RINGZERO_IPC_STREAM_WAITS",
            "IPC ordering by stream waits on the GPU (0: host polls of events)",
            "one H200: host polls cost ~220 us a chunk; bench/results/2026-11-30-h200-run2/"),
)
BY_NAME = {s.name: s for s in SETTINGS}


class Tuning:
    """The settings' values, as attributes (``tuning.pipe_chunk_bytes``), and where each came from."""

    def __init__(self, values: dict, origins: dict):
        self.__dict__.update(values)
        self._origins = origins

    def origin(self, name: str) -> str:
        """"default", the tuning file's path, or the environment variable that set ``name``."""
        return self._origins[name]

    def stage_max(self) -> dict:
        """Per collective, the largest staged call (auto staging)."""
        return {k: getattr(self, "stage_max_" + k) for k in DATA_COLLECTIVES}

    def pipe_min(self) -> dict:
        return {"all_reduce": self.pipe_min_all_reduce, "all_gather": self.pipe_min_all_gather}


def _parse(s: Setting, text: str):
    if isinstance(s.default, str):
        return text
    try:
        return type(s.default)(float(text)) if isinstance(s.default, int) else float(text)
    except ValueError:
        raise ValueError(f"{s.env}={text!r}: {s.name} must be a number ({s.doc})") from None


def tuning_file(environ=None) -> Path | None:
    """The tuning file to read: ``RINGZERO_TUNING``, else ``~/.config/ringzero/tuning.json`` if it exists."""
    env = os.environ if environ is None else environ
    given = env.get("RINGZERO_TUNING")
    if given:
        return Path(given)
    home = Path(env.get("HOME", "~")).expanduser() / ".config" / "ringzero" / "tuning.json"
    return home if home.exists() else None


_FILES: dict = {}  # (path, mtime) -> its values: a Communicator per call reads no file twice


def _read(path: Path) -> dict:
    key = (str(path), path.stat().st_mtime_ns)
    got = _FILES.get(key)
    if got is None:
        data = json.loads(path.read_text())
        values = data.get("values", data)
        unknown = sorted(set(values) - set(BY_NAME))
        if unknown:
            raise ValueError(f"tuning file {path}: unknown settings {unknown}; known: {', '.join(BY_NAME)}")
        got = _FILES[key] = {k: type(BY_NAME[k].default)(v) for k, v in values.items()}
    return got


def load(environ=None, **overrides) -> Tuning:
    """The settings now: defaults, the tuning file, the environment, then ``overrides`` (keyword: value)."""
    env = os.environ if environ is None else environ
    values = {s.name: s.default for s in SETTINGS}
    origins = dict.fromkeys(values, "default")
    path = tuning_file(env)
    if path is not None:
        try:
            values.update(_read(path))
        except OSError as e:
            raise ValueError(f"RINGZERO_TUNING: cannot read {path}: {e}") from None
        origins.update(dict.fromkeys(_read(path), str(path)))
    for s in SETTINGS:
        text = env.get(s.env, "") if s.env else ""
        if text != "":
            values[s.name] = _parse(s, text)
            origins[s.name] = s.env
    for k, v in overrides.items():
        if k not in BY_NAME:
            raise TypeError(f"unknown setting {k!r}")
        values[k], origins[k] = v, "argument"
    return Tuning(values, origins)


def defaults() -> Tuning:
    """The built-in values alone (no file, no environment): for objects made outside a Communicator."""
    return Tuning({s.name: s.default for s in SETTINGS}, dict.fromkeys(BY_NAME, "default"))


# What launchers set in each process's environment, which bootstrap/choose.py reads to tell how
# the processes were started: Open MPI (mpirun, prterun), MPICH's and Intel MPI's Hydra (PMI),
# Slurm with PMIx (srun --mpi=pmix), torchrun (TORCHELASTIC_*) and torch's env:// rendezvous.
LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS", "TORCHELASTIC_RUN_ID",
                 "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")


def launcher(environ=None) -> dict[str, str]:
    """The launcher variables (LAUNCHER_VARS) set in the environment, by name."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in LAUNCHER_VARS if env.get(k, "") != ""}


def main() -> None:
    t = load()
    for s in SETTINGS:
        env = f" [{s.env}]" if s.env else ""
        print(f"{s.name} = {getattr(t, s.name)!r} ({t.origin(s.name)}){env}\n    {s.doc}\n    measured: {s.source}")
