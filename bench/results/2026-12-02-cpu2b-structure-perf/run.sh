#!/bin/bash
# Paired: base (the commit before the structure work, f053a8b, in a worktree at /work/wt-base with its
# C extension built in place) and new (this checkout) launched in turns, ROUNDS each, each with its own
# bench/collectives.py and the same venv (.venv here). usage: run.sh [ROUNDS]
set -u
D=bench/results/2026-12-02-cpu2b-structure-perf
OUT=$(realpath -m "$D"); ROUNDS=${1:-5}; NEW=$(pwd); PY=$NEW/.venv/bin/python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
for i in $(seq 1 $ROUNDS); do
  for side in base new; do
    if [ $side = base ]; then T=/work/wt-base; else T=$NEW; fi
    ( cd $T && timeout 900 $NEW/.venv/bin/mpirun -n 2 $PY bench/collectives.py \
        -b 1K -e 64M -f 4 --op all_reduce,reduce_scatter,all_gather --algorithm ring,mpi \
        --json $OUT/$side-$i.json > $OUT/$side-$i.txt 2>&1 ) || echo "$side-$i rc=$?" >> $OUT/errors.txt
  done
done
$PY bench/results/2026-12-01-cpu2-structure-perf/table.py $D > $D/table.md
