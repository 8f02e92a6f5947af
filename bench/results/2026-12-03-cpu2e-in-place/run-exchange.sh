#!/bin/sh
# The 4 MiB in-place all-reduce: ours against the same exchange in bare mpi4py calls and raw MPI,
# three launches (exchange.py), into exchange.txt; then where its time goes (split.py), into split.txt.
# Run from the checkout's root.
set -e
D=bench/results/2026-12-03-cpu2e-in-place
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
for i in 1 2 3; do
  echo "## launch $i, 4 MiB"
  .venv/bin/mpirun -n 2 .venv/bin/python $D/exchange.py 4194304
done > $D/exchange.txt 2>&1
for i in 1 2 3; do
  echo "## launch $i, 4 MiB"
  .venv/bin/mpirun -n 2 .venv/bin/python $D/split.py 4194304
done > $D/split.txt 2>&1
