#!/bin/sh
# The baselines' acceptance sweeps on main with all-reduces past the stage limit read in place (x and
# out), in-place all-gathers read in place and staged reduce-scatters up to 1 MiB, three launches each,
# taking turns: ring against raw mpi4py, MPI behind our API and DeepSpeed's raw op on the same arrays
# (sweep-N); ring against raw MPI with fresh views per call (fresh-N); in place (in-place-N); 1-16 KiB
# calls through dist.* beside raw MPI, the same tensors (small-N) and fresh views (small-fresh-N); heap
# arrays beside raw MPI and DeepSpeed (heap-N); the 4-64 MiB all-gathers beside the copies alone
# (ceiling-N); the in-place all-reduce beside DeepSpeed's op, which always reduces in place
# (ds-in-place-N). 2 ranks; DeepSpeed from `make bench-peers`. Then bench/ratios.py's medians into
# tables.md and summary.py into summary.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-acceptance
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py"
R="$M -b 1K -e 64M -f 4"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
for i in 1 2 3; do
  $R --algorithm ring,mpi,mpi-api,deepspeed --json $D/sweep-$i.json > $D/sweep-$i.txt 2>&1
  $R --algorithm ring,mpi --fresh --json $D/fresh-$i.json > $D/fresh-$i.txt 2>&1
  $R --op all_reduce,all_gather --algorithm ring,mpi --in-place --json $D/in-place-$i.json > $D/in-place-$i.txt 2>&1
  for kind in small small-fresh; do
    f=
    [ $kind = small-fresh ] && f=--fresh
    $M -b 1K -e 16K -f 4 --op all_reduce,reduce_scatter,all_gather,broadcast --algorithm ring,torch,mpi $f \
      --json $D/$kind-$i.json > $D/$kind-$i.txt 2>&1
  done
  $R --op all_reduce --algorithm ring,mpi,deepspeed --symmetric --json $D/heap-$i.json > $D/heap-$i.txt 2>&1
  $M -b 4M -e 64M -f 4 --op all_gather --algorithm ring,mpi,copy --json $D/ceiling-$i.json > $D/ceiling-$i.txt 2>&1
done
for i in 1 2 3; do
  $R --op all_reduce --algorithm ring,mpi,deepspeed --in-place --json $D/ds-in-place-$i.json > $D/ds-in-place-$i.txt 2>&1
done
{
  echo "## sweep: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/sweep-[0-9].json --vs mpi
  echo; echo "## sweep: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/sweep-[0-9].json --vs deepspeed
  echo; echo "## fresh: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/fresh-[0-9].json --vs mpi
  echo; echo "## in place: ring vs raw MPI (MPI.IN_PLACE)"; .venv/bin/python bench/ratios.py $D/in-place-[0-9].json --vs mpi
  echo; echo "## in place (DeepSpeed's own form): ring vs DeepSpeed"
  .venv/bin/python bench/ratios.py $D/ds-in-place-[0-9].json --vs deepspeed
  echo; echo "## heap arrays: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/heap-[0-9].json --vs deepspeed
  echo; echo "## heap arrays: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/heap-[0-9].json --vs mpi
  echo; echo "## all-gather against the copies alone (> 1: faster than the copies)"
  .venv/bin/python bench/ratios.py $D/ceiling-[0-9].json --vs copy
  echo; echo "## all-gather: raw MPI against the copies alone"; .venv/bin/python bench/ratios.py $D/ceiling-[0-9].json --vs copy --algorithm mpi
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
.venv/bin/python bench/results/2026-12-02-cpu2-torch-lane/summary.py $D > $D/summary.md
