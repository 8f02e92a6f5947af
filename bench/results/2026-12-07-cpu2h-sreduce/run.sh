#!/bin/sh
# Streaming stores into out (STREAM copies, SREDUCE reductions, from stream_min_bytes), off and at
# 1 MiB, three launches each, taking turns: the all-reduce at 256 KiB-2 MiB beside raw MPI and
# DeepSpeed's raw op (off-N, on-N), and the all-reduce and all-gather at 1-64 MiB with the whole out
# read after every call (--consume: consume-off-N, consume-on-N). Then heap arrays' reductions as C
# programs up to 64 MiB (fast_max_bytes, c-N) against up to 1 MiB (py-N), streaming off. 2 ranks;
# DeepSpeed from `make bench-peers`. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-sreduce
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
echo '{"values": {"fast_max_bytes": 1048576}}' > $D/fast-max-1m.json
for i in 1 2 3; do
  for s in off on; do
    v=0; [ $s = on ] && v=1048576
    $M -x COLLECTIVES_STREAM_MIN=$v .venv/bin/python bench/collectives.py -b 256K -e 2M -f 2 --op all_reduce \
      --algorithm ring,mpi,deepspeed --json $D/$s-$i.json > $D/$s-$i.txt 2>&1
    $M -x COLLECTIVES_STREAM_MIN=$v .venv/bin/python bench/collectives.py -b 1M -e 64M -f 4 \
      --op all_reduce,all_gather --algorithm ring,mpi --consume --json $D/consume-$s-$i.json > $D/consume-$s-$i.txt 2>&1
  done
  $M -x COLLECTIVES_STREAM_MIN=0 -x RINGZERO_TUNING=$D/fast-max-1m.json .venv/bin/python bench/collectives.py \
    -b 1M -e 64M -f 4 --op reduce_scatter --algorithm ring,mpi --symmetric --json $D/py-$i.json > $D/py-$i.txt 2>&1
  $M -x COLLECTIVES_STREAM_MIN=0 .venv/bin/python bench/collectives.py -b 1M -e 64M -f 4 --op reduce_scatter \
    --algorithm ring,mpi --symmetric --json $D/c-$i.json > $D/c-$i.txt 2>&1
done
{
  for s in off on; do
    echo "## stream $s: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi
    echo; echo "## stream $s: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs deepspeed
    echo; echo "## stream $s: times (us), ring / raw MPI"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi --times
    echo; echo "## stream $s, out read after every call (--consume): ring vs raw MPI"
    .venv/bin/python bench/ratios.py $D/consume-$s-[0-9].json --vs mpi
    echo; echo "## stream $s, --consume: times (us), ring / raw MPI"
    .venv/bin/python bench/ratios.py $D/consume-$s-[0-9].json --vs mpi --times; echo
  done
  for s in py c; do
    echo "## heap reduce-scatter, reductions in $s: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi
    echo; echo "## heap reduce-scatter, reductions in $s: times (us), ring / raw MPI"
    .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi --times; echo
  done
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
