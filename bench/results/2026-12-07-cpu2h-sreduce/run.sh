#!/bin/sh
# Reductions into out with streaming stores (SREDUCE, from stream_min_bytes) and C programs for
# reductions up to 64 MiB (fast_max_bytes), each against its previous setting, three launches each,
# taking turns: the all-reduce of ordinary arrays at 256 KiB-2 MiB beside raw MPI and DeepSpeed's raw
# op, COLLECTIVES_STREAM_MIN=0 (off-N) against the default (on-N); heap all-reduces and
# reduce-scatters at 1-64 MiB with fast_max_bytes 1 MiB (py-N) against the default (c-N). 2 ranks;
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
  done
  $M -x RINGZERO_TUNING=$D/fast-max-1m.json .venv/bin/python bench/collectives.py -b 1M -e 64M -f 4 \
    --op all_reduce,reduce_scatter --algorithm ring,mpi --symmetric --json $D/py-$i.json > $D/py-$i.txt 2>&1
  $M .venv/bin/python bench/collectives.py -b 1M -e 64M -f 4 --op all_reduce,reduce_scatter --algorithm ring,mpi \
    --symmetric --json $D/c-$i.json > $D/c-$i.txt 2>&1
done
{
  for s in off on; do
    echo "## stream $s: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi
    echo; echo "## stream $s: ring vs DeepSpeed"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs deepspeed
    echo; echo "## stream $s: times (us), ring / raw MPI"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi --times
    echo
  done
  for s in py c; do
    echo "## heap arrays, reductions in $s: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi
    echo; echo "## heap arrays, reductions in $s: times (us), ring / raw MPI"
    .venv/bin/python bench/ratios.py $D/$s-[0-9].json --vs mpi --times; echo
  done
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') for r in json.load(open(f))))" >> $D/tables.md
