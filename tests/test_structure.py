"""The package's shape: no import circle among library modules (imports inside functions
count; lazy imports of optional dependencies are outside the graph anyway), files of at
most 300 lines, each opening with what it is for."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("collectives", "sharding")
EXTENSIONS = {"collectives._fastpath"}  # compiled leaves


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, mods: dict) -> set[str]:
    """Every library module ``name`` imports, at module level or inside a function."""
    deps = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod + "." + a.name if mod + "." + a.name in mods or mod + "." + a.name in EXTENSIONS else mod
                       for a in node.names]
        for t in targets:
            if t in EXTENSIONS:
                continue
            while t and t not in mods:  # a name inside a module: the module
                t = t.rpartition(".")[0]
            if t and t != name:
                deps.add(t)
    return deps


def _cycles(graph: dict) -> list[list[str]]:
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_among_library_modules():
    mods = _modules()
    graph = {m: _imports(m, p, mods) for m, p in mods.items()}
    circles = _cycles(graph)
    detail = ["; ".join(f"{m} -> {sorted(d for d in graph[m] if d in c)}" for m in c) for c in circles]
    assert not circles, detail


def test_the_check_finds_a_circle(tmp_path):
    """The walker sees imports inside functions: a circle closed there is one."""
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _cycles(graph) == [["a", "b"]]
    src = "def f():\n    from . import b\n"
    (tmp_path / "a.py").write_text(src)
    assert _imports("pkg.a", tmp_path / "a.py", {"pkg.a": None, "pkg.b": None}) == {"pkg.b"}


LIBRARY = sorted([p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")] + list((ROOT / "csrc").glob("*.c"))
                 + list((ROOT / "csrc").glob("*.cu*")) + list((ROOT / "csrc").glob("*.h")) + list(
                     (ROOT / "sharding").rglob("*.cu")))


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_library_files_are_short_and_say_what_they_are_for(path):
    text = path.read_text()
    assert text.count("\n") <= 300, f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines (at most 300)"
    head = text.lstrip()
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text))
        assert doc and len(doc.split()) >= 5, f"{path.relative_to(ROOT)}: no module docstring saying what it is for"
    else:
        assert head.startswith(("/*", "//")), f"{path.relative_to(ROOT)}: no header comment"
