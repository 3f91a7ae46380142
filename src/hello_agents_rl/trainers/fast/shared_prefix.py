"""Log-probabilities with each prompt computed once per group, gradients included (the training forward).

A GRPO batch holds each prompt num_generations times: its KV cache is computed once, kept in the autograd graph,
indexed out to the completions, and the completions are scored through TRL's own fused LM head. Same values and
gradients as TRL's full forward; LoRA dropout on prompt tokens is drawn once per group instead of once per row
(the same in expectation).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from hello_agents_rl.compat import model_is_checkpointing
from hello_agents_rl.trainers.fast.sampling.decoder import architecture_blocker, base_model
from hello_agents_rl.trainers.fast.verified import ENV_SWITCH, enabled


def shared_prefix_blocker(model: Any, compute_aux_loss: bool = False, extra: dict | None = None) -> str | None:
    """Why the shared-prompt forward cannot stand in for TRL's full forward here (None: it can)."""
    if not enabled():
        return f"{ENV_SWITCH}=0"
    if compute_aux_loss or any(v is not None for v in (extra or {}).values()):
        return "multimodal inputs or MoE aux loss"
    base = base_model(model)
    blocker = architecture_blocker(getattr(base, "config", None))
    if blocker:
        return blocker
    if model_is_checkpointing(base):
        return "gradient checkpointing"
    return None


def _cache_kwarg(model: Any) -> str:
    return "cache" if "cache" in inspect.signature(base_model(model).model.forward).parameters else "past_key_values"


def shared_prefix_logps(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, compute_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """TRL's per-token log-probs (and entropies) of the last `logits_to_keep` tokens, computing each distinct
    prompt once: a forward over the unique prompts fills a KV cache (kept in the autograd graph), the cache is
    indexed out to every completion of the group, and one forward over the completions scores them through
    TRL's fused LM head. Same positions, masks and head as TRL's full forward; a GRPO batch holds each
    prompt num_generations times, so prompt tokens cost 1/num_generations of before. None if no prompt repeats.
    """
    prompt_len = input_ids.size(1) - logits_to_keep
    if prompt_len < 2:
        return None
    prompts = input_ids[:, :prompt_len].masked_fill(attention_mask[:, :prompt_len] == 0, -1)
    unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    if unique.size(0) == input_ids.size(0):
        return None
    first = torch.zeros(unique.size(0), dtype=torch.long, device=input_ids.device)
    first.scatter_(0, inverse, torch.arange(input_ids.size(0), device=input_ids.device))  # any row of each group
    key = _cache_kwarg(model)
    prefix = model(
        input_ids=input_ids[first, : prompt_len - 1],
        attention_mask=attention_mask[first, : prompt_len - 1],
        use_cache=True,
        logits_to_keep=1,
    )
    cache = getattr(prefix, key, None)
    if cache is None:
        cache = prefix.past_key_values
    cache.batch_select_indices(inverse)
    suffix = input_ids[:, prompt_len - 1 :]
    labels = suffix.masked_fill(attention_mask[:, prompt_len - 1 :] == 0, -100)
    labels[:, 0] = -100  # the last prompt token only predicts the first completion token
    outputs = model(input_ids=suffix, attention_mask=attention_mask, labels=labels, fused_lm_head=True, **{key: cache})
    logps = outputs.log_probs[:, -logits_to_keep:]
    entropies = outputs.entropy[:, -logits_to_keep:] if compute_entropy else None
    return logps, entropies

