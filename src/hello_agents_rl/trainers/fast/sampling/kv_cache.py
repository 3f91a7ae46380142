"""The fast sampler's KV cache: prefilled once per distinct prompt, grown by doubling as completions run on.

`prefill` gives every row the whole cache (its prompt copied in: the scorer's multi-token forward);
`prefill_shared` keeps each group's prompt once for the decode steps (attention.SharedPromptCache).
"""

from __future__ import annotations

import torch

from hello_agents_rl.trainers.fast.sampling.attention import KVCache, SharedPromptCache, prompt_bias
from hello_agents_rl.trainers.fast.sampling.decoder import FastDecoder


def prefill(
    decoder: FastDecoder, prompts: torch.Tensor, prompt_mask: torch.Tensor, extra: int
) -> tuple[KVCache, torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A KV cache for left-padded prompts [B, P] with room for `extra` more tokens per row; each distinct
    prompt is computed once (a GRPO batch repeats each prompt num_generations times) and copied to its rows.

    Returns the cache, the hidden state after the last prompt token [B, H], rope tables for all P + extra
    slots, and the key-validity mask [B, P + extra] (prompt pads False, everything after them True).
    """
    batch, length = prompts.shape
    first, inverse = _distinct(prompts, prompt_mask)
    prefix, hidden, rope, valid = _prompt_pass(decoder, prompts, prompt_mask, first, extra)
    cache = _buffers(decoder, batch, length + extra, prompts.device)
    for (keys, values), (prefix_keys, prefix_values) in zip(cache, prefix):
        keys[:, :, :length] = prefix_keys[inverse]
        values[:, :, :length] = prefix_values[inverse]
    return cache, hidden[inverse], rope, valid


def prefill_shared(
    decoder: FastDecoder, prompts: torch.Tensor, prompt_mask: torch.Tensor, group_size: int, extra: int, reserve: int
) -> tuple[SharedPromptCache, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """As `prefill`, for rows whose groups of `group_size` adjacent rows share one prompt: the prompt's keys stay
    once per group, each row gets min(reserve, extra) slots of its own (grown by `grow_own`). With group_size 1
    each row is its own group (distinct prompts still computed once, then copied).
    Returns the cache, the hidden state after each row's prompt [B, H] and rope tables for all P + extra slots
    (every completion slot is a valid key)."""
    batch, length = prompts.shape
    if group_size > 1:
        first = torch.arange(0, batch, group_size, device=prompts.device)
        inverse = None
    else:
        first, inverse = _distinct(prompts, prompt_mask)
    prefix, hidden, rope, valid = _prompt_pass(decoder, prompts, prompt_mask, first, extra)
    if inverse is None:
        hidden = hidden.repeat_interleave(group_size, 0)
    else:  # every row its own group: its prompt's cache copied in
        prefix, hidden = [(k[inverse], v[inverse]) for k, v in prefix], hidden[inverse]
        first = torch.arange(batch, device=prompts.device)
    rows_per_kv_head = group_size * decoder.num_heads // decoder.num_kv_heads
    bias = prompt_bias(valid[first, :length], decoder.num_kv_heads, rows_per_kv_head, decoder.dtype)
    prefix = [(k.transpose(-1, -2).contiguous(), v) for k, v in prefix]  # keys [G, Hkv, D, P]: once per rollout
    own = _own_buffers(decoder, batch // group_size, group_size, min(reserve, extra), prompts.device)
    return SharedPromptCache(prefix, bias, own, group_size), hidden, rope


def _distinct(prompts: torch.Tensor, prompt_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One row of each distinct prompt, and for every row the index of its prompt among those."""
    unique, inverse = torch.unique(prompts.masked_fill(prompt_mask == 0, -1), dim=0, return_inverse=True)
    first = torch.zeros(unique.size(0), dtype=torch.long, device=prompts.device).scatter_(
        0, inverse, torch.arange(prompts.shape[0], device=prompts.device)
    )  # any row of each group
    return first, inverse


def _prompt_pass(
    decoder: FastDecoder, prompts: torch.Tensor, prompt_mask: torch.Tensor, first: torch.Tensor, extra: int
) -> tuple[KVCache, torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The prompt rows `first` (one per distinct prompt) through the decoder: their cache [len(first), Hkv, P, D],
    hidden states after their last token, and every row's rope tables and key-validity mask."""
    batch, length = prompts.shape
    device = prompts.device
    valid = torch.cat([prompt_mask.bool(), torch.ones((batch, extra), dtype=torch.bool, device=device)], dim=1)
    positions = (valid.long().cumsum(-1) - 1).clamp(min=0)  # pad-invariant positions
    cos, sin = decoder.rope(positions)
    # causal over the prompt, never attending pads; each position may see itself, so padded query rows stay
    # finite (their outputs are never read and their keys are masked for every query)
    prefix = _buffers(decoder, first.numel(), length, device)
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    mask = (causal & valid[first, None, None, :length]) | torch.eye(length, dtype=torch.bool, device=device)
    hidden = decoder.forward(prompts[first], (cos[first, :length], sin[first, :length]), prefix, 0, mask)[:, -1]
    return prefix, hidden, (cos, sin), valid


def _buffers(decoder: FastDecoder, rows: int, slots: int, device: torch.device) -> KVCache:
    """Empty (keys, values) per layer of [rows, Hkv, slots, D]."""
    shape = (rows, decoder.num_kv_heads, slots, decoder.head_dim)
    def empty() -> torch.Tensor:
        return torch.empty(shape, dtype=decoder.dtype, device=device)

    return [(empty(), empty()) for _ in decoder.layers]


def _own_buffers(decoder: FastDecoder, groups: int, group_size: int, slots: int, device: torch.device) -> KVCache:
    """SharedPromptCache.own, empty, with room for `slots` tokens: keys and values [G, Hkv, n, slots, D]."""
    shape = (groups, decoder.num_kv_heads, group_size, slots, decoder.head_dim)
    def empty() -> torch.Tensor:
        return torch.empty(shape, dtype=decoder.dtype, device=device)

    return [(empty(), empty()) for _ in decoder.layers]


def grow_own(cache: SharedPromptCache, slots: int) -> SharedPromptCache:
    """The same shared cache with room for `slots` completion tokens per row (amortised doubling, like a dynamic
    cache, not a static one)."""

    def grown(t: torch.Tensor) -> torch.Tensor:  # [G, Hkv, n, slots, D]
        return torch.cat([t, t.new_empty(*t.shape[:3], slots - t.shape[3], t.shape[4])], dim=3)

    own = [(grown(k), grown(v)) for k, v in cache.own]
    return SharedPromptCache(cache.prefix, cache.prefix_bias, own, cache.group_size)
