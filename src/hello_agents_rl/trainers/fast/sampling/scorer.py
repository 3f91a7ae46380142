"""`score`: per-token log-probs of given completions from the functional decoder, without gradients.

Exact where the model's forward is deterministic (no live dropout): the reference model, eval forwards.
"""

from __future__ import annotations

from typing import Any

import torch

from hello_agents_rl.trainers.fast.sampling.decoder import FastDecoder, base_model
from hello_agents_rl.trainers.fast.sampling.kv_cache import prefill

LOGITS_CHUNK_BYTES = 64 * 2**20  # scoring materialises logits for this many bytes of rows at a time
PACK_ROWS = 1024  # a scoring forward's rows (tokens) per product, the hint its decoder's weights are packed for


@torch.no_grad()
def score(
    decoder: FastDecoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Per-token log-probs of the last `logits_to_keep` tokens of left-padded prompt + right-padded completion
    rows -- TRL's `_get_per_token_logps_and_entropies` without gradients (0 where the mask is 0)."""
    batch, total = input_ids.shape
    length = total - logits_to_keep
    completion = input_ids[:, length:]
    cache, last, (cos, sin), valid = prefill(decoder, input_ids[:, :length], attention_mask[:, :length], logits_to_keep - 1)
    hidden = last[:, None]
    if logits_to_keep > 1:
        steps = logits_to_keep - 1
        causal = torch.ones(steps, steps, dtype=torch.bool, device=input_ids.device).tril()
        mask = torch.cat([valid[:, None, None, :length].expand(batch, 1, steps, length), causal.expand(batch, 1, -1, -1)], -1)
        rope = (cos[:, length : length + steps], sin[:, length : length + steps])
        hidden = torch.cat([hidden, decoder.forward(completion[:, :-1], rope, cache, length, mask)], dim=1)
    del cache
    vocab = decoder.embed.shape[0]
    rows = max(1, LOGITS_CHUNK_BYTES // (4 * vocab * logits_to_keep))
    logps = []
    for start in range(0, batch, rows):
        logits = decoder.logits(hidden[start : start + rows]) / temperature
        logps.append(logits.log_softmax(-1).gather(-1, completion[start : start + rows, :, None]).squeeze(-1))
    return torch.cat(logps) * attention_mask[:, length:]


def _live_dropout(module: torch.nn.Module) -> bool:
    # nn.Dropout, our FastDropout, or whatever else PEFT put there (Identity when p == 0): unknown kinds count as live
    return module.training and not isinstance(module, torch.nn.Identity) and getattr(module, "p", 1.0) > 0


def no_active_dropout(model: Any) -> bool:
    """True when a forward of `model` right now is deterministic (eval mode, or every live dropout is 0)."""
    if not model.training:
        return True
    base = base_model(model)
    if getattr(base.config, "attention_dropout", 0.0):
        return False
    for module in base.modules():
        dropouts = getattr(module, "lora_dropout", None)
        if dropouts is None or getattr(module, "disable_adapters", False) or getattr(module, "merged", False):
            continue
        for name in module.active_adapters:
            if name in dropouts and _live_dropout(dropouts[name]):
                return False
    return True
