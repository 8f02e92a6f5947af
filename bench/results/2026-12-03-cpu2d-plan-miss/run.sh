#!/bin/sh
# A fresh view on every call against the same objects, on the Python roads, before and after plans
# are found by their arrays (plan_cache.shape_key): the commit before it (BEFORE, in a worktree) and
# this checkout, two launches each, taking turns. Run from the checkout's root, with the tests idle.
set -e
D=bench/results/2026-12-03-cpu2d-plan-miss
BEFORE=${BEFORE:-de58d54}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
rm -rf /tmp/rz-before && git worktree add -f /tmp/rz-before $BEFORE >/dev/null 2>&1
cp collectives/*.so /tmp/rz-before/collectives/ 2>/dev/null || true
cp collectives/torch_backend/*.so /tmp/rz-before/collectives/torch_backend/ 2>/dev/null || true
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
M=".venv/bin/mpirun -n 2 -x COLLECTIVES_STAGE -x PYTHONPATH .venv/bin/python $D/miss.py"
for i in 1 2; do
  for side in before after; do
    [ $side = before ] && P=/tmp/rz-before || P=$PWD
    { echo "# $side, launch $i: COLLECTIVES_STAGE=0 (small road, pair)"
      COLLECTIVES_STAGE=0 PYTHONPATH=$P $M 1,16,4096
      echo "# $side, launch $i: staging on (staged-ring at 4 MiB)"
      COLLECTIVES_STAGE=auto PYTHONPATH=$P $M 4096; } > $D/$side-$i.txt 2>&1
  done
done
git worktree remove --force /tmp/rz-before
