"""PyTorch's own distributed tests as ringzero's conformance suite: ``DistributedTest._DistTestBase``
from the installed wheel (torch/testing/_internal/distributed/distributed_test.py), for Gloo and
ringzero in the same run, at each world size, in two launch modes:

- ``mpirun``: the way PyTorch ran its MPI backend: ``mpirun -n N``, one process group made
  at start, every test run in turn by every rank (an MPI world for ringzero);
- ``spawn``: the suite's own harness (TestDistBackend, a MultiProcessTestCase): every test
  spawns N fresh processes that meet through a file store (a store world for ringzero).

The suite's gates are opened for ringzero as Gloo has them on CPU: its skip decorators are
evaluated with BACKEND=gloo (so exactly the tests that run for Gloo run for ringzero), its
DistTestCases feature sets list ringzero where they list gloo, and the tests then run with
BACKEND=ringzero, a name that the checks inside the test bodies (``BACKEND == "gloo"``) take
for Gloo's (AsGloo). What stays Gloo's alone is what torch itself keeps for the backend named
"gloo" (``dist.monitored_barrier``, Gloo's own error texts).

    python tests/torch_suite/run.py --world 2,3 --mode mpirun,spawn --json suite.json [-k allgather]

``--spawn-full 2`` (``make test-torch-suite``): at the other sizes the spawn mode runs only the
tests that did not pass under mpirun for both backends (the harness's own tests, and what failed),
reporting the rest with the mpirun outcome's reason; its process starts are most of the suite's time.

prints one line per test with both backends' outcomes, then the counts, and writes them all
to ``--json``. Exit status 1 when a test that passes for Gloo does not pass for ringzero,
unless ``--allow`` lists it (tests/torch_suite/elsewhere.txt: what another branch provides).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent.parent
BACKENDS = ("gloo", "ringzero")
FEATURES = ("gpu", "cuda", "ddp", "subgroup", "plugin")


class AsGloo(str):
    """ringzero's name inside the suite: equal to "gloo" as well as to itself, so the name checks
    in the test bodies (``if BACKEND == "gloo"``) take Gloo's branch for ringzero too; it hashes
    as itself, so the feature sets find it by its own name."""

    def __eq__(self, other):
        return other in ("gloo", str(self)) if isinstance(other, str) else NotImplemented

    def __ne__(self, other):
        same = self.__eq__(other)
        return same if same is NotImplemented else not same

    __hash__ = str.__hash__


def load_suite(backend: str):
    """distributed_test with its gates evaluated as for Gloo, then running as ``backend``."""
    sys.path.insert(0, str(ROOT))
    if backend == "ringzero":
        import collectives.torch_backend  # noqa: F401  registers "ringzero"
    os.environ["BACKEND"] = "gloo"  # the skip decorators, evaluated at import, see Gloo
    import torch.testing._internal.distributed.distributed_test as dt
    from torch.testing._internal.common_distributed import DistTestCases
    os.environ["BACKEND"] = backend
    dt.BACKEND = AsGloo(backend) if backend != "gloo" else backend
    for feature in FEATURES:
        if "gloo" in DistTestCases.backend_feature[feature] or feature == "plugin":
            DistTestCases.backend_feature[feature].add(backend)
    return dt


class Outcomes(unittest.TextTestResult):
    """Records every test's outcome as (outcome, first line of the reason)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes: dict = {}

    def _put(self, test, outcome, why=""):
        lines = [ln for ln in str(why).strip().splitlines() if ln.strip() and "PYTORCH_PRINT_REPRO" not in ln
                 and not ln.startswith("To execute this test")]
        errs = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception|Timeout|Exit)\b", ln)]
        self.outcomes[test.id().split(".")[-1]] = (outcome, (errs or lines or [""])[-1][:300], "\n".join(lines[-12:]))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "failed", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        from torch.testing._internal.common_distributed import TEST_SKIPS
        skips = {s.exit_code: s.message for s in TEST_SKIPS.values()}
        if issubclass(err[0], SystemExit) and getattr(err[1], "code", None) in skips:  # the suite's skip by exit
            return self.addSkip(test, skips[err[1].code])
        super().addError(test, err)
        self._put(test, "failed", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._put(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._put(test, "failed", "unexpected success")


def run_tests(cls, pattern: str, out: str) -> None:
    only = os.environ.get("RZ_SUITE_ONLY")
    names = sorted(n for n in dir(cls) if n.startswith("test_") and (not pattern or pattern in n)
                   and (only is None or n in json.loads(Path(only).read_text())))
    suite = unittest.TestSuite(cls(n) for n in names)
    with open(os.devnull, "w") as quiet:
        result = unittest.TextTestRunner(stream=quiet, resultclass=Outcomes, verbosity=0).run(suite)
    Path(out).write_text(json.dumps(result.outcomes))


def worker_spawn(backend: str, pattern: str, out: str) -> None:
    cls = globals()["TestSpawn"] = _spawn_class(load_suite(backend))  # the children find it here by name
    run_tests(cls, pattern, out)


def _spawn_class(dt):
    """The suite's TestDistBackend harness. ``RZ_SUITE_START=forkserver`` (the default) starts
    each test's processes from a server that has imported torch and the suite once, instead
    of a fresh interpreter per process (``spawn``: ~7 s a test here); the processes are new
    either way, and meet only through the test's file store. TEMP_DIR stays the run's own
    (a forked server keeps the environment it started with)."""
    import torch.multiprocessing as mp
    from torch.testing._internal.common_distributed import MultiProcessTestCase

    class TestSpawn(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
        def setUp(self):
            MultiProcessTestCase.setUp(self)
            dt.Barrier.init()
            self.skip_return_code_checks = [self.test_ddp_has_finalized.__wrapped__]
            if os.environ.get("RZ_SUITE_START", "forkserver") == "spawn":
                self._spawn_processes()
            else:
                ctx = mp.get_context("forkserver")
                ctx.set_forkserver_preload(["__main__"])
                self._start_processes(ctx.Process)
    TestSpawn.__module__, TestSpawn.__qualname__ = __name__, "TestSpawn"
    return TestSpawn


def worker_mpirun(backend: str, pattern: str, out: str) -> None:
    from datetime import timedelta
    os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
    dt = load_suite(backend)
    import torch.distributed as dist
    from torch.testing._internal.common_utils import TestCase
    dist.init_process_group(backend=backend, init_method="env://", timeout=timedelta(seconds=60))

    level = os.environ.get("TORCH_DISTRIBUTED_DEBUG")

    class TestMpirun(TestCase, dt.DistributedTest._DistTestBase):
        """PyTorch's MPI harness as it was: no ``self.rank``, so the few tests written for the
        spawn harness alone (monitored_barrier's, the object collectives') fail here for every
        backend; they run in the spawn mode. One group serves every test in turn.

        Every test starts at the debug level the process started with: torch's
        ``with_dist_debug_levels`` leaves its last level (DETAIL) set when none was set before,
        which in one process changes every later test (the spawn harness starts each test afresh)."""

        def setUp(self):
            super().setUp()
            if level is None:
                os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
            else:
                os.environ["TORCH_DISTRIBUTED_DEBUG"] = level
            dist.set_debug_level_from_env()
    run_tests(TestMpirun, pattern, f"{out}.rank{dist.get_rank()}")
    dist.destroy_process_group()


if __name__ != "__main__" and os.environ.get("RZ_SUITE_BACKEND"):  # a process the spawn harness started
    TestSpawn = _spawn_class(load_suite(os.environ["RZ_SUITE_BACKEND"]))


def load_names() -> list[str]:
    """Every test of _DistTestBase (importing the suite in a child: it reads its environment once)."""
    code = ("import os, json; os.environ.setdefault('BACKEND', 'gloo'); os.environ.setdefault('WORLD_SIZE', '2'); "
            "import torch.testing._internal.distributed.distributed_test as d; "
            "print(json.dumps([n for n in dir(d.DistributedTest._DistTestBase) if n.startswith('test_')]))")
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                     check=True).stdout.splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(mode: str, backend: str, world: int, pattern: str, timeout: float, skip=None) -> tuple[dict, float]:
    """One worker run: {test: (outcome, why)} merged over ranks, and its seconds. ``skip``:
    tests reported skipped without being started (see main)."""
    bin_ = Path(sys.executable).parent
    tmp = Path(tempfile.mkdtemp(prefix="rz-suite-"))
    for d in ("barrier", "test_dir", "init_dir"):
        (tmp / d).mkdir()
    env = dict(os.environ, WORLD_SIZE=str(world), RZ_SUITE_BACKEND=backend, TEMP_DIR=str(tmp),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_osc="^ucx",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONUNBUFFERED="1")
    for v in ("RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        env.pop(v, None)
    out = tmp / "outcomes.json"
    if skip:
        names = sorted(set(load_names()) - set(skip))
        (tmp / "only.json").write_text(json.dumps(names))
        env["RZ_SUITE_ONLY"] = str(tmp / "only.json")
    args = ["--worker", mode, "--backend", backend, "-k", pattern, "--out", str(out)]
    cmd = [sys.executable, str(HERE), *args]
    if mode == "mpirun":
        cmd = [str(bin_ / "mpirun"), "--oversubscribe", "-n", str(world), *cmd]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
        log = p.stdout[-2000:] + p.stderr[-2000:]
    except subprocess.TimeoutExpired:
        log = f"timed out after {timeout:g} s"
    took = time.monotonic() - t0
    files = [out] if mode == "spawn" else [Path(f"{out}.rank{r}") for r in range(world)]
    per_rank = [json.loads(f.read_text()) for f in files if f.exists()]
    if len(per_rank) != len(files):
        return {"(run)": ("failed", f"{mode} {backend} n={world}: {log.strip().splitlines()[-1:] or log}")}, took
    merged = {name: ("skipped", why) for name, why in (skip or {}).items()}
    for name in per_rank[0]:
        got = [r.get(name, ("failed", "missing on a rank")) for r in per_rank]
        bad = [g for g in got if g[0] == "failed"]
        merged[name] = bad[0] if bad else (got[0] if all(g[0] == got[0][0] for g in got) else ("skipped", got[0][1]))
    return merged, took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=("spawn", "mpirun"))
    ap.add_argument("--backend", default="ringzero")
    ap.add_argument("--out")
    ap.add_argument("-k", dest="pattern", default="", help="only tests whose name contains this")
    ap.add_argument("--world", default="2,3")
    ap.add_argument("--mode", default="mpirun,spawn")
    ap.add_argument("--json", help="write every outcome and the counts here")
    ap.add_argument("--allow", default=str(HERE.parent / "elsewhere.txt"),
                    help="tests allowed to pass for Gloo only (one name a line, # comments)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for one launch")
    ap.add_argument("--start", choices=("forkserver", "spawn"), default="forkserver",
                    help="how the spawn mode starts each test's processes")
    ap.add_argument("--spawn-full", default=None,
                    help="world sizes at which the spawn mode runs every test (default: all); at the others "
                         "it runs only the tests that did not pass under mpirun for both backends")
    ap.add_argument("--spawn-all", action="store_true",
                    help="in the spawn mode, start every test, also those skipped under mpirun")
    args = ap.parse_args()
    if args.worker == "spawn":
        worker_spawn(args.backend, args.pattern, args.out)
        return 0
    if args.worker == "mpirun":
        worker_mpirun(args.backend, args.pattern, args.out)
        return 0
    allowed = set()
    if args.allow and Path(args.allow).exists():
        allowed = {ln.split("#")[0].strip() for ln in Path(args.allow).read_text().splitlines()} - {""}
    report, missing = {}, []
    os.environ["RZ_SUITE_START"] = args.start
    modes = sorted(args.mode.split(","), key=("mpirun", "spawn").index)  # mpirun first: see skip below
    worlds = [int(w) for w in args.world.split(",")]
    spawn_full = set(worlds if args.spawn_full is None else map(int, args.spawn_full.split(",")))
    for mode in modes:
        for world in worlds:
            got = {}
            for backend in BACKENDS:
                # In the spawn mode a test the suite skips at run time (no GPU, too few ranks) still
                # starts its processes and makes its group, a few seconds each: a test the same
                # gate skipped under mpirun, at this size, for this backend, is reported skipped.
                before = report.get(f"mpirun n={world}", {}).get("outcomes", {}).get(backend, {})
                skip = None if mode != "spawn" or args.spawn_all else {
                    n: f"skipped under mpirun at {world} ranks: {o[1]}" for n, o in before.items() if o[0] == "skipped"}
                if skip is not None and world not in spawn_full:
                    # at this size the spawn mode runs what mpirun could not settle: a test that passed
                    # under mpirun for both backends is reported with that outcome's reason
                    mpirun = report.get(f"mpirun n={world}", {}).get("outcomes", {})
                    skip.update({n: f"passed under mpirun at {world} ranks for gloo and ringzero"
                                 for n in mpirun.get("gloo", {}) if all(
                                     mpirun.get(b, {}).get(n, ("",))[0] == "passed" for b in BACKENDS)})
                got[backend], took = launch(mode, backend, world, args.pattern, args.timeout, skip)
                print(f"== {mode} n={world} {backend}: {took:.0f} s", flush=True)
            names = sorted(set(got["gloo"]) | set(got["ringzero"]))
            for name in names:
                g, z = (got[b].get(name, ("absent", "")) for b in BACKENDS)
                print(f"{mode} n={world} {name}: gloo={g[0]} ringzero={z[0]}" + (f"  [{z[1]}]" if z[0] == "failed"
                                                                                   else ""), flush=True)
            counts = {b: {o: sum(v[0] == o for v in got[b].values()) for o in ("passed", "failed", "skipped")}
                      for b in BACKENDS}
            only = [n for n in names if got["gloo"].get(n, ("",))[0] == "passed"
                    and got["ringzero"].get(n, ("",))[0] != "passed"]
            key = f"{mode} n={world}"
            report[key] = {"counts": counts, "gloo_only": only, "outcomes": got}
            print(f"{key}: gloo {counts['gloo']}, ringzero {counts['ringzero']}; passing for Gloo only: "
                  f"{len(only)} ({len([n for n in only if n in allowed])} of them listed as provided elsewhere)",
                  flush=True)
            missing += [f"{key} {n}" for n in only if n not in allowed]
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    for m in missing:
        print(f"NOT PASSING for ringzero where Gloo passes: {m}", flush=True)
    both = sum(sum(got["ringzero"].get(n, ("",))[0] == "passed" for n, o in got["gloo"].items() if o[0] == "passed")
               for got in (r["outcomes"] for r in report.values()))
    print(f"{sum(len(r['gloo_only']) for r in report.values()) - len(missing)} passes for Gloo only are listed in "
          f"{args.allow}; {len(missing)} are not", flush=True)
    broken = [f"{key} {b}: {r['outcomes'][b]['(run)'][1]}" for key, r in report.items() for b in BACKENDS
              if "(run)" in r["outcomes"][b]]
    for line in broken:  # a launch that gave no outcomes at all: the harness failed, not a test
        print(f"LAUNCH FAILED: {line}", flush=True)
    print(f"torch-suite: {both} passed, {len(missing)} failed, {len(broken)} launches failed", flush=True)
    return 1 if missing or broken else 0


if __name__ == "__main__":
    sys.exit(main())
