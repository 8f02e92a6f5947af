"""ringzero's packaging. The CUDA sources stay at the repository's top (csrc/) and
ship inside the package, as collectives/kernels/csrc/, where launch.CSRC finds
them through importlib.resources once installed."""
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

CSRC = Path(__file__).resolve().parent / "csrc"


class BuildPyWithCsrc(build_py):
    """build_py that also copies csrc/*.cu and *.cuh into collectives/kernels/csrc/, and the
    GPU kernel ring's csrc/ring/ into collectives/gpu_ring/kernels/ (gpu_ring/source.py finds
    them there, and rz_common.cuh in the first folder; torch_backend/native.py builds
    torch_lane.cpp from the first)."""

    def run(self):
        super().run()
        for sub, dest, kinds in (("", ("collectives", "kernels", "csrc"), (".cu", ".cuh", "torch_lane.cpp", "lane_api.h")),
                                 ("ring", ("collectives", "gpu_ring", "kernels"), (".cu", ".cuh", ".h"))):
            to = Path(self.build_lib).joinpath(*dest)
            to.mkdir(parents=True, exist_ok=True)
            for src in sorted(p for p in (CSRC / sub).iterdir() if p.suffix in kinds or p.name in kinds):
                self.copy_file(str(src), str(to / src.name))


# The cupy wheel must match the CUDA major of the machine's driver (a cupy-cuda12x
# finds no libnvrtc.so.12 where only CUDA 13 is present); [ctk] brings NVRTC and the
# runtime as wheels. `gpu` is CUDA 13 (the H100/H200 machines here); CUDA 12 drivers
# take `gpu-cuda12`. requirements-gpu.txt says the same.
GPU = {
    "13": ["cupy-cuda13x[ctk]>=14", "nvidia-nccl-cu13>=2.27"],
    "12": ["cupy-cuda12x[ctk]>=14", "nvidia-nccl-cu12>=2.18"],
}

setup(
    name="ringzero",
    version="0.1.0",
    description="Ring collectives over MPI (CPU and CUDA) and a ZeRO sharding layer",
    packages=find_packages(include=["collectives", "collectives.*", "sharding", "sharding.*"]),
    package_data={"sharding": ["kernels/*.cu"]},
    cmdclass={"build_py": BuildPyWithCsrc},
    # the direct roads' repeated calls and the pipe in C (collectives/fast, csrc/fastpath.c); optional:
    # without a C compiler the same steps run in Python
    ext_modules=[Extension("collectives._fastpath", ["csrc/fastpath.c", "csrc/lane.c", "csrc/lane_table.c", "csrc/pipe.c", "csrc/wait.c"],
                           depends=["csrc/fastpath.h", "csrc/lane.h", "csrc/lane_api.h"], extra_compile_args=["-O3"], optional=True)],
    python_requires=">=3.10",
    install_requires=["numpy>=1.24", "mpi4py>=3.1", "ml-dtypes>=0.3"],
    extras_require={
        "gpu": GPU["13"],
        "gpu-cuda13": GPU["13"],
        "gpu-cuda12": GPU["12"],
        "test": ["pytest>=7"],
        "plot": ["matplotlib>=3.7"],
    },
)
