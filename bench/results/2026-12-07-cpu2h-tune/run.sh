#!/bin/sh
# bench/tune.py's staging limits on this machine (tune-stage.*), then the reduce-scatter between
# 1 and 4 MiB with stage_max_reduce_scatter at 2 MiB (rs-2m-N) and at 1 MiB (rs-1m-N), three
# launches each, taking turns, ring beside raw MPI. 2 ranks. Run from the checkout's root.
set -e
D=bench/results/2026-12-07-cpu2h-tune
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2"
B="bench/collectives.py -b 1M -e 4M -f 1.4142 --op reduce_scatter --algorithm ring,mpi"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
$M .venv/bin/python bench/tune.py --only stage --out $D/tune-stage.json > $D/tune-stage.txt 2>&1
for mib in 2 1; do echo "{\"values\": {\"stage_max_reduce_scatter\": $((mib << 20))}}" > $D/rs-$mib.json; done
for i in 1 2 3; do
  for mib in 2 1; do
    $M -x RINGZERO_TUNING=$D/rs-$mib.json .venv/bin/python $B --json $D/rs-${mib}m-$i.json > $D/rs-${mib}m-$i.txt 2>&1
  done
done
{
  for mib in 2 1; do
    echo "## stage_max_reduce_scatter $mib MiB: ring vs raw MPI"; .venv/bin/python bench/ratios.py $D/rs-${mib}m-[0-9].json --vs mpi
    echo; echo "## stage_max_reduce_scatter $mib MiB: times (us), ring / raw MPI"
    .venv/bin/python bench/ratios.py $D/rs-${mib}m-[0-9].json --vs mpi --times; echo
  done
} > $D/tables.md
