"""Every collective on cupy arrays under mpirun, through the device transport's modes.

    mpirun -n N python tests/mpi/gpu_collectives.py MODE [--bench] [--json PATH]

MODE: ipc, ipc-poll (IPC with host-polled events instead of stream waits, the
first run's protocol), staged, cuda_aware, auto, or all (ipc, ipc-poll, staged,
and cuda_aware when the MPI library says it takes device pointers), or a
comma-separated list (ipc,ipc-poll). Ranks share the GPUs
round-robin (several per GPU when N exceeds them). Inputs are integer-valued
so any summation order is exact. Rank 0 prints one PASS/FAIL line per mode
(and "rank r: OK mode=..." lines per rank, which tests/test_cuda_mpi.py counts).

--bench: then times all-reduce, reduce-scatter and all-gather of --bench-bytes
(64 MiB) of float32 per mode, with the library's default chunk for device buffers and with
4 MiB and 512 KiB chunks, and prints busbw beside a device-to-device copy of
the same size measured in the same run (the roofline: no ring on one GPU moves
data faster than a copy does). INFO lines; the records go to --json.
Where the time goes: one more call of each is profiled (DeviceTransport.profile:
per message, the time waiting for the producer's event, the peer's control
message, the copy, the ack; plus the reduce launches and the GPU's own busy
time), printed as "INFO ring-MODE-profile" lines for rank 0; and three probes
per mode: a host-polled event round trip on an idle GPU, an MPI ping-pong of
a 96-byte control message, and a device message ping-pong (1 MiB) through
the transport ("INFO ring-MODE-probe"). RZ_RING_TAG=x names the lines ring-x-MODE
(gpu_check.sh's mps step).

On the host stand-in for cupy (bench/stand_in.py) the IPC modes, and auto where it picks
IPC, print "INFO ring-MODE: not on the host stand-in" (it has no CUDA IPC handles or
libcuda); staged and cuda_aware run for real, and the bench's figures say they are the
stand-in's.
"""
import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import cupy as cp
import numpy as np
from mpi4py import MPI

from collectives import Communicator
from collectives.bootstrap.mpi import MpiBootstrap
from collectives.dtypes import bfloat16
from collectives.kernels.cuda_kernels import cuda_kernels
from collectives.transport.device import Profile, cuda_aware_mpi, make_device_transport

sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # appended: bench/collectives.py is not the package
from stand_in import not_on_host, on_host_stand_in  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("mode")
ap.add_argument("--bench", action="store_true")
ap.add_argument("--bench-bytes", type=int, default=64 << 20, help="the bench's buffer (default 64 MiB)")
ap.add_argument("--json", default=None)
args = ap.parse_args()
STAND_IN = on_host_stand_in(cp)
FIGURES = " [host stand-in: timings mean nothing]" if STAND_IN else ""
world = MPI.COMM_WORLD
r, n = world.Get_rank(), world.Get_size()
cp.cuda.Device(r % cp.cuda.runtime.getDeviceCount()).use()


def say(s):
    if r == 0:
        print(s, flush=True)


def check_all(comm):
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.float16, bfloat16):
        for count in (0, 1, 1000 + 3, 1 << 20):
            base = (np.arange(count) % 13).astype(np.float32)
            x = cp.asarray((base * (r + 1)).astype(dtype))
            got = comm.all_reduce(x)
            want = (base * (n * (n + 1) // 2)).astype(dtype)
            assert np.array_equal(cp.asnumpy(got).astype(np.float64), want.astype(np.float64)), (dtype, count)
            got = comm.all_reduce(cp.asarray(np.full(count, r, dtype)), op="max")
            assert (cp.asnumpy(got).astype(np.float64) == n - 1).all(), (dtype, count, "max")
            counts = [count // n + (i < count % n) for i in range(n)]
            rs = comm.reduce_scatter(x, counts=counts)
            off = sum(counts[:r])
            assert np.array_equal(cp.asnumpy(rs).astype(np.float64),
                                  want[off:off + counts[r]].astype(np.float64)), (dtype, count, "reduce_scatter")
            ag = comm.all_gather(cp.asarray(np.full(counts[r], r, dtype)), counts=counts)
            assert np.array_equal(cp.asnumpy(ag).astype(np.float64),
                                  np.repeat(np.arange(n), counts).astype(np.float64)), (dtype, count, "all_gather")
            bc = comm.broadcast(cp.asarray(np.full(count, r, dtype)), root=n - 1)
            assert (cp.asnumpy(bc).astype(np.float64) == n - 1).all(), (dtype, count, "broadcast")
    cp.cuda.Stream.null.synchronize()


def timed(fn, iters=10):
    fn()
    cp.cuda.runtime.deviceSynchronize()
    world.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    cp.cuda.runtime.deviceSynchronize()
    return world.allreduce((time.perf_counter() - t0) / iters, op=MPI.MAX)


def copy_gbps(nbytes):
    a, b = cp.ones(nbytes // 4, cp.float32), cp.empty(nbytes // 4, cp.float32)
    t = timed(lambda: cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, 3, cp.cuda.Stream.null.ptr))
    return 2 * nbytes / t / 1e9  # read + write


TAG = f"{os.environ['RZ_RING_TAG']}-" if os.environ.get("RZ_RING_TAG") else ""


def profiled(comm, dt, fn):
    """One call of fn with the transport's profile on and the reduce launches timed:
    (host us, GPU busy us between events around it, Profile)."""
    prof = dt.profile = Profile()
    k = cuda_kernels(cp.cuda.Device().id)  # the set kernels_for gives this rank's arrays
    plain = k.reduce
    k.reduce = lambda *a: prof.timed("kernel.reduce_launch", plain, *a)
    try:
        cp.cuda.runtime.deviceSynchronize()
        world.Barrier()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(cp.cuda.Stream.null)
        t0 = time.perf_counter()
        fn()
        host = time.perf_counter() - t0
        e1.record(cp.cuda.Stream.null)
        e1.synchronize()
        return host * 1e6, cp.cuda.get_elapsed_time(e0, e1) * 1e3, prof
    finally:
        del k.reduce
        dt.profile = None


def probes(dt, mode, records):
    """Per-message costs under the ring: an event round trip, an MPI control message, a device message."""
    def median_us(fn, iters=30):
        fn()
        world.Barrier()
        ts = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return float(np.median(ts)) * 1e6

    def event_trip():
        ev = cp.cuda.Event(disable_timing=True)
        ev.record(cp.cuda.Stream.null)
        deadline = time.monotonic() + 10
        while not ev.done:
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {r}: an event on an idle GPU not done in 10 s")
    out = {}
    out["event_round_trip_us"] = median_us(event_trip)  # the peer idles in the barrier... then polls too
    peer = 1 - r if n == 2 else None
    if peer is not None:
        msg = np.zeros(12, np.int64)

        def ping(nbytes):
            buf = cp.ones(nbytes // 4, cp.float32)

            def one():
                first, second = (dt.isend, dt.irecv) if r == 0 else (dt.irecv, dt.isend)
                for op, tag in ((first, 7), (second, 8)):
                    h = op(buf, peer, tag)
                    deadline = time.monotonic() + 10
                    while not dt.test(h):
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"rank {r}: probe message tag {tag} with rank {peer} not done in 10 s")
            return one
        out["mpi_ctrl_pingpong_us"] = median_us(lambda: (world.Send(msg, peer, 5), world.Recv(msg, peer, 6))
                                                if r == 0 else (world.Recv(msg, peer, 5), world.Send(msg, peer, 6)))
        out["device_1MiB_pingpong_us"] = median_us(ping(1 << 20), iters=20)
    rec = world.allgather(out)
    records.append(dict(mode=mode, probe=True, ranks=n, per_rank=rec))
    say(f"INFO ring-{TAG}{mode}-probe: rank 0: " + ", ".join(f"{k} {v:.0f}" for k, v in rec[0].items())
        + f" (a device ping-pong is two messages; each includes an event round trip or more){FIGURES}")


def bench(comm, dt, mode, chunk, copy_bw, records):
    nbytes = args.bench_bytes
    count = nbytes // 4
    x = cp.ones(count, cp.float32)
    out = cp.empty(count, cp.float32)
    shard = cp.ones(count // n, cp.float32)
    cases = {"all_reduce": (lambda: comm.all_reduce(x, out=out), 2 * (n - 1) / n),
             "reduce_scatter": (lambda: comm.reduce_scatter(x), (n - 1) / n),
             "all_gather": (lambda: comm.all_gather(shard, out=out), (n - 1) / n)}
    for op, (fn, factor) in cases.items():
        t = timed(fn)
        busbw = nbytes / t / 1e9 * factor
        host_us, gpu_us, prof = profiled(comm, dt, fn)
        rec = dict(mode=mode, op=op, bytes=nbytes, chunk_bytes=chunk, ranks=n, time_us=t * 1e6, busbw=busbw,
                   copy_gbps=copy_bw, fraction_of_copy=busbw / copy_bw,
                   profile=dict(host_us=host_us, gpu_span_us=gpu_us, phases=prof.summary()))
        records.append(rec)
        say(f"INFO ring-{TAG}{mode}: {op} {nbytes >> 20} MiB f32, chunk {chunk >> 10} KiB: {t * 1e6:.0f} us, busbw "
            f"{busbw:.0f} GB/s = {busbw / copy_bw:.1%} of the copy ({copy_bw:.0f} GB/s){FIGURES}")
        say(f"INFO ring-{TAG}{mode}-profile: {op} chunk {chunk >> 10} KiB, rank 0, one call {host_us:.0f} us "
            f"(GPU events around it {gpu_us:.0f} us): {prof.line()}{FIGURES}")


modes = args.mode.split(",")  # one mode, or several: ipc,ipc-poll
if args.mode == "all":
    aware = world.allreduce(int(cuda_aware_mpi()[0]), op=MPI.MIN)
    say(f"INFO ring: CUDA-aware MPI: {cuda_aware_mpi()[1]}")
    modes = ["ipc", "ipc-poll", "staged"] + (["cuda_aware"] if aware else [])
records, failed = [], False
copy_bw = copy_gbps(args.bench_bytes) if args.bench else None
for mode in modes:
    ok, why = True, ""
    t0 = time.perf_counter()
    if STAND_IN and mode.startswith("ipc"):
        say(not_on_host(f"ring-{TAG}{mode}", "it has no CUDA IPC handles or libcuda (one node's device-to-device "
                                             "road); staged and cuda_aware run here"))
        continue
    bs = MpiBootstrap(world)  # auto agrees over it
    dt = make_device_transport(bs.transport(), mode.partition("-")[0], bootstrap=bs)
    if STAND_IN and dt.mode == "ipc":  # auto on one node
        say(not_on_host(f"ring-{TAG}{mode}", "it picks CUDA IPC on one node, and the stand-in has no IPC handles"))
        dt.close()
        continue
    if mode == "ipc-poll":  # the first run's IPC protocol: host polls of events, not stream waits
        dt.stream_waits = False
    comm = Communicator(transport=dt, timeout=10, chunk_bytes=256 * 1024)  # several chunks at 1M elements
    try:
        check_all(comm)
    except Exception as e:  # the other rank times out of its collective and reports too
        ok, why = False, f"{type(e).__name__}: {e}"
        traceback.print_exc()
    whys = world.allgather(why)
    all_ok = not any(whys)
    if ok:
        print(f"rank {r}: OK mode={dt.mode}", flush=True)
    # the root cause first: a rank's own error before the timeouts it caused on its peers
    causes = sorted((("Timeout" in w), i, w) for i, w in enumerate(whys) if w)
    say(f"{'PASS' if all_ok else 'FAIL'} ring-{TAG}{mode}: every collective, 6 dtypes, counts 0..1M, {n} ranks "
        f"({time.perf_counter() - t0:.1f} s){'' if all_ok else f': rank {causes[0][1]}: {causes[0][2]}'}")
    failed |= not all_ok
    if mode.startswith("ipc") and all_ok and n > 1:
        st = dt.backend.stats
        say(f"INFO ipc-signals ({mode}): rank 0 recorded {st['signals']} interprocess events and queued "
            f"{st['signal_waits']} stream waits on its peers' (stream_waits={dt.stream_waits})")
    if mode == "ipc" and all_ok and n > 1:  # one IPC handle per allocation, not per message (backend caches)
        st = dt.backend.stats
        cached = 0 < st["handles_made"] < st["exports"] and st["mappings_opened"] < st["pulls"]
        every = world.allreduce(int(cached), op=MPI.MIN)
        say(f"{'PASS' if every else 'FAIL'} ipc-cache: rank 0 exported {st['exports']} messages with "
            f"{st['handles_made']} IPC handles, pulled {st['pulls']} through {st['mappings_opened']} mappings")
        failed |= not every
    comm.close()
    if args.bench and all_ok:
        try:
            probes(dt, mode, records)
        except Exception as e:
            say(f"FAIL ring-{TAG}{mode}-probe: {type(e).__name__}: {e}")
            failed = True
        for chunk in (None, 4 << 20, 512 << 10):
            kw = {} if chunk is None else {"chunk_bytes": chunk}
            bc = Communicator(transport=dt, timeout=10, **kw)
            try:
                bench(bc, dt, mode, chunk or bc.device_chunk_bytes, copy_bw, records)
            except Exception as e:
                say(f"FAIL ring-{TAG}{mode}-bench: {type(e).__name__}: {e}")
                failed = True
            bc.close()
    dt.close()
if args.json and r == 0:
    with open(args.json, "w") as f:
        json.dump(records, f, indent=1)
sys.exit(1 if failed else 0)
