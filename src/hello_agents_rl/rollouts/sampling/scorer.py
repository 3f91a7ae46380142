"""`score`: per-token log-probs of given completions from the functional decoder, without gradients.

Exact where the model's forward is deterministic (no live dropout): the reference model, eval forwards.
"""

from __future__ import annotations

from typing import Any

import torch

from hello_agents_rl import speedups
from hello_agents_rl.rollouts.sampling.decoder import FastDecoder, base_model
from hello_agents_rl.rollouts.sampling.kv_cache import prefill

LOGITS_CHUNK_BYTES = 64 * 2**20  # scoring materialises logits for this many bytes of rows at a time
# The head over scored tokens, this many bytes of logits at a time (256 tokens of a 49k vocabulary): fewer rows
# make MKL's product slower at this width; more leave the chunk's later passes reading memory, not cache.
TOKEN_CHUNK_BYTES = 48 * 2**20


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
    if speedups.on("score_head_tokens"):
        return _label_logps(decoder, hidden, completion, attention_mask[:, length:].bool(), temperature)
    rows = max(1, LOGITS_CHUNK_BYTES // (4 * vocab * logits_to_keep))
    logps = []
    for start in range(0, batch, rows):
        logits = decoder.logits(hidden[start : start + rows]) / temperature
        logps.append(logits.log_softmax(-1).gather(-1, completion[start : start + rows, :, None]).squeeze(-1))
    return torch.cat(logps) * attention_mask[:, length:]


def _label_logps(decoder: FastDecoder, hidden: torch.Tensor, labels: torch.Tensor, scored: torch.Tensor,
                 temperature: float) -> torch.Tensor:
    """log softmax(lm_head(hidden) / temperature)[label] at the scored positions [B, S] (0 elsewhere), as the
    label's logit minus the log-sum-exp: no log-softmax written out, padding never multiplied out."""
    tokens, picked = hidden[scored], labels[scored]  # [N, H], [N]
    chunk = max(1, TOKEN_CHUNK_BYTES // (4 * decoder.embed.shape[0]))
    logps = torch.empty(picked.shape, dtype=torch.float32, device=hidden.device)
    for start in range(0, tokens.size(0), chunk):
        logits = decoder.logits(tokens[start : start + chunk])  # [n, V] float32
        if temperature != 1.0:
            logits.div_(temperature)
        label_logits = logits.gather(1, picked[start : start + chunk, None]).squeeze(1)
        logps[start : start + chunk] = label_logits - torch.logsumexp(logits, dim=-1)
    return logps.new_zeros(labels.shape).masked_scatter_(scored, logps)


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
