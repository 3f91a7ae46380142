"""Callbacks that keep a run's work safe: interrupts, non-finite gradients, and out-of-memory back-off."""

from __future__ import annotations

import _thread
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import TrainerCallback

from hello_agents_rl.config import TrainConfig


class InterruptGuard(TrainerCallback):
    """First Ctrl-C/SIGTERM: checkpoint at the end of this step and stop; a second one exits at once.

    Before any step has ended there is nothing to checkpoint, so the first signal exits at once; after, a step that
    has not ended `grace` seconds after the signal (three times the longest step so far, at least MIN_GRACE_S) is
    taken as hung and interrupted, keeping the checkpoints already saved.
    """

    MIN_GRACE_S = 120.0

    def __init__(self) -> None:
        self.requested: str | None = None
        self.steps_ended = 0
        self.longest_step = 0.0
        self._step_started: float | None = None
        self._watchdog: threading.Timer | None = None

    def request(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt  # second signal: the user means it
        self.requested = signal.Signals(signum).name
        if not self.steps_ended:
            print(f"\n{self.requested} received before any step ended: nothing to checkpoint, stopping now", flush=True)
            raise KeyboardInterrupt
        grace = max(self.MIN_GRACE_S, 3 * self.longest_step)
        print(f"\n{self.requested} received: saving a checkpoint after this step (again to quit now; a step still "
              f"running in {grace:.0f} s is taken as hung and stopped)", flush=True)
        self._watchdog = threading.Timer(grace, _thread.interrupt_main)
        self._watchdog.daemon = True
        self._watchdog.start()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_started = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._step_started is not None:
            self.longest_step = max(self.longest_step, time.monotonic() - self._step_started)
        self.steps_ended += 1
        if self.requested:
            self._cancel_watchdog()
            control.should_save = True
            control.should_training_stop = True

    def _cancel_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    @contextmanager
    def installed(self) -> Iterator[InterruptGuard]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signal handlers can only live in the main thread
            return
        previous = {sig: signal.signal(sig, self.request) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            self._cancel_watchdog()
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
