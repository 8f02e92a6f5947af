"""The ZeRO paper's per-rank memory figures (see sharding/memory.py for the formulas)."""
from __future__ import annotations

CATEGORIES = ("weights", "gradients", "master", "optimizer", "comm")


def estimate_memory(num_params: float, world_size: int, stage: int, *, param_bytes: int = 2,
                    grad_bytes: int = 2, master_bytes: int = 4, state_bytes: int = 8) -> dict:
    """Per-rank bytes by category from the ZeRO formulas (no communication buffers).

    Args:
      num_params: Ψ.
      world_size: N.
      stage: 0-3.
      param_bytes, grad_bytes: bytes per weight and per gradient element (2 for fp16/bf16).
      master_bytes, state_bytes: K = master_bytes + state_bytes (4 + 8 for Adam).
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0-3, got {stage}")
    psi, n = float(num_params), int(world_size)
    w = param_bytes * psi / (n if stage >= 3 else 1)
    g = grad_bytes * psi / (n if stage >= 2 else 1)
    m = master_bytes * psi / (n if stage >= 1 else 1)
    s = state_bytes * psi / (n if stage >= 1 else 1)
    out = {"weights": w, "gradients": g, "master": m, "optimizer": s, "comm": 0.0}
    out["total"] = w + g + m + s
    return out
