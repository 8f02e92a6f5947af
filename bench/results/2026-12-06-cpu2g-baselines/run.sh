#!/bin/sh
# The baselines' acceptance sweeps on main with the engine's batch fixes, two launches each,
# taking turns: ring against raw MPI, MPI behind our API and DeepSpeed's raw op on the same arrays
# (sweep-N); ring against raw MPI with fresh views per call (fresh-N); small calls through dist.*,
# same tensors and fresh views (small-N, small-fresh-N). 2 ranks; DeepSpeed from `make bench-peers`.
# Then bench/ratios.py's medians into tables.md and the torch lane's summary.py into summary.md.
# Run from the checkout's root.
set -e
D=bench/results/2026-12-06-cpu2g-baselines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py"
R="$M -b 1K -e 64M -f 4"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
for i in 1 2; do
  $R --algorithm ring,mpi,mpi-api,deepspeed --json $D/sweep-$i.json > $D/sweep-$i.txt 2>&1
  $R --algorithm ring,mpi --fresh --json $D/fresh-$i.json > $D/fresh-$i.txt 2>&1
  for kind in small small-fresh; do
    f=
    [ $kind = small-fresh ] && f=--fresh
    $M -b 1K -e 16K -f 4 --op all_reduce,reduce_scatter,all_gather,broadcast --algorithm ring,torch,mpi $f \
      --json $D/$kind-$i.json > $D/$kind-$i.txt 2>&1
  done
done
{
  echo "## sweep: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/sweep-[0-9].json --vs mpi
  echo; echo "## sweep: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/sweep-[0-9].json --vs deepspeed
  echo; echo "## fresh: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/fresh-[0-9].json --vs mpi
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
.venv/bin/python bench/results/2026-12-02-cpu2-torch-lane/summary.py $D > $D/summary.md
