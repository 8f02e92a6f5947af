#!/bin/sh
# The all-reduce between 1 and 4 MiB on ordinary arrays beside raw MPI: the default road (auto
# staging: one phase through the stage window up to stage_max_all_reduce, the staged-ring above),
# the same with the limit at 2 MiB (a tuning file), and each road forced; then bench/tune.py's
# measurement of the staging limits (15 rounds). Run from the checkout's root.
set -e
D=bench/results/2026-12-06-cpu2g-baselines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2"
B="bench/collectives.py -b 1M -e 4M -f 1.4142 --op all_reduce --algorithm ring,mpi"
T=$(mktemp)
echo '{"values": {"stage_max_all_reduce": 2097152}}' > $T
{
  echo "## default (stage_max_all_reduce $(.venv/bin/python -c 'from collectives import tuning; print(tuning.load().stage_max_all_reduce)'))"
  $M .venv/bin/python $B | grep -E " ring |lowest"
  echo "## RINGZERO_TUNING: stage_max_all_reduce 2 MiB"
  RINGZERO_TUNING=$T $M -x RINGZERO_TUNING .venv/bin/python $B | grep -E " ring |lowest"
  for r in one-phase direct staged-ring; do
    echo "## COLLECTIVES_ROAD=all_reduce:$r"
    COLLECTIVES_ROAD=all_reduce:$r $M -x COLLECTIVES_ROAD .venv/bin/python $B | grep -E " ring |lowest"
  done
  echo "## bench/tune.py --only stage --rounds 15 (time staged / time staged-ring; inputs written)"
  $M .venv/bin/python bench/tune.py --only stage --rounds 15 | grep -E "^stage_max"
} > $D/two-mib.txt 2>&1
rm -f $T
