#!/bin/sh
# Streaming stores for copies into the caller's out (stream_min_bytes), on and off, three launches
# each, taking turns: the all-gather of ordinary arrays at 1-64 MiB of out beside raw MPI and the
# copies alone (on-N, off-N), and with fresh views per call (fresh-on-N, fresh-off-N); then one
# process's copies by way and size (ways.txt). 2 ranks. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-stream
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2"
B="bench/collectives.py -b 1M -e 64M -f 4 --op all_gather"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
for i in 1 2 3; do
  for s in off on; do
    v=0; [ $s = on ] && v=1048576
    $M -x COLLECTIVES_STREAM_MIN=$v .venv/bin/python $B --algorithm ring,mpi,copy --json $D/$s-$i.json > $D/$s-$i.txt 2>&1
    $M -x COLLECTIVES_STREAM_MIN=$v .venv/bin/python $B --algorithm ring,mpi --fresh --json $D/fresh-$s-$i.json \
      > $D/fresh-$s-$i.txt 2>&1
  done
done
.venv/bin/python bench/membw.py --ways > $D/ways.txt
{
  for s in off on; do
    echo "## stream $s: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi
    echo; echo "## stream $s: ring vs the copies alone"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs copy
    echo; echo "## stream $s, fresh views: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/fresh-$s-[0-9].json --vs mpi
    echo
  done
  echo "## times (us), stream on: ring and raw MPI"; .venv/bin/python bench/ratios.py $D/on-[0-9].json --vs mpi --times
  echo; echo "## times (us), stream off: ring and raw MPI"; .venv/bin/python bench/ratios.py $D/off-[0-9].json --vs mpi --times
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
