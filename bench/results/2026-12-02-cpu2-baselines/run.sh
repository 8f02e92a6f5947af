#!/bin/sh
# The baselines' acceptance sweeps, three launches each, taking turns: ring against raw MPI, MPI behind
# our API and DeepSpeed's raw op on the same arrays, then ring against raw MPI with fresh views per
# call; 2 ranks. DeepSpeed comes from `make bench-peers`. Run from the checkout's root.
set -e
D=bench/results/2026-12-02-cpu2-baselines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
for i in 1 2 3; do
  .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py -b 1K -e 64M -f 4 \
    --algorithm ring,mpi,mpi-api,deepspeed --json $D/sweep-$i.json > $D/sweep-$i.txt 2>&1
  .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py -b 1K -e 64M -f 4 \
    --algorithm ring,mpi --fresh --json $D/fresh-$i.json > $D/fresh-$i.txt 2>&1
done
