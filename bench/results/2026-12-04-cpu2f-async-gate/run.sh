#!/bin/sh
# The progress thread waiting in C (collectives/engine.py, _fastpath.gate; async_grace_us 200) against
# being woken for every call (COLLECTIVES_ASYNC_GRACE_US=0: the engine as it was), in one checkout, taking
# turns. Launches 1-2, grace 0 first: the layer-by-layer breakdown of a 1 KiB all-reduce and async dist.*
# calls against raw MPI (async-grace*-N). Launches 3-4, grace 200 first: the breakdown alone. 2 ranks.
# Run from the checkout's root.
set -e
D=bench/results/2026-12-04-cpu2f-async-gate
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 -x COLLECTIVES_ASYNC_GRACE_US .venv/bin/python"
A="bench/collectives.py -b 1K -e 1M -f 4 --op all_reduce,reduce_scatter,all_gather --algorithm mpi,torch --async-op -r 5"
B=bench/results/2026-12-04-cpu2f-async-queue/breakdown.py
for i in 1 2; do
  for g in 0 200; do
    COLLECTIVES_ASYNC_GRACE_US=$g $M $B > $D/breakdown-grace$g-$i.txt 2>&1
    COLLECTIVES_ASYNC_GRACE_US=$g $M $A --json $D/async-grace$g-$i.json > $D/async-grace$g-$i.txt 2>&1
  done
done
for i in 3 4; do
  for g in 200 0; do
    COLLECTIVES_ASYNC_GRACE_US=$g $M $B > $D/breakdown-grace$g-$i.txt 2>&1
  done
done
