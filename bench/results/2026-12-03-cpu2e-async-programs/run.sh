#!/bin/sh
# Async dist.* calls (async_op=True, waited on: DDP's and FSDP2's form) through the ringzero
# ProcessGroup on 2 ranks, on fresh views t[:] of the tensors and on the same tensors, beside raw
# mpi4py on the same arrays: the library before async calls ran their plans' C programs (dd182c4,
# in a worktree at $BEFORE with this checkout's bench/collectives.py and built extensions copied
# in) and after, three launches each, taking turns. Then the medians (bench/ratios.py) into
# tables.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-03-cpu2e-async-programs
BEFORE=${BEFORE:-/tmp/mid}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
HERE=$(pwd)
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
sweep() {  # tree, kind, file
  f=
  [ "$2" = fresh ] && f=--fresh
  (cd "$1" && "$HERE/.venv/bin/mpirun" -n 2 "$HERE/.venv/bin/python" -W ignore bench/collectives.py -b 1K -e 4M -f 4 \
    --op all_reduce,reduce_scatter,all_gather,broadcast --algorithm torch,mpi --async-op $f \
    --json "$HERE/$3.json" > "$HERE/$3.txt" 2>&1)
}
for i in 1 2 3; do
  for kind in fresh same; do
    sweep "$BEFORE" $kind $D/before-$kind-$i
    sweep "$HERE" $kind $D/after-$kind-$i
  done
done
{
  for kind in fresh same; do
    for t in before after; do
      echo "## $t, async, $kind tensors: torch vs raw MPI (busbw ratio; median (lowest) of 3 launches)"
      .venv/bin/python bench/ratios.py $D/$t-$kind-[0-9].json --vs mpi --algorithm torch
      echo; echo "## $t, async, $kind tensors: time per call, torch / raw MPI (medians of 3 launches)"
      .venv/bin/python bench/ratios.py $D/$t-$kind-[0-9].json --algorithm torch --times
      echo
    done
  done
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
