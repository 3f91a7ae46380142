"""The fast path's engine behind one door: `sample`, `score` and `TrainForward`. The trainer (trainer.py) calls
only these, after gate.py has said they apply; each records what ran in the run's FastPathRecord.

Shapes: R rows (prompts repeated num_generations times, a group's rows anywhere), P prompt and C completion tokens,
prompts left-padded, completions right-padded.

    sample(model, prompt_ids: R lists, ...)              -> R completion id lists, or None and why
    score(model, ids [R, P+C], mask [R, P+C], C, T)      -> log-probs [R, C] without gradients (reference, eval)
    TrainForward()(model, ids, mask, C, T, entropy)      -> (log-probs [R, C], entropies [R, C] | None), or None
"""

from __future__ import annotations

from typing import Any

import torch

from hello_agents_rl.trainers.fast import gate
from hello_agents_rl.trainers.fast.lora_forward import LoraTrainView
from hello_agents_rl.trainers.fast.record import FastPathRecord
from hello_agents_rl.trainers.fast.sampling import (
    SCORE_PACK_ROWS,
    Unsupported,
    fast_decoder_or_reason,
    sampler_settings,
)
from hello_agents_rl.trainers.fast.sampling import sample as sample_with
from hello_agents_rl.trainers.fast.sampling import score as score_with


def sample(model: Any, generation_config: Any, prompt_ids: list[list[int]], max_new_tokens: int,
           eos_token_ids: list[int], pad_token_id: int, record: FastPathRecord
           ) -> tuple[list[list[int]] | None, str | None]:
    """Completions as generate() would sample them with this generation config, or None and why not."""
    settings, blocker = sampler_settings(model, generation_config)
    decoder = None
    if blocker is None:
        decoder, blocker = fast_decoder_or_reason(model, pack_rows=len(prompt_ids))
    if blocker is not None:
        return None, blocker
    completion_ids, _ = sample_with(model, prompt_ids, max_new_tokens=max_new_tokens, eos_token_ids=eos_token_ids,
                                    pad_token_id=pad_token_id, decoder=decoder, with_logprobs=False, **settings)
    record.ran("sampler_completions", len(prompt_ids))
    return completion_ids, None


def scorer(model: Any, compute_entropy: bool) -> Any | None:
    """The functional decoder to score with, where scoring is exact (gate.scorer_blocker)."""
    if gate.scorer_blocker(model, compute_entropy):
        return None
    decoder, _ = fast_decoder_or_reason(model, pack_rows=SCORE_PACK_ROWS)
    return decoder


def score(decoder: Any, ids: torch.Tensor, mask: torch.Tensor, width: int, temperature: float,
          record: FastPathRecord) -> torch.Tensor:
    record.ran("functional_scores")
    return score_with(decoder, ids, mask, width, temperature)


class TrainForward:
    """The training forward: the LoRA forward as one function (lora_forward.py) where it applies; None elsewhere,
    or where no prompt repeats (TRL's forward then)."""

    def __init__(self, record: FastPathRecord) -> None:
        self.record = record
        self.view: LoraTrainView | None = None
        self.view_blocker: str | None = None  # this policy cannot have a view (full fine-tuning...): decided once

    def __call__(self, model: Any, ids: torch.Tensor, mask: torch.Tensor, width: int, temperature: float,
                 compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        part = self._functional(model, ids, mask, width, temperature, compute_entropy)
        self.record.ran("functional_train_forwards" if part is not None else "trl_forwards")
        return part

    def _functional(self, model: Any, ids: torch.Tensor, mask: torch.Tensor, width: int, temperature: float,
                    compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        if gate.train_forward_blocker(ids.device):
            return None
        if self.view_blocker:
            self.record.passed_over("functional forward", self.view_blocker)
            return None
        try:
            if self.view is None or self.view.stale():
                try:
                    self.view = LoraTrainView(model)
                except Unsupported as why:
                    self.view_blocker = str(why)
                    raise
            return self.view.logps(ids, mask, width, temperature, compute_entropy)
        except Unsupported as why:
            self.record.passed_over("functional forward", str(why))
            return None
