#!/usr/bin/env bash
# make gpu-check: on a machine with an NVIDIA GPU, in under 5 minutes:
#   1. install the gpu extra (cupy-cuda12x, nvidia-nccl-cu12) into .venv
#   2. GPU tests: every kernel against its numpy reference; every collective
#      on cupy arrays with 1, 2 and 4 ranks through CUDA IPC and host staging
#   3. kernel benchmark: reduce / cast / fused AdamW GB/s against a device copy
#   4. collectives benchmark: ring vs NCCL (NCCL at 1 rank per GPU only)
# Results go under bench/results/gpu-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
OUT="bench/results/gpu-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
step() { echo; echo "== $* ($(date +%T))"; }

step "install the gpu extra"
$BIN/pip install -q -r requirements-gpu.txt
NGPU=$($BIN/python -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())")
$BIN/python -c "import cupy; p = cupy.cuda.runtime.getDeviceProperties(0); print(p['name'].decode(), '| GPUs:', cupy.cuda.runtime.getDeviceCount())" | tee "$OUT/device.txt"

step "GPU tests (kernels vs numpy references, collectives under mpirun on 1/2/4 ranks)"
timeout 150 $BIN/python -m pytest -q -rs tests/test_cuda_kernels.py tests/test_cuda_mpi.py \
    --junitxml="$OUT/gpu-tests.xml" 2>&1 | tee "$OUT/gpu-tests.txt"

step "kernel benchmark (1 GiB f32 buffers)"
timeout 60 $BIN/python bench/kernels.py --bytes 1G --iters 20 --json "$OUT/kernels.json" | tee "$OUT/kernels.txt"

step "collectives benchmark"
BENCH="$BIN/python bench/collectives.py -b 1K -e 64M -f 4 --op all_reduce,reduce_scatter,all_gather --dtype float32 --device cuda"
if [ ! -f bench/collectives.py ]; then
    echo "bench/collectives.py is missing: skipping the collectives benchmark" | tee "$OUT/collectives.txt"
elif [ "$NGPU" -ge 2 ]; then
    for n in 1 2 4 8; do
        [ "$n" -le "$NGPU" ] || break
        timeout 60 $BIN/mpirun -n $n $BENCH --algorithm ring,nccl --json "$OUT/collectives-n$n.json" | tee -a "$OUT/collectives.txt"
    done
else
    # NCCL refuses several ranks on one GPU: compare at 1 rank, report the multi-rank ring alone.
    timeout 45 $BIN/mpirun -n 1 $BENCH --algorithm ring,nccl --json "$OUT/collectives-n1.json" | tee -a "$OUT/collectives.txt"
    for n in 2 4; do
        timeout 45 $BIN/mpirun -n $n $BENCH --algorithm ring --json "$OUT/collectives-n$n.json" | tee -a "$OUT/collectives.txt"
    done
fi
step "done: results in $OUT"
