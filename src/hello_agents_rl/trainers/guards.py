"""Callbacks that keep a run's work safe: interrupts, non-finite gradients, and out-of-memory back-off."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import torch
from transformers import TrainerCallback

from hello_agents_rl.config import TrainConfig


class InterruptGuard(TrainerCallback):
    """First Ctrl-C/SIGTERM: checkpoint at the end of this step and stop; a second one exits at once."""

    def __init__(self) -> None:
        self.requested: str | None = None

    def request(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt  # second signal: the user means it
        self.requested = signal.Signals(signum).name
        print(f"\n{self.requested} received: saving a checkpoint after this step (again to quit now)", flush=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.requested:
            control.should_save = True
            control.should_training_stop = True

    @contextmanager
    def installed(self) -> Iterator["InterruptGuard"]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signal handlers can only live in the main thread
            return
        previous = {sig: signal.signal(sig, self.request) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class NonFiniteGuard(TrainerCallback):
    """A NaN/inf gradient never reaches the weights: the update is dropped, then the run stops (or skips on)."""

    def __init__(self, skip: bool) -> None:
        self.skip = skip
        self.skipped_steps: list[int] = []
        self.error: str | None = None

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        params = [p for p in model.parameters() if p.grad is not None]
        if all(torch.isfinite(p.grad).all() for p in params):
            return
        for p in params:
            p.grad = None  # the optimizer skips parameters without a gradient: the weights stay good
        step = state.global_step + 1
        self.skipped_steps.append(step)
        if not self.skip:
            self.error = (
                f"non-finite loss or gradient at step {step}; the update was dropped and training stopped. "
                "Lower learning_rate, keep max_grad_norm on, check the reward for NaN, then resume with "
                "resume_from_checkpoint: true (or set skip_nonfinite_steps: true to skip such steps)"
            )
            control.should_training_stop = True


def backoff(cfg: TrainConfig) -> tuple[TrainConfig, str] | None:
    """The book's OOM advice, one step at a time; None when nothing is left to shrink."""
    steps = [
        ("gradient_checkpointing", not cfg.gradient_checkpointing, True),
        ("batch_size", cfg.batch_size > 1, cfg.batch_size // 2),
        ("num_generations", cfg.num_generations > 2, max(2, cfg.num_generations // 2)),
        ("max_new_tokens", cfg.max_new_tokens > 64, cfg.max_new_tokens // 2),
    ]
    for key, possible, value in steps:
        if possible:
            return cfg.model_copy(update={key: value}), f"{key}: {getattr(cfg, key)} -> {value}"
    return None
