"""The docs stay honest: every repository path and module README.md, docs/*.md and
the results folders' READMEs name exists, no page tells history ("session 17",
"(issue 13)"), and the pages this repository owns point at nothing outside it."""
from __future__ import annotations

import glob
import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench" / "results").glob("*/README.md"))]
TOP = ("collectives", "sharding", "bench", "examples", "csrc", "tests", "docs")
# A path that starts at one of the repository's top-level folders, as docs write
# them: in backticks, commands or prose; braces and * as shells expand them.
PATH = re.compile(r"(?<![\w./-])((?:\.\./)*(?:%s)/[\w./{},*-]*)" % "|".join(TOP))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
OUTSIDE = re.compile(r"(?<![\w.])(\.\./|/(?:work|home|tmp|root|usr|opt|mnt)/|/dev/(?!shm))")
HISTORY = ("used to", "this session", "until now", "no longer", "earlier version", "previously")
# numbered history labels: a session, an issue, a wave or a run of the past named by number
LABEL = re.compile(r"\b(?:sessions?|issues?|waves?)\s*#?\d+|\(issue|the other engineers", re.IGNORECASE)
# dotted modules of the packages, as docs write them: collectives.roads, python -m collectives.teach.explain
MODULE = re.compile(r"(?<![\w./-])((?:collectives|sharding)(?:\.[a-z_][a-z0-9_]*)+)")


def expand(pattern: str) -> list[str]:
    """`a{1,2}b` -> [a1b, a2b] (as a shell would); no braces: the pattern itself."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def named_paths(text: str) -> set[str]:
    found = set()
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".,:;")
        if p.count("{") != p.count("}"):   # a brace group cut by the regex: drop its tail
            p = p[:p.rindex("{")].rstrip(".,")
        found.add(p)
    return found


def exists(path: str, base: Path) -> bool:
    return all(glob.glob(str(base / p)) for p in expand(path))


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_named_path_exists(doc):
    text = doc.read_text()
    missing = sorted(p for p in named_paths(text) if not p.startswith("../") and not exists(p, ROOT))
    links = [u for u in LINK.findall(text) if "://" not in u and not u.startswith("mailto:")]
    missing += sorted(u for u in links if not exists(u, doc.parent))
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


EXTENSIONS = {"collectives._fastpath"}  # compiled by pip install (setup.py)


def module_exists(name: str) -> bool:
    """A package, a module, or a name a module defines or imports (collectives.roads.choose)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:k])
        src = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if src.exists():
            if k == len(parts):
                return True
            if k < len(parts) - 1:  # at most one attribute past the module
                return False
            attr = re.escape(parts[-1])
            return bool(re.search(rf"^(?:def|class) {attr}\b|^{attr}\b\s*[:=]|import .*\b{attr}\b",
                                  src.read_text(), re.MULTILINE))
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_named_module_exists(doc):
    missing = sorted({m for m in MODULE.findall(doc.read_text())
                      if not m.endswith(".py") and m not in EXTENSIONS and not module_exists(m)})
    assert not missing, f"{doc.relative_to(ROOT)} names modules that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_no_numbered_history_labels(doc):
    found = sorted({m.group(0) for m in LABEL.finditer(doc.read_text())})
    assert not found, f"{doc.relative_to(ROOT)} tells history with numbered labels (git log is for that): {found}"


@pytest.mark.parametrize("name", ["README.md", "docs/architecture.md", "docs/walkthrough.md"])
def test_no_path_outside_the_repository(name):
    lines = (ROOT / name).read_text().splitlines()
    bad = [f"{i}: {line.strip()}" for i, line in enumerate(lines, 1) if OUTSIDE.search(line)]
    here = (ROOT / name).parent
    bad += [f"{i}: {line.strip()}" for i, line in enumerate(lines, 1) for u in LINK.findall(line)
            if "://" not in u and not (here / u).resolve().is_relative_to(ROOT)]
    assert not bad, f"{name} points outside the repository:\n" + "\n".join(bad)


def test_architecture_is_in_the_present_tense():
    text = (ROOT / "docs/architecture.md").read_text().lower()
    found = [h for h in HISTORY if h in text]
    assert not found, f"docs/architecture.md tells history (git log is for that): {found}"


def test_the_checker_sees_what_it_should():
    """The extraction itself: a doc naming a missing file, a brace group, a link."""
    runs = "bench/results/2026-11-29-cpu2-ring/collectives-cpu-n2-run{1,2,3}.txt"
    text = (f"see `collectives/host/ring.py`, {runs}, "
            "and collectives/nowhere.py. [x](docs/walkthrough.md)")
    assert named_paths(text) == {"collectives/host/ring.py", "collectives/nowhere.py", "docs/walkthrough.md", runs}
    assert exists(runs, ROOT)
    assert not exists("collectives/nowhere.py", ROOT)
    assert not exists(runs.replace("{1,2,3}", "{1,9}"), ROOT)
    assert module_exists("collectives.roads") and module_exists("collectives.roads.choose")
    assert module_exists("collectives.teach.explain") and not module_exists("collectives.explain")
    assert not module_exists("collectives.roads.choose.why")
    assert LABEL.search("in session 17 we") and LABEL.search("symmetric memory (issue 13)")
    assert not LABEL.search("the issue's first commit") and not LABEL.search("2 sessions of training")
    assert OUTSIDE.search("`../shared/DESIGN.md` is the plan")
    assert not OUTSIDE.search("collectives/transport/device/ and bench/results/")
