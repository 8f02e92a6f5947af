#!/bin/sh
# Broadcasts of ordinary arrays on 2 ranks, ring against raw mpi4py Bcast: the root's input read in place
# by the other rank (the default from cma_min_bytes) and staged (COLLECTIVES_CMA=0: the stage copy up to
# stage_max_broadcast, the staged-ring above), on the same objects and with fresh views, three launches
# each, taking turns; then bench/ratios.py's medians into tables.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-02-cpu2b-broadcast
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
B="bench/collectives.py -b 1K -e 64M -f 4 --op broadcast --algorithm ring,mpi"
for i in 1 2 3; do
  for cma in 1 0; do
    for f in "" --fresh; do
      if [ $cma = 1 ]; then name=inplace; else name=staged; fi
      if [ -n "$f" ]; then name=$name-fresh; fi
      COLLECTIVES_CMA=$cma .venv/bin/mpirun -x COLLECTIVES_CMA -n 2 .venv/bin/python $B $f \
        --json $D/$name-$i.json > $D/$name-$i.txt 2>&1
    done
  done
done
for k in inplace inplace-fresh staged staged-fresh; do
  echo "## $k: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/$k-[0-9].json --vs mpi; echo
done > $D/tables.md
