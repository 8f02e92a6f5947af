#!/bin/sh
# The pipe's all-reduce against the staged-ring (COLLECTIVES_PIPE=0), at 32 and 64 MiB, four launches
# each, taking turns, ring and raw MPI in every launch (ar-pipe-N, ar-ring-N); rounds-ar.txt: every
# round's time per launch. Run from the checkout's root.
set -e
D=bench/results/2026-12-03-cpu2d-pipe-ag
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
M=".venv/bin/mpirun -n 2 -x COLLECTIVES_PIPE .venv/bin/python bench/collectives.py"
A="-b 32M -e 64M -f 2 --op all_reduce --algorithm ring,mpi"
for i in 1 2 3 4; do
  COLLECTIVES_PIPE=1 $M $A --json $D/ar-pipe-$i.json > $D/ar-pipe-$i.txt 2>&1
  COLLECTIVES_PIPE=0 $M $A --json $D/ar-ring-$i.json > $D/ar-ring-$i.txt 2>&1
done
.venv/bin/python - "$D" > $D/rounds-ar.txt <<'PY'
import json, sys, glob
d = sys.argv[1]
print("launch      algorithm size(MiB) path    vs mpi  rounds (ms)")
for f in sorted(glob.glob(d + "/ar-*-[0-9].json")):
    for r in json.load(open(f)):
        v = r.get("ratio_vs_mpi")
        print(f"{f.split('/')[-1][:-5]:10s}  {r['algorithm']:9s} {r['bytes'] >> 20:9d} {str(r.get('path') or '-'):7s} "
              f"{'%.2f' % v if v else '   -'}   {' '.join('%.1f' % (x / 1000) for x in r['rounds_us'])}")
PY
