"""The same instrument on every variant of a GRPO benchmark: where each optimizer step's seconds go."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from roofline import BatchCounts


def timed_trainer(base: type, times: dict[str, float], batches: list[dict] | None = None) -> type:
    """`base` with the same instruments on both variants: where each optimizer step's seconds go, and (batches)
    what each rollout held: rows, distinct prompts and their tokens, completion tokens, the longest completion."""
    import torch

    def rollout(self: Any, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            out = super(Timed, self)._generate_single_turn(prompt_ids, *args, **kwargs)
        finally:
            times["generation"] += time.perf_counter() - started
        if batches is not None:
            distinct = [len(p) for p in {tuple(p) for p in prompt_ids}]
            batches.append(asdict(BatchCounts.of(distinct, [len(c) for c in out[0]])))
        return out

    def clock(key: str, method: str):
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return getattr(super(Timed, self), method)(*args, **kwargs)
            finally:
                times[key if key != "logps" else ("train_forward" if torch.is_grad_enabled() else "reference")] += (
                    time.perf_counter() - started)
        return wrapped

    class Timed(base):  # type: ignore[misc, valid-type]
        training_step = clock("step", "training_step")
        _prepare_inputs = clock("prepare", "_prepare_inputs")
        _generate_single_turn = rollout
        _get_per_token_logps_and_entropies = clock("logps", "_get_per_token_logps_and_entropies")

    Timed.__name__ = f"Timed{base.__name__}"
    return Timed


def phase_split(times: dict[str, float]) -> dict[str, float]:
    """The seconds timed_trainer collected, as generation / reference / training forward+backward / other."""
    return {"generation": times["generation"], "reference": times["reference"],
            "train_fwd_bwd": times["step"] - times["prepare"],
            "other": times["prepare"] - times["generation"] - times["reference"]}
