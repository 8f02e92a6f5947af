#!/bin/sh
# Beside run.sh, two launches each: heap arrays (comm.alloc, --symmetric) for every algorithm, the
# all-reduce beside raw MPI and DeepSpeed's raw op (heap-N); the large all-gathers beside the
# copies alone (--algorithm copy, bench/copy_floor.py: the floor under any algorithm) (ceiling-N).
# Run from the checkout's root.
set -e
D=bench/results/2026-12-06-cpu2g-baselines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py"
for i in 1 2; do
  $M -b 1K -e 64M -f 4 --op all_reduce --algorithm ring,mpi,deepspeed --symmetric --json $D/heap-$i.json > $D/heap-$i.txt 2>&1
  $M -b 4M -e 64M -f 4 --op all_gather --algorithm ring,mpi,copy --json $D/ceiling-$i.json > $D/ceiling-$i.txt 2>&1
done
{
  echo "## heap arrays: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/heap-[0-9].json --vs deepspeed
  echo; echo "## heap arrays: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/heap-[0-9].json --vs mpi
  echo; echo "## all-gather against the copies alone (> 1: faster than the copies)"; .venv/bin/python bench/ratios.py $D/ceiling-[0-9].json --vs copy
  echo; echo "## all-gather: raw MPI against the copies alone"; .venv/bin/python bench/ratios.py $D/ceiling-[0-9].json --vs copy --algorithm mpi
} > $D/extra.md
