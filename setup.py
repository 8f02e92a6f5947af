from setuptools import setup

setup(
    name="ringzero",
    version="0.1.0",
    description="Ring collectives over MPI (CPU and CUDA) and a ZeRO sharding layer",
    packages=["collectives", "collectives.kernels", "collectives.transport", "sharding"],
    package_data={"collectives": ["../csrc/*.cu", "../csrc/*.cuh"]},
    python_requires=">=3.10",
    install_requires=["numpy>=1.24", "mpi4py>=3.1", "ml-dtypes>=0.3"],
    extras_require={
        "gpu": ["cupy-cuda12x>=14", "nvidia-nccl-cu12>=2.18"],
        "test": ["pytest>=7"],
        "plot": ["matplotlib>=3.7"],
    },
)
