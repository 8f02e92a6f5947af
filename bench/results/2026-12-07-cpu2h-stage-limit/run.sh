#!/bin/sh
# The all-reduce's stage limit (stage_max_all_reduce) at 1720 KiB, as bench/tune.py measures it now
# (in place, staged against the read in place past the limit), against the 1 MiB it was (a tuning
# file, old-limit.json). Three launches each, taking turns: bench/tune.py --only stage
# (tune-stage-N); in place against raw mpi4py's MPI.IN_PLACE all-reduce from 768 KiB to 2 MiB,
# a factor 1.25 apart, and at 1720 KiB (in-new/old-N, at-new/old-N), and past both limits at 2 and
# 3 MiB (past-N: the read in place either way); out of place with
# process_vm_readv refused (COLLECTIVES_CMA_MAX_ALL_REDUCE=0: staged up to the limit, the pair over
# MPI messages past it) on the same grid (nocma-new/old-N). 2 ranks. Then bench/ratios.py's medians
# into tables.md. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-stage-limit
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py --op all_reduce --algorithm ring,mpi"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
echo '{"values": {"stage_max_all_reduce": 1048576}}' > $D/old-limit.json
for i in 1 2 3; do
  .venv/bin/mpirun -n 2 .venv/bin/python bench/tune.py --only stage --out $D/tune-stage-$i.json > $D/tune-stage-$i.txt 2>&1
  $M --in-place -b 2M -e 3M -f 1.5 --json $D/past-$i.json > $D/past-$i.txt 2>&1
  for v in new old; do
    T=
    [ $v = old ] && T=$D/old-limit.json
    RINGZERO_TUNING=$T $M --in-place -b 768K -e 2M -f 1.25 --json $D/in-$v-$i.json > $D/in-$v-$i.txt 2>&1
    RINGZERO_TUNING=$T $M --in-place -b 1720K -e 1720K --json $D/at-$v-$i.json > $D/at-$v-$i.txt 2>&1
    COLLECTIVES_CMA_MAX_ALL_REDUCE=0 RINGZERO_TUNING=$T $M -b 768K -e 2M -f 1.25 --json $D/nocma-$v-$i.json \
      > $D/nocma-$v-$i.txt 2>&1
  done
done
R=".venv/bin/python bench/ratios.py"
{
  for v in new old; do
    echo "## in place, limit $v: ring vs raw MPI (MPI.IN_PLACE)"; $R $D/in-$v-[0-9].json --vs mpi
    $R $D/at-$v-[0-9].json --vs mpi | tail -n 1
    echo
  done
  echo "## in place past both limits: ring vs raw MPI"; $R $D/past-[0-9].json --vs mpi
  echo
  for v in new old; do
    echo "## out of place, process_vm_readv off, limit $v: ring vs raw MPI"; $R $D/nocma-$v-[0-9].json --vs mpi
    echo
  done
  echo "## bench/tune.py --only stage"
  cat $D/tune-stage-[0-9].txt | grep "^stage_max"
} > $D/tables.md
.venv/bin/python -c "import glob, json; print('rows with #wrong > 0:', sum(r.get('wrong') not in (0, None)
  for f in glob.glob('$D/*-[0-9].json') if 'tune' not in f for r in json.load(open(f))))" >> $D/tables.md
