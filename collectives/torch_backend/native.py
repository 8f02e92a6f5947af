"""The group's blocking one-tensor calls in C++ (csrc/torch_lane.cpp): build, load, install.

Reading ``opts.reduceOp``, ``opts.asyncOp`` and a tensor's ``is_cpu``,
``is_contiguous``, ``data_ptr``, ``numel`` and ``dtype`` from Python costs
about 2 us a call, more than the collective itself at 1 KiB. The extension reads
them with torch's C++ API and hands the call to the Communicator's Lane
(csrc/lane.c); what the lane does not take goes to the group's Python method.

The extension is built against the torch installed (``make venv`` runs
``python -m collectives.torch_backend.build``; it takes about 30 s) and loads
only under the torch it was built for. Without it (no build, another torch, no
C compiler, ``COLLECTIVES_TORCH_LANE=0``) every call takes the Python methods,
which do the same, slower.
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import torch

from .. import tuning
from ..errors import CollectiveTimeout
from .errors import torch_error
from .ops import OP_NAMES

NAME = "collectives.torch_backend._torch_lane"
# group method -> the lane's kind (csrc/lane.c's KINDS: fast/lane.py)
METHODS = {"allreduce": 0, "reduce_scatter_single": 1, "_reduce_scatter_base": 1,
           "all_gather_single": 2, "_allgather_base": 2, "broadcast": 3}
_loaded: dict = {}


def _sources() -> Path:
    """The folder of torch_lane.cpp and lane_api.h: the checkout's csrc/, or the copy an
    installed package carries (setup.py's build_py)."""
    here = Path(__file__).resolve().parent
    for d in (here.parent.parent / "csrc", here.parent / "kernels" / "csrc"):
        if (d / "torch_lane.cpp").is_file():
            return d
    raise FileNotFoundError("torch_lane.cpp is in neither the checkout's csrc/ nor the package")


def build(verbose: bool = False) -> Path:
    """Compile the extension for the installed torch into this package; return its path."""
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    src = _sources()
    root = Path(__file__).resolve().parent.parent.parent
    tmp = root / "build" / "torch_lane"
    ext = CppExtension(NAME, [str(src / "torch_lane.cpp")], include_dirs=[str(src)],
                       define_macros=[("RZ_TORCH_VERSION", f'"{torch.__version__}"')],
                       extra_compile_args=["-O2", "-std=c++20"])  # torch 2.13 headers are C++20
    setup(name="ringzero-torch-lane", ext_modules=[ext],
          cmdclass={"build_ext": BuildExtension.with_options(use_ninja=False)},
          script_args=["-q" if not verbose else "-v", "build_ext", "--force", "--build-lib", str(root),
                       "--build-temp", str(tmp)])
    mod = importlib.util.find_spec(NAME)
    return Path(mod.origin)


def load():
    """The extension module, or None where it is not built, was built for another torch,
    or is turned off (``COLLECTIVES_TORCH_LANE=0``)."""
    if "mod" in _loaded:
        return _loaded["mod"]
    mod = None
    if tuning.load().torch_lane:
        try:
            mod = importlib.import_module(NAME)
        except ImportError:
            mod = None
        if mod is not None and mod.TORCH_VERSION != torch.__version__:
            mod = None  # field offsets are torch's own: never read them for another build
    _loaded["mod"] = mod
    return mod


def install(group) -> bool:
    """Set the C++ calls over ``group``'s methods (instance attributes); False where the
    extension is not loaded. Each call reads the Communicator's lane when it runs (a
    Communicator without one, or closed, sends every call to the Python method)."""
    mod = load()
    comm = group.comm
    if mod is None:
        return False
    ops = tuple(OP_NAMES.get(k) for k in range(max(OP_NAMES) + 1))
    cls = type(group)
    for name, kind in METHODS.items():
        setattr(group, name, mod.TorchCall(kind, group, getattr(cls, name), comm, ops, CollectiveTimeout, torch_error))
    return True
