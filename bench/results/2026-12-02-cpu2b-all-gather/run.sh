#!/bin/sh
# Ordinary all-gathers on 2 ranks: pieces read in place at every size (cma0.json) against staged at
# every size (staged.json), both with the header-exchange road off, and the defaults, each against
# raw mpi4py in turns (stage_vs_cma.py); then bench/tune.py's cma crossover. Run from the checkout's root.
set -e
D=bench/results/2026-12-02-cpu2b-all-gather
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
lscpu | grep -E "Model name|L2|L3" > $D/machine.txt
for i in 1 2; do
  .venv/bin/mpirun -n 2 .venv/bin/python $D/stage_vs_cma.py all_gather \
    2048,8192,16384,32768,65536,131072,262144,1048576,2097152,4194304,16777216 \
    file:$D/cma0.json,file:$D/staged.json,default > $D/ag-$i.txt 2>&1
done
.venv/bin/mpirun -n 2 .venv/bin/python bench/tune.py --only cma --out $D/tune-cma.json > $D/tune-cma.txt 2>&1
