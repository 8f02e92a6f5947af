#!/bin/sh
# The pipe's all-gather against reading in place (cma), at 64 MiB of out, on a fourth 2-core machine
# (machine.txt): four launches each, taking turns; ring, raw MPI and the copies alone in every launch.
# pipe-N: COLLECTIVES_PIPE_MIN=64 MiB (the all-gather takes the pipe); direct-N: COLLECTIVES_PIPE=0
# (read in place). rounds.txt: every round's time per launch, to show the swings within a launch.
# Run from the checkout's root.
set -e
D=bench/results/2026-12-03-cpu2d-pipe-ag
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 -x COLLECTIVES_PIPE -x COLLECTIVES_PIPE_MIN .venv/bin/python bench/collectives.py"
A="-b 64M -e 64M --op all_gather --algorithm ring,mpi,copy"
lscpu | grep -E "Model name|L2|L3|MHz" > $D/machine.txt
for i in 1 2 3 4; do
  COLLECTIVES_PIPE=1 COLLECTIVES_PIPE_MIN=67108864 $M $A --json $D/pipe-$i.json > $D/pipe-$i.txt 2>&1
  COLLECTIVES_PIPE=0 COLLECTIVES_PIPE_MIN=67108864 $M $A --json $D/direct-$i.json > $D/direct-$i.txt 2>&1
done
.venv/bin/python - "$D" > $D/rounds.txt <<'PY'
import json, sys, glob
d = sys.argv[1]
print("launch      algorithm path    vs mpi  rounds (ms)")
for f in sorted(glob.glob(d + "/*-[0-9].json")):
    for r in json.load(open(f)):
        v = r.get("ratio_vs_mpi")
        print(f"{f.split('/')[-1][:-5]:10s}  {r['algorithm']:9s} {str(r.get('path') or '-'):7s} "
              f"{'%.2f' % v if v else '   -'}   {' '.join('%.1f' % (x / 1000) for x in r['rounds_us'])}")
PY
