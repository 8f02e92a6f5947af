#!/bin/bash
# async dist.* calls (async_op=True, waited at once) against raw MPI, 2 ranks, one launch each:
# the checkout before the cheaper Work and queue (a worktree at BEFORE) and after (this checkout).
# usage: BEFORE=/path/to/worktree bash run.sh   (from the repository root)
set -e
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
out=bench/results/2026-12-04-cpu2f-async-queue
args="-b 1K -e 1M -f 4 --op all_reduce,reduce_scatter,all_gather --algorithm mpi,torch --async-op -r 5"
for i in 1 2; do
  (cd "$BEFORE" && .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py $args) > $out/before-$i.txt
  .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py $args > $out/after-$i.txt
  (cd "$BEFORE" && .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py $args --fresh) > $out/before-fresh-$i.txt
  .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py $args --fresh > $out/after-fresh-$i.txt
done
