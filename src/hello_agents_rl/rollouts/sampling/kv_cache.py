"""The lean sampler's KV cache: prefilled once per distinct prompt, grown by doubling as completions run on."""

from __future__ import annotations

import torch

from hello_agents_rl.rollouts.sampling.decoder import FastDecoder

KVCache = list[tuple[torch.Tensor, torch.Tensor]]  # (keys, values) per layer, each [B, kv_heads, slots, head_dim]


def prefill(
    decoder: FastDecoder, prompts: torch.Tensor, prompt_mask: torch.Tensor, extra: int, reserve: int | None = None
) -> tuple[KVCache, torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A KV cache for left-padded prompts [B, P] with room for `extra` more tokens per row; each distinct
    prompt is computed once (a GRPO batch repeats each prompt num_generations times) and copied to its rows.

    Returns the cache, the hidden state after the last prompt token [B, H], rope tables for all P + extra
    slots, and the key-validity mask [B, P + extra] (prompt pads False, everything after them True).
    The cache holds P + `reserve` slots (default all); `grow` adds more.
    """
    batch, length = prompts.shape
    device = prompts.device
    unique, inverse = torch.unique(prompts.masked_fill(prompt_mask == 0, -1), dim=0, return_inverse=True)
    first = torch.zeros(unique.size(0), dtype=torch.long, device=device).scatter_(
        0, inverse, torch.arange(batch, device=device)
    )  # any row of each group
    valid = torch.cat([prompt_mask.bool(), torch.ones((batch, extra), dtype=torch.bool, device=device)], dim=1)
    positions = (valid.long().cumsum(-1) - 1).clamp(min=0)  # pad-invariant positions
    cos, sin = decoder.rope(positions)

    def buffers(rows: int, slots: int) -> KVCache:
        shape = (rows, decoder.num_kv_heads, slots, decoder.head_dim)
        return [
            (torch.empty(shape, dtype=decoder.dtype, device=device), torch.empty(shape, dtype=decoder.dtype, device=device))
            for _ in decoder.layers
        ]

    # causal over the prompt, never attending pads; each position may see itself, so padded query rows stay
    # finite (their outputs are never read and their keys are masked for every query)
    prefix = buffers(unique.size(0), length)
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    mask = (causal & valid[first, None, None, :length]) | torch.eye(length, dtype=torch.bool, device=device)
    hidden = decoder.forward(prompts[first], (cos[first, :length], sin[first, :length]), prefix, 0, mask)[:, -1]
    cache = buffers(batch, length + (extra if reserve is None else min(reserve, extra)))
    for (keys, values), (prefix_keys, prefix_values) in zip(cache, prefix):
        keys[:, :, :length] = prefix_keys[inverse]
        values[:, :, :length] = prefix_values[inverse]
    return cache, hidden[inverse], (cos, sin), valid


def grow(cache: KVCache, slots: int) -> KVCache:
    """The same cache with room for `slots` tokens (amortised doubling, like a dynamic cache, not a static one)."""
    def grown(t: torch.Tensor) -> torch.Tensor:
        more = t.new_empty(t.shape[0], t.shape[1], slots - t.shape[2], t.shape[3])
        return torch.cat([t, more], dim=2)

    return [(grown(k), grown(v)) for k, v in cache]

