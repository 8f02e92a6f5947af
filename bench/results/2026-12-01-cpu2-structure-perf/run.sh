#!/bin/bash
# Paired: base (issue 20's first commit, f053a8b) and new (main) launched in turns, ROUNDS each.
# usage: perfcmp.sh OUTDIR ROUNDS
set -u
OUT=$(realpath -m "$1"); ROUNDS=${2:-5}
mkdir -p $OUT
for i in $(seq 1 $ROUNDS); do
  for side in base new; do
    if [ $side = base ]; then D=/work/wt-base; else D=/work/main; fi
    ( cd $D && timeout 900 .venv/bin/mpirun --allow-run-as-root -n 2 .venv/bin/python bench/collectives.py \
        -b 1K -e 64M -f 4 --op all_reduce,reduce_scatter,all_gather --algorithm ${ALGS:-ring,mpi} \
        --json $OUT/$side-$i.json > $OUT/$side-$i.txt 2>&1 ) || echo "$side-$i rc=$?" >> $OUT/errors.txt
  done
done
