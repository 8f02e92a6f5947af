#!/bin/sh
# The small calls through dist.* with the group's C++ calls: five launches each of the same
# tensors, fresh views per call, and the same tensors with the C++ calls off
# (COLLECTIVES_TORCH_LANE=0: the Python methods), taking turns, 2 ranks; then summary.py over
# them. Run from the checkout's root.
set -e
D=bench/results/2026-12-02-cpu2-torch-lane
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
for i in 1 2 3 4 5; do
  for kind in small small-fresh small-off; do
    f=; lane=1
    [ $kind = small-fresh ] && f=--fresh
    [ $kind = small-off ] && lane=0
    COLLECTIVES_TORCH_LANE=$lane .venv/bin/mpirun -x COLLECTIVES_TORCH_LANE -n 2 .venv/bin/python bench/collectives.py \
      -b 1K -e 16K -f 4 --op all_reduce,reduce_scatter,all_gather,broadcast --algorithm ring,torch,mpi $f \
      --json $D/$kind-$i.json > $D/$kind-$i.txt 2>&1
  done
done
.venv/bin/python $D/summary.py $D > $D/summary.md
