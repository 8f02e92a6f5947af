#!/bin/sh
# In-place all-reduces of private arrays read in place (symmetric/allreduce.py's read_in_place) against
# the staged-ring they took before (COLLECTIVES_CMA_MAX_ALL_REDUCE=0: the pair over MPI messages), each
# paired with raw mpi4py's MPI.IN_PLACE all-reduce in the same launch; three launches each, taking turns:
# the acceptance grid 1 KiB-64 MiB x4 (grid-on/off-N), a finer one from 768 KiB to 48 MiB (fine-on/off-N,
# where the stage limit and the read meet), and beside DeepSpeed's raw op, which always reduces in place
# (ds-N). 2 ranks. Then bench/ratios.py's medians into tables.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-cma-all-reduce
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py --op all_reduce --in-place"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
for i in 1 2 3; do
  for mode in on off; do
    e=
    [ $mode = off ] && e=0
    COLLECTIVES_CMA_MAX_ALL_REDUCE=${e:-268435456} $M -b 1K -e 64M -f 4 --algorithm ring,mpi \
      --json $D/grid-$mode-$i.json > $D/grid-$mode-$i.txt 2>&1
    COLLECTIVES_CMA_MAX_ALL_REDUCE=${e:-268435456} $M -b 768K -e 48M -f 2 --algorithm ring,mpi \
      --json $D/fine-$mode-$i.json > $D/fine-$mode-$i.txt 2>&1
  done
  $M -b 1K -e 64M -f 4 --algorithm ring,mpi,deepspeed --json $D/ds-$i.json > $D/ds-$i.txt 2>&1
done
{
  for mode in on off; do
    echo "## grid, read in place $mode: ring vs raw MPI (MPI.IN_PLACE)"
    .venv/bin/python bench/ratios.py $D/grid-$mode-[0-9].json --vs mpi; echo
    echo "## fine, read in place $mode: ring vs raw MPI (MPI.IN_PLACE)"
    .venv/bin/python bench/ratios.py $D/fine-$mode-[0-9].json --vs mpi; echo
  done
  echo "## in place beside DeepSpeed's op (read in place on): ring vs DeepSpeed"
  .venv/bin/python bench/ratios.py $D/ds-[0-9].json --vs deepspeed; echo
  echo "## the same launches: ring vs raw MPI"
  .venv/bin/python bench/ratios.py $D/ds-[0-9].json --vs mpi
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
