#!/bin/sh
# Small calls through dist.* on the second 2-core machine: three launches each of the same tensors
# and fresh views per call (--fresh), taking turns, 2 ranks; then the torch-lane folder's summary.py over them.
# Run from the checkout's root.
set -e
D=bench/results/2026-12-02-cpu2b-torch-small
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
for i in 1 2 3; do
  for kind in small small-fresh; do
    f=
    [ $kind = small-fresh ] && f=--fresh
    .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py -b 1K -e 16K -f 4 \
      --op all_reduce,reduce_scatter,all_gather,broadcast --algorithm ring,torch,mpi $f \
      --json $D/$kind-$i.json > $D/$kind-$i.txt 2>&1
  done
done
.venv/bin/python bench/results/2026-12-02-cpu2-torch-lane/summary.py $D > $D/summary.md
.venv/bin/python $D/views.py > $D/views.txt
