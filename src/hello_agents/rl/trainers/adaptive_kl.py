"""Adaptive KL (`kl_target: [low, high]`): nudge beta so the measured KL stays in range.

A multiplicative controller in the spirit of Ziegler et al.'s adaptive KL, on TRL's own `beta`:
above the range beta grows, below it shrinks, bounded so it can neither vanish nor explode.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback


class AdaptiveKL(TrainerCallback):
    def __init__(self, trainer: Any, low: float, high: float, factor: float = 1.5) -> None:
        self.trainer, self.low, self.high, self.factor = trainer, low, high, factor

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer._metrics["train"]["kl_coef"].append(self.trainer.beta)  # logged as train/kl_coef

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        kl = (logs or {}).get("kl")
        if kl is None or state.global_step <= 1:  # the first step's KL is 0 by construction
            return
        if kl > self.high:
            self.trainer.beta = min(self.trainer.beta * self.factor, 10.0)
        elif kl < self.low:
            self.trainer.beta = max(self.trainer.beta / self.factor, 1e-4)
