"""Dynamic loss scaling for float16 (the GradScaler policy of torch.amp)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LossScaler:
    """The trainer multiplies its loss by ``scale``; an overflow anywhere skips
    the step on every rank and multiplies the scale by ``backoff``; after
    ``growth_interval`` clean steps in a row the scale grows by ``growth``."""
    scale: float = 2.0 ** 16
    growth: float = 2.0
    backoff: float = 0.5
    growth_interval: int = 2000
    good_steps: int = 0
    skipped: int = 0

    def update(self, overflow: bool) -> None:
        if overflow:
            self.scale *= self.backoff
            self.good_steps = 0
            self.skipped += 1
        else:
            self.good_steps += 1
            if self.good_steps >= self.growth_interval:
                self.scale *= self.growth
                self.good_steps = 0
