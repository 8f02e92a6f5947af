#!/bin/sh
# Async 1 KiB dist.all_reduce in batches, before (OLD: a checkout of 2747f35 with its extension built)
# and after (this checkout), three launches each, taking turns. 2 ranks. Run from this checkout's root:
#   git worktree add /tmp/old 2747f35 && (cd /tmp/old && ln -s $PWD/.venv .venv && .venv/bin/python setup.py build_ext --inplace)
#   OLD=/tmp/old sh bench/results/2026-12-06-cpu2g-async-batch/run.sh
set -e
D=$PWD/bench/results/2026-12-06-cpu2g-async-batch
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
MPIRUN=$PWD/.venv/bin/mpirun
PY=$PWD/.venv/bin/python
lscpu | grep -E "Model name|L2|L3" > $D/machine.txt
for i in 1 2 3; do
  (cd $OLD && PYTHONPATH=$OLD $MPIRUN -x PYTHONPATH -n 2 $PY $D/batch.py --json $D/before-$i.json) | tee $D/before-$i.txt
  PYTHONPATH=$PWD $MPIRUN -x PYTHONPATH -n 2 $PY $D/batch.py --json $D/after-$i.json | tee $D/after-$i.txt
done
