"""The module path: each prompt once per group through transformers' and PEFT's own modules, gradients included.

Not a forward of the package's: the oracle that the functional training forward (trainers/fast/lora_forward.py)
is checked against with LoRA dropout live, since it draws its dropout masks from the same modules in the same
order (a prompt's once per group); TRL's full forward draws them once per row.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from hello_agents_rl.trainers.fast.sampling.decoder import base_model


def _cache_kwarg(model: Any) -> str:
    return "cache" if "cache" in inspect.signature(base_model(model).model.forward).parameters else "past_key_values"


def module_path_logps(
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

