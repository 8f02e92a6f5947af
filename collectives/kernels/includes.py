"""The kernels' sources as a compiler gets them: local includes inlined, since NVRTC has no
include path of ours. Used by the reduce/cast/optimizer kernels (cuda_kernels.py) and the ring
kernels (gpu_ring/source.py); nothing here needs a GPU."""
from __future__ import annotations

import re
from pathlib import Path


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)
_PRAGMA_ONCE = re.compile(r"^\s*#\s*pragma\s+once\s*$", re.M)


def inline_includes(path: Path, dirs) -> str:
    """``path``'s text with its local includes (``#include "x"``) inlined, each once, looked up in
    ``dirs`` in order: what NVRTC compiles, since it has no include path of ours (the ring
    kernels' gpu_ring/source.py and the reduce/cast/optimizer kernels' cuda_kernels.py)."""
    dirs = [Path(d) for d in dirs]

    def find(name: str) -> Path:
        for d in dirs:
            if (d / name).is_file():
                return d / name
        raise FileNotFoundError(f"{name} (included by {path.name}) not found in {', '.join(map(str, dirs))}")

    def expand(text: str, seen: set) -> str:
        def one(m):
            name = m.group(1)
            if name in seen:
                return ""
            seen.add(name)
            return expand(_PRAGMA_ONCE.sub("", find(name).read_text()), seen)
        return _INCLUDE.sub(one, text)
    return expand(Path(path).read_text(), set())
