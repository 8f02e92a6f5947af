#!/bin/sh
# All-reduces of private arrays past the stage limit read in place (symmetric/allreduce.py's
# read_in_place) against the staged-ring they take with it off (COLLECTIVES_CMA_MAX_ALL_REDUCE=0: the
# pair over MPI messages), each paired with raw mpi4py in the same launch; three launches each, taking
# turns: in place (`--in-place`, MPI.IN_PLACE for raw MPI) on the acceptance grid 1 KiB-64 MiB x4
# (grid-in-on/off-N) and a finer one from 192 KiB to 48 MiB x2 (fine-in-on/off-N); out of place beside
# raw MPI and DeepSpeed's raw op (grid-out-on/off-N, fine-out-on/off-N); and in place beside DeepSpeed's
# op, which always reduces in place (ds-N, read in place on). 2 ranks. Then bench/ratios.py's medians
# into tables.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-cma-all-reduce
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py --op all_reduce"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
for i in 1 2 3; do
  for mode in on off; do
    max=268435456
    [ $mode = off ] && max=0
    export COLLECTIVES_CMA_MAX_ALL_REDUCE=$max
    $M --in-place -b 1K -e 64M -f 4 --algorithm ring,mpi --json $D/grid-in-$mode-$i.json > $D/grid-in-$mode-$i.txt 2>&1
    $M --in-place -b 192K -e 48M -f 2 --algorithm ring,mpi --json $D/fine-in-$mode-$i.json > $D/fine-in-$mode-$i.txt 2>&1
    $M -b 1K -e 64M -f 4 --algorithm ring,mpi,deepspeed --json $D/grid-out-$mode-$i.json > $D/grid-out-$mode-$i.txt 2>&1
    $M -b 192K -e 48M -f 2 --algorithm ring,mpi --json $D/fine-out-$mode-$i.json > $D/fine-out-$mode-$i.txt 2>&1
  done
  unset COLLECTIVES_CMA_MAX_ALL_REDUCE
  $M --in-place -b 1K -e 64M -f 4 --algorithm ring,mpi,deepspeed --json $D/ds-$i.json > $D/ds-$i.txt 2>&1
done
R=".venv/bin/python bench/ratios.py"
{
  for mode in on off; do
    echo "## in place, grid, read in place $mode: ring vs raw MPI (MPI.IN_PLACE)"; $R $D/grid-in-$mode-[0-9].json --vs mpi
    echo; echo "## in place, fine, read in place $mode: ring vs raw MPI"; $R $D/fine-in-$mode-[0-9].json --vs mpi
    echo; echo "## out of place, grid, read in place $mode: ring vs raw MPI"; $R $D/grid-out-$mode-[0-9].json --vs mpi
    echo; echo "## out of place, grid, read in place $mode: ring vs DeepSpeed (in place)"
    $R $D/grid-out-$mode-[0-9].json --vs deepspeed
    echo; echo "## out of place, fine, read in place $mode: ring vs raw MPI"; $R $D/fine-out-$mode-[0-9].json --vs mpi
    echo
  done
  echo "## in place beside DeepSpeed's op (read in place on): ring vs DeepSpeed"; $R $D/ds-[0-9].json --vs deepspeed
  echo; echo "## the same launches: ring vs raw MPI"; $R $D/ds-[0-9].json --vs mpi
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
