# base's bench/collectives.py launched from both trees, taking turns. Base's bench puts its own tree
# (/work/wt-base) first on sys.path, so both sides run base's library: an A/A run (README.md).
OUT=$(realpath -m "$1"); mkdir -p $OUT
for i in 1 2 3 4 5; do for side in base new; do
  if [ $side = base ]; then L=/work/wt-base; else L=/work/main; fi
  ( cd $L && PYTHONPATH=$L timeout 300 /work/main/.venv/bin/mpirun --allow-run-as-root -n 2 -x PYTHONPATH /work/main/.venv/bin/python /work/wt-base/bench/collectives.py \
     -b 1K -e 64M -f 4 --op all_reduce,reduce_scatter,all_gather --algorithm ring,mpi --json $OUT/$side-$i.json > $OUT/$side-$i.txt 2>&1 ) || echo "$side $i rc=$?"
done; done
