#!/bin/sh
# The sweep again with this machine's own tuning file (tune-n2.json, from run.sh's bench/tune.py):
# RINGZERO_TUNING on every rank, ring against raw MPI and DeepSpeed (tuned-N), and with fresh views
# (tuned-fresh-N), two launches each; medians into tables-tuned.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-03-cpu2d-baselines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx RINGZERO_TUNING=$D/tune-n2.json
M=".venv/bin/mpirun -n 2 -x RINGZERO_TUNING .venv/bin/python bench/collectives.py -b 1K -e 64M -f 4"
for i in 1 2; do
  $M --algorithm ring,mpi,deepspeed --json $D/tuned-$i.json > $D/tuned-$i.txt 2>&1
  $M --algorithm ring,mpi --fresh --json $D/tuned-fresh-$i.json > $D/tuned-fresh-$i.txt 2>&1
done
{
  echo "## tuned: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/tuned-[0-9].json --vs mpi
  echo; echo "## tuned: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/tuned-[0-9].json --vs deepspeed
  echo; echo "## tuned, fresh: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/tuned-fresh-[0-9].json --vs mpi
} > $D/tables-tuned.md
