#!/bin/sh
# In-place calls on two ranks, before and after the change that reads in-place all-gather pieces
# past the stage limit with process_vm_readv and sends in-place all-reduces past pair_inplace_bytes
# in blocks through the bounded scratch. "before" is the library of commit cbb3ad6 (which has
# bench/collectives.py --in-place) in a worktree, run with this checkout's compiled extensions (csrc/
# is the same in both); "after" is this checkout. Three launches each, taking turns: ring against raw
# mpi4py with MPI.IN_PLACE and DeepSpeed's raw op (in place, as always). Then bench/ratios.py's
# medians over the launches into tables.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-03-cpu2e-in-place
B=${BEFORE:-/tmp/rz-before}
R=$(pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
[ -d $B ] || git worktree add --detach $B cbb3ad6
cp collectives/*.so $B/collectives/ && cp collectives/torch_backend/*.so $B/collectives/torch_backend/
ARGS="-b 1K -e 64M -f 4 --op all_reduce,all_gather --algorithm ring,mpi,deepspeed --in-place"
for i in 1 2 3; do
  (cd $B && TORCH_EXTENSIONS_DIR=$R/.venv/torch_extensions $R/.venv/bin/mpirun -n 2 $R/.venv/bin/python bench/collectives.py $ARGS --json $R/$D/before-$i.json) \
    > $D/before-$i.txt 2>&1
  .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py $ARGS --json $D/after-$i.json > $D/after-$i.txt 2>&1
done
{
  echo "## before: ring vs raw MPI, in place"; .venv/bin/python bench/ratios.py $D/before-[0-9].json --vs mpi
  echo; echo "## after: ring vs raw MPI, in place"; .venv/bin/python bench/ratios.py $D/after-[0-9].json --vs mpi
  echo; echo "## after: ring vs DeepSpeed, in place"; .venv/bin/python bench/ratios.py $D/after-[0-9].json --vs deepspeed
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
git worktree remove --force $B
