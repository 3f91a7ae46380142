"""Decode-step attention over a group-shared prompt cache: each distinct prompt's keys read once for its group.

A GRPO batch repeats each prompt `num_generations` times. Copying the prompt's keys and values to every row makes
each decode step read them `num_generations` times; at a decode step's few rows that read is memory-bound and a
large share of the step (the KV bytes of docs/performance.md's roofline). Here the rows of one group attend the
prompt's keys once, as one matrix product of all their queries, and their own completion keys apart; one softmax
over both parts, so the result is softmax(q k^T * scale) v over [prompt, own] exactly, up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# (keys, values) per layer, each [rows, kv_heads, slots, head_dim]
KVCache = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class SharedPromptCache:
    """The decode steps' cache: each prompt's keys and values once per group, each row's completion apart.

    prefix: per layer keys [G, Hkv, D, P] and values [G, Hkv, P, D] (left-padded prompts; the keys transposed once
    per rollout, so that a query's scores read keys side by side); prefix_bias: [G * Hkv, group_size * Hq / Hkv, P],
    0 at a prompt's tokens and -inf at its pads, in the layout of the group's scores (built once, every layer's);
    own: per layer keys and values [G, Hkv, group_size, slots, D]: the B = G * group_size rows' completions (a
    group's rows adjacent in the batch), in the group's layout so that its scores need no copy; grown as rows run
    on.
    """

    prefix: KVCache
    prefix_bias: torch.Tensor
    own: KVCache
    group_size: int


def grouped_attention(
    q: torch.Tensor,
    prefix: tuple[torch.Tensor, torch.Tensor],
    prefix_bias: torch.Tensor,
    own: tuple[torch.Tensor, torch.Tensor],
    group_size: int,
    scale: float,
    new: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Attention of one query per row over its group's prompt keys, then its own completion keys.

    q: [B, Hq, 1, D] with B = G * group_size, rows of a group adjacent; prefix: keys [G, Hkv, D, P], values
    [G, Hkv, P, D]; prefix_bias: [G * Hkv, group_size * Hq / Hkv, P] (SharedPromptCache's); own: the rows' keys
    and values [G, Hkv, group_size, T, D], valid once `new` is in; new: this step's keys and values [B, Hkv, 1, D],
    first written to slot T - 1. Query head h reads key head h // (Hq / Hkv), as transformers'
    repeat_kv. Returns [B, Hq, 1, D].
    """
    own_keys, own_values = own
    batch, heads, _, dim = q.shape
    prefix_keys, prefix_values = prefix
    groups, kv_heads, _, prompt = prefix_keys.shape
    r, n, own_length = heads // kv_heads, group_size, own_values.shape[3]
    if new is not None:  # [B, Hkv, 1, D] into the group's layout [G, Hkv, n, D], at slot T - 1
        key, value = (t.view(groups, n, kv_heads, dim).transpose(1, 2) for t in new)
        own_keys[:, :, :, -1], own_values[:, :, :, -1] = key, value
    rows = n * r  # a key head's queries in a group
    # the queries in the group's layout [G, Hkv, n, r, D], scaled once (one copy)
    q_group = q.view(groups, n, kv_heads, r, dim).transpose(1, 2).contiguous().mul_(scale)
    scores_prompt = torch.baddbmm(  # [G*Hkv, n*r, P]: the prompt's keys read once per group
        prefix_bias, q_group.view(groups * kv_heads, rows, dim),
        prefix_keys.view(groups * kv_heads, dim, prompt),
    )
    scores_own = torch.matmul(q_group, own_keys.transpose(-1, -2))  # [G, Hkv, n, r, T]: each row its own keys
    scores = torch.cat([scores_prompt, scores_own.view(groups * kv_heads, rows, own_length)], dim=-1)
    probs = scores.softmax(dim=-1)  # one softmax over both parts
    out = torch.bmm(probs[..., :prompt], prefix_values.view(groups * kv_heads, prompt, dim))  # [G*Hkv, n*r, D]
    out = out.view(groups, kv_heads, n, r, dim)
    out = out + torch.matmul(probs[..., prompt:].view(groups, kv_heads, n, r, own_length), own_values)
    return out.transpose(1, 2).reshape(batch, heads, 1, dim)


def prompt_bias(valid: torch.Tensor, kv_heads: int, rows_per_kv_head: int, dtype: torch.dtype) -> torch.Tensor:
    """SharedPromptCache.prefix_bias from the groups' prompt-key validity [G, P]."""
    groups, prompt = valid.shape
    bias = torch.zeros(groups, 1, 1, prompt, dtype=dtype, device=valid.device)
    bias.masked_fill_(~valid[:, None, None], float("-inf"))
    return bias.expand(groups, kv_heads, rows_per_kv_head, prompt).reshape(groups * kv_heads, rows_per_kv_head, prompt)
