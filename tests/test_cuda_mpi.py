"""Collectives on cupy arrays under mpirun with 1, 2 and 4 ranks sharing the
GPU(s), through CUDA IPC and through pinned-host staging (GPU only)."""
import pytest


def _has_gpu():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.parametrize("mode", ["ipc", "staged"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_gpu_collectives_under_mpirun(mpi, n, mode):
    if not _has_gpu():
        pytest.skip("needs cupy and a CUDA GPU")
    r = mpi(n, "gpu_collectives.py", mode, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("OK") == n, r.stdout
