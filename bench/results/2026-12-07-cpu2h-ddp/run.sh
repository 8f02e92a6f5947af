#!/bin/sh
# Three launches of bench/ddp.py at per-rank batch 16, 2 ranks. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-ddp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
for i in 1 2 3; do
  .venv/bin/mpirun -n 2 .venv/bin/python bench/ddp.py --batch 16 --json $D/ddp-$i.json > $D/ddp-$i.txt 2>&1
done
