#!/bin/sh
# The baselines' acceptance sweeps on the second 2-core machine, three launches each, taking turns:
# ring against raw MPI, MPI behind our API and DeepSpeed's raw op on the same arrays (sweep-N); ring
# against raw MPI with fresh views per call (fresh-N); heap arrays against raw MPI and DeepSpeed
# (heap-N); the all-reduce beside the copies alone (ceiling-N). 2 ranks; DeepSpeed from
# `make bench-peers`. Then bench/ratios.py's medians into tables.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-02-cpu2b-baselines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
R=".venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py -b 1K -e 64M -f 4"
lscpu | grep -E "Model name|L2|L3" > $D/machine.txt
for i in 1 2 3; do
  $R --algorithm ring,mpi,mpi-api,deepspeed --json $D/sweep-$i.json > $D/sweep-$i.txt 2>&1
  $R --algorithm ring,mpi --fresh --json $D/fresh-$i.json > $D/fresh-$i.txt 2>&1
  $R --op all_reduce --algorithm ring,mpi,deepspeed --symmetric --json $D/heap-$i.json > $D/heap-$i.txt 2>&1
  $R --op all_reduce --algorithm ring,mpi,deepspeed,copy --json $D/ceiling-$i.json > $D/ceiling-$i.txt 2>&1
done
{
  echo "## sweep: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/sweep-[0-9].json --vs mpi
  echo; echo "## sweep: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/sweep-[0-9].json --vs deepspeed
  echo; echo "## fresh: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/fresh-[0-9].json --vs mpi
  echo; echo "## heap: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/heap-[0-9].json --vs mpi
  echo; echo "## heap: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/heap-[0-9].json --vs deepspeed
  echo; echo "## ceiling: ring vs the copies alone"; .venv/bin/python bench/ratios.py $D/ceiling-[0-9].json --vs copy
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
