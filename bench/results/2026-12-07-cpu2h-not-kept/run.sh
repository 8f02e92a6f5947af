#!/bin/sh
# The launches of README.md, 2 ranks. Run from a checkout of 2638e41 with chunked-stage.patch applied and
# the extension rebuilt (git apply bench/results/2026-12-07-cpu2h-not-kept/chunked-stage.patch;
# .venv/bin/python setup.py build_ext --inplace); the T-, S- and C- launches need only main.
set -e
D=bench/results/2026-12-07-cpu2h-not-kept
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
B=".venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py --algorithm ring,mpi"
AR="$B --op all_reduce --in-place"
for i in 1 2 3; do
  COLLECTIVES_STAGE_CHUNK=0 $AR -b 768K -e 2M -f 1.25 --json $D/off-$i.json > $D/off-$i.txt 2>&1
  $AR -b 768K -e 2M -f 1.25 --json $D/on-$i.json > $D/on-$i.txt 2>&1
done
for i in 1 2 3; do
  RZ_DEMOTE=1 $AR -b 768K -e 2M -f 1.25 --json $D/dem-$i.json > $D/dem-$i.txt 2>&1
  RZ_DEMOTE=1 COLLECTIVES_STAGE_CHUNK=0 $AR -b 768K -e 2M -f 1.25 --json $D/demw-$i.json > $D/demw-$i.txt 2>&1
  $AR -b 768K -e 2M -f 1.25 --json $D/on2-$i.json > $D/on2-$i.txt 2>&1
done
for i in 1 2 3; do
  RINGZERO_TUNING=$D/lim3m.json COLLECTIVES_STAGE_CHUNK=0 $AR -b 1200K -e 3M -f 1.25 --json $D/Loff-$i.json > $D/Loff-$i.txt 2>&1
  RINGZERO_TUNING=$D/lim3m.json $AR -b 1200K -e 3M -f 1.25 --json $D/Lon-$i.json > $D/Lon-$i.txt 2>&1
  $AR -b 1200K -e 3M -f 1.25 --json $D/Lmain-$i.json > $D/Lmain-$i.txt 2>&1
done
for i in 1 2 3; do
  for c in 262144 524288 1048576; do
    COLLECTIVES_CMA_CHUNK=$c $AR -b 1800K -e 3M -f 1.2 --json $D/C$c-$i.json > $D/C$c-$i.txt 2>&1
  done
done
for i in 1 2; do
  for s in 0 16777216; do
    COLLECTIVES_STREAM_MIN=$s $B --op all_gather,reduce_scatter,broadcast -b 8M -e 128M -f 2 --json $D/S$s-$i.json > $D/S$s-$i.txt 2>&1
    COLLECTIVES_STREAM_MIN=$s $B --op all_gather,reduce_scatter,broadcast -b 8M -e 128M -f 2 --consume --json $D/SC$s-$i.json > $D/SC$s-$i.txt 2>&1
  done
done
for i in 1 2 3; do
  for s in 0 33554432; do
    for m in plain consume sym symconsume; do
      case $m in plain) F=;; consume) F=--consume;; sym) F=--symmetric;; symconsume) F="--symmetric --consume";; esac
      COLLECTIVES_STREAM_MIN=$s $B --op all_gather,broadcast -b 32M -e 128M -f 2 $F --json $D/T-$m-$s-$i.json > $D/T-$m-$s-$i.txt 2>&1
    done
  done
done
for i in 1 2 3; do
  $AR --symmetric -b 768K -e 2M -f 1.25 --json $D/heap-in-place-$i.json > $D/heap-in-place-$i.txt 2>&1
done
.venv/bin/python $D/torch_floor.py > $D/torch_floor.txt
for i in 1 2; do
  COLLECTIVES_PIPE_MIN=1048576 $AR -b 1200K -e 3M -f 1.25 --json $D/P-$i.json > /dev/null 2>&1
  COLLECTIVES_PIPE_MIN=1048576 COLLECTIVES_PIPE_CHUNK=131072 $AR -b 1200K -e 3M -f 1.25 --json $D/P128-$i.json > /dev/null 2>&1
  $AR -b 1200K -e 3M -f 1.25 --json $D/Pmain-$i.json > /dev/null 2>&1
done
