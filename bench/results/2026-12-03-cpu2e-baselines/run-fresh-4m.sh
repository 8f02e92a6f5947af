#!/bin/sh
# fresh-4m.py in three launches into fresh-4m.txt. Run from the checkout's root.
set -e
D=bench/results/2026-12-03-cpu2e-baselines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
for i in 1 2 3; do
  echo "## launch $i"
  .venv/bin/mpirun -n 2 .venv/bin/python $D/fresh-4m.py
done > $D/fresh-4m.txt 2>&1
