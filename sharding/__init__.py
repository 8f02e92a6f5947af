"""ringzero sharding: ZeRO stages 0-3 over flat buffers, on top of collectives.

    from sharding import ZeroOptimizer, AdamW
    opt = ZeroOptimizer(units, comm, stage=3, optimizer=AdamW(lr=1e-3))
"""
from .estimate import estimate_memory
from .optim import SGD, AdamW
from .scaler import LossScaler
from .zero import ZeroOptimizer

__all__ = ["ZeroOptimizer", "AdamW", "SGD", "LossScaler", "estimate_memory"]
