#!/bin/sh
# The all-reduce between 1 and 4 MiB on ordinary arrays, the default road (auto staging: one
# phase through the stage window up to stage_max_all_reduce, 2 MiB) and each road forced, beside
# raw MPI; then bench/tune.py's own measurement of the staging limit (15 rounds). Run from the root.
set -e
D=bench/results/2026-12-06-cpu2g-baselines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2"
{
  echo "## default"
  $M .venv/bin/python bench/collectives.py -b 1M -e 4M -f 1.4142 --op all_reduce --algorithm ring,mpi | grep -E " ring |lowest"
  for r in one-phase direct staged-ring; do
    echo "## COLLECTIVES_ROAD=all_reduce:$r"
    COLLECTIVES_ROAD=all_reduce:$r $M -x COLLECTIVES_ROAD .venv/bin/python bench/collectives.py -b 1M -e 4M -f 1.4142 \
      --op all_reduce --algorithm ring,mpi | grep -E " ring |lowest"
  done
  echo "## bench/tune.py --only stage --rounds 15 (time staged / time staged-ring)"
  $M .venv/bin/python bench/tune.py --only stage --rounds 15 | grep -E "^stage_max"
} > $D/two-mib.txt 2>&1
