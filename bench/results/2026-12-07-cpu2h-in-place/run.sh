#!/bin/sh
# In-place all-gathers (x inside out, FSDP2's form) read in place from cma_min_bytes (the default,
# stage_max_in_place 0) against staged up to 1 GiB pieces (the previous rule), three launches each,
# taking turns: in-place all-reduce and all-gather, ring against raw MPI's MPI.IN_PLACE (read-N,
# staged-N); then bench/tune.py's cma crossovers (tune-cma.txt). 2 ranks. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-in-place
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2"
B="bench/collectives.py -b 1K -e 64M -f 4 --op all_reduce,all_gather --algorithm ring,mpi --in-place"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
for i in 1 2 3; do
  $M .venv/bin/python $B --json $D/read-$i.json > $D/read-$i.txt 2>&1
  $M -x COLLECTIVES_STAGE_MAX_IN_PLACE=1073741824 .venv/bin/python $B --json $D/staged-$i.json > $D/staged-$i.txt 2>&1
done
$M .venv/bin/python bench/tune.py --only cma --out $D/tune-cma.json > $D/tune-cma.txt 2>&1
{
  echo "## in place, read in place (default): ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/read-[0-9].json --vs mpi
  echo; echo "## in place, staged (stage_max_in_place 1 GiB): ring vs raw MPI"
  .venv/bin/python bench/ratios.py $D/staged-[0-9].json --vs mpi
  echo; echo "## times (us), read in place: ring / raw MPI"; .venv/bin/python bench/ratios.py $D/read-[0-9].json --vs mpi --times
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
