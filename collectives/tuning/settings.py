"""The settings' table: every threshold, chunk size and switch, its default, its environment
variable, what it decides and where its default was measured (``tuning.load`` reads it)."""
from __future__ import annotations

from dataclasses import dataclass

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
    Setting("stage_max_all_reduce", 1720 * KiB, None,
            "staged all-reduces up to this size; larger ones are read in place (in place, private arrays, "
            "where the kernel allows process_vm_readv) or take the ring",
            "2 ranks on a 2-core Intel VM (2 MiB L2, 300 MiB L3): bench/tune.py (in place, staged against read in "
            "place, four sizes an octave) 1720 KiB in three runs; in place the stage is 1.20x raw MPI's "
            "MPI.IN_PLACE all-reduce at 1200 KiB and 1.01x at 1500 KiB where the read in place is 0.91x and "
            "0.85x (medians of three launches; bench/results/2026-12-07-cpu2h-stage-limit/). Out of place it "
            "governs only where process_vm_readv is refused: the stage 1.13x raw MPI at 1500 KiB against "
            "the staged-ring's 1.18x there"),
    Setting("stage_max_reduce_scatter", 1 * MiB, None, "staged reduce-scatters up to this size",
            f"the value that holds on both machines measured: on the first ({CPU2}, C programs from the first "
            f"line) staged took 0.37-0.60x the staged-ring's time at 1-2 MiB, 1.29x at 4 MiB ({TUNE_FILE}); on "
            "a 2-core Intel VM (2 MiB L2, 300 MiB L3) 1.00x at 1 MiB and 1.25x at 2 MiB, where a 1 MiB limit "
            "takes the 1.5-2 MiB reduce-scatter from 2.08-2.09x raw MPI to 2.60-2.81x (medians of three "
            "launches; bench/results/2026-12-07-cpu2h-tune/)"),
    Setting("stage_max_all_gather", 1 * MiB, None,
            "staged all-gathers up to this piece size (pieces below cma_min_bytes, or all where cma is off)",
            f"{CPU2}, C programs from the first line (fast/lane.py): staged 1.6-2.5x raw MPI at 128 KiB-2 MiB "
            "out, read in place 1.0-1.1x; at 4 MiB out the three copies meet the edge of the 32 MiB L3 and lost "
            "to MPI in full sweeps (0.35-0.47x), at 16 MiB always (0.45-0.8x); "
            "bench/results/2026-12-01-cpu2-baselines/ag-stage-vs-cma.txt"),
    Setting("stage_max_in_place", 0, "COLLECTIVES_STAGE_MAX_IN_PLACE",
            "in-place all-gathers (x inside out, FSDP2's form) with pieces up to this size are staged, past "
            "cma_min_bytes too (no wait for readers); larger pieces are read in place (0: from cma_min_bytes, "
            "as out of place)",
            "2 ranks on a 2-core Intel VM (2 MiB L2, 300 MiB L3): read in place 1.00-1.78x raw MPI's in-place "
            "all-gather at every size, staged 0.40-0.97x at 16 KiB-1 MiB of out (medians of three launches; "
            "bench/results/2026-12-07-cpu2h-in-place/); "
            "on an AMD EPYC VM (32 MiB L3) staged won, 4.6-5.4x at 16 KiB and 2.1x at 1 MiB against 1.04-1.3x "
            "(bench/results/2026-12-03-cpu2e-in-place/): bench/tune.py --only cma measures it"),
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
    Setting("cma_max_all_reduce", 256 * MiB, "COLLECTIVES_CMA_MAX_ALL_REDUCE",
            "private all-reduces past stage_max_all_reduce (out of place: from cma_min_all_reduce) and up to this "
            "size are read in place: every rank reduces its segment into out from its peers' x "
            "(process_vm_readv), then reads their reduced segments from their out (0: never)",
            "2 ranks on a 2-core Intel VM (2 MiB L2, 300 MiB L3), medians of three launches: in place 1.17-3.00x "
            "raw MPI from 3 to 64 MiB, where the staged-ring is 0.84-2.23x (0.84x at 1.5 MiB against 0.74x); "
            "out of place 1.44-2.82x from 1 to 48 MiB against 1.16-2.69x, 2.41x at 64 MiB against 2.64x; "
            "level at 256 MiB in place (bench/results/2026-12-07-cpu2h-cma-all-reduce/)"),
    Setting("cma_min_all_reduce", 256 * KiB, "COLLECTIVES_CMA_MIN_ALL_REDUCE",
            "private all-reduces out of place from this size are read in place as past stage_max_all_reduce "
            "(in place, staged up to stage_max_all_reduce)",
            "2 ranks on a 2-core Intel VM: out of place read in place 1.44-1.52x raw MPI from 256 KiB to 1 MiB "
            "against 1.16-1.39x staged (medians of three launches), 0.92-1.01x at 160-200 KB in single launches; "
            "in place the stage wins below its limit (a peer's just-written x reads slower) (bench/results/2026-12-07-cpu2h-cma-all-reduce/)"),
    Setting("cma_chunk_bytes", 512 * KiB, "COLLECTIVES_CMA_CHUNK",
            "an all-reduce read in place reads each peer's segment in chunks of this size into scratch, reduced "
            "while in cache",
            "2 ranks on a 2-core Intel VM (2 MiB L2): the best of 128 KiB-1 MiB at 4-16 MiB, single launches "
            "(bench/results/2026-12-07-cpu2h-cma-all-reduce/README.md)"),
    Setting("stream_min_bytes", 0, "COLLECTIVES_STREAM_MIN",
            "copies and reductions this large into the caller's out (an all-gather's own piece, a piece from a "
            "peer's heap or stage window, a broadcast's, a one-phase all-reduce's or a reduce-scatter's result) "
            "use streaming stores, which skip reading out's lines and leave them out of cache (0: never)",
            "never by default: on a 2-core Intel VM (2 MiB L2, 300 MiB L3), from 1 MiB the calls alone are "
            "faster (the all-gather at 16-64 MiB 1.05-1.10x raw MPI against 1.01x, the 1 MiB all-reduce 127.5 "
            "against 139.2 us), but the caller's read of out after each call pays more than that: with "
            "--consume the 4-16 MiB all-gather is 0.79x raw MPI and the 1 MiB all-reduce 0.85x, against "
            "1.01x and 1.15x with ordinary stores (bench/results/2026-12-07-cpu2h-stream/, "
            "bench/results/2026-12-07-cpu2h-sreduce/). Where out is much larger than the last-level cache, or "
            "not read soon, a tuning file may set it"),
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
    Setting("fast_max_bytes", 64 * MiB, None, "C programs for reductions up to this size",
            f"{CPU2} (a staged 512 KiB-1 MiB all-reduce 1.45-1.87x MPI's time in C, 1.10-1.26x in Python); "
            "on a 2-core Intel VM heap reduce-scatters of 4-16 MiB 1.04-1.16x faster in C than in Python, "
            "64 MiB level (bench/results/2026-12-07-cpu2h-sreduce/)"),
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
