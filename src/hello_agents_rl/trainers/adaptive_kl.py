"""Adaptive KL (`kl_target: [low, high]`): nudge beta so the measured KL stays in range.

A multiplicative controller in the spirit of Ziegler et al.'s adaptive KL, on TRL's own `beta`:
above the range beta grows, below it shrinks, bounded so it can neither vanish nor explode.
The current beta is saved in every checkpoint (transformers' ExportableState: trainer_state.json's
`stateful_callbacks`) and restored on resume, so a resumed run continues with the beta it had.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState


class AdaptiveKL(TrainerCallback, ExportableState):
    def __init__(self, trainer: Any, low: float, high: float, factor: float = 1.5) -> None:
        self.trainer, self.low, self.high, self.factor = trainer, low, high, factor

    def state(self) -> dict[str, Any]:
        """What the Trainer writes into each checkpoint's trainer_state.json."""
        return {"args": {"low": self.low, "high": self.high, "factor": self.factor},
                "attributes": {"beta": float(self.trainer.beta)}}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Resuming, `state` is the checkpoint's TrainerState. We restore beta ourselves rather than through
        # `restore_callback_states_from_checkpoint`, which rebuilds callbacks from their args (ours needs the trainer).
        saved = state.stateful_callbacks.get(type(self).__name__)
        if isinstance(saved, dict) and "beta" in saved.get("attributes", {}):
            self.trainer.beta = float(saved["attributes"]["beta"])
        else:  # a checkpoint from a run without kl_target: the Trainer's save expects our entry
            state.stateful_callbacks[type(self).__name__] = self.state()

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
