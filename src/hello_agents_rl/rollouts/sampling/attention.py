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

KVCache = list[tuple[torch.Tensor, torch.Tensor]]  # (keys, values) per layer, each [rows, kv_heads, slots, head_dim]


@dataclass
class SharedPromptCache:
    """The decode steps' cache: each prompt's keys and values once per group, each row's completion apart.

    prefix: per layer [G, Hkv, P, D] (left-padded prompts); prefix_bias: [G * Hkv, group_size * Hq / Hkv, P],
    0 at a prompt's tokens and -inf at its pads, in the layout of the group's scores (built once, every layer's);
    own: per layer [B, Hkv, slots, D], B = G * group_size rows, a group's rows adjacent, grown as rows run on.
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
) -> torch.Tensor:
    """Attention of one query per row over its group's prompt keys, then its own completion keys.

    q: [B, Hq, 1, D] with B = G * group_size, rows of a group adjacent; prefix: keys, values [G, Hkv, P, D];
    prefix_bias: [G * Hkv, group_size * Hq / Hkv, P] (SharedPromptCache's); own: keys, values [B, Hkv, T, D]
    (all valid). Query head h reads key head h // (Hq / Hkv), as transformers' repeat_kv. Returns [B, Hq, 1, D].
    """
    batch, heads, _, dim = q.shape
    prefix_keys, prefix_values = prefix
    groups, kv_heads, prompt, _ = prefix_keys.shape
    own_keys, own_values = own
    per_kv = heads // kv_heads
    n = group_size
    # the group's queries per key head: [G, Hkv, n * per_kv, D]
    q_own = q.view(batch, kv_heads, per_kv, dim)  # [B, Hkv, r, D]
    q_group = q_own.view(groups, n, kv_heads, per_kv, dim).transpose(1, 2).reshape(groups, kv_heads, n * per_kv, dim)
    scores_prompt = torch.baddbmm(  # [G*Hkv, n*r, P]: the prompt's keys once per group
        prefix_bias,
        q_group.reshape(groups * kv_heads, n * per_kv, dim),
        prefix_keys.reshape(groups * kv_heads, prompt, dim).transpose(1, 2),
        alpha=scale,
    )
    scores_own = torch.matmul(q_own, own_keys.transpose(2, 3)) * scale  # [B, Hkv, r, T]
    # one softmax over both parts: the own scores into the group's layout [G*Hkv, n*r, T]
    own_length = own_keys.shape[2]
    scores_own = scores_own.view(groups, n, kv_heads, per_kv, own_length).transpose(1, 2)
    scores = torch.cat([scores_prompt, scores_own.reshape(groups * kv_heads, n * per_kv, own_length)], dim=-1)
    probs = scores.softmax(dim=-1)
    out = torch.bmm(probs[..., :prompt], prefix_values.reshape(groups * kv_heads, prompt, dim))  # [G*Hkv, n*r, D]
    out = out.view(groups, kv_heads, n, per_kv, dim).transpose(1, 2).reshape(batch, kv_heads, per_kv, dim)
    probs_own = probs[..., prompt:].reshape(groups, kv_heads, n, per_kv, own_length).transpose(1, 2)
    out = out + torch.matmul(probs_own.reshape(batch, kv_heads, per_kv, own_length), own_values)  # [B, Hkv, r, D]
    return out.reshape(batch, heads, 1, dim)


def prompt_bias(valid: torch.Tensor, kv_heads: int, rows_per_kv_head: int, dtype: torch.dtype) -> torch.Tensor:
    """SharedPromptCache.prefix_bias from the groups' prompt-key validity [G, P]."""
    groups, prompt = valid.shape
    bias = torch.zeros(groups, 1, 1, prompt, dtype=dtype, device=valid.device).masked_fill_(~valid[:, None, None], float("-inf"))
    return bias.expand(groups, kv_heads, rows_per_kv_head, prompt).reshape(groups * kv_heads, rows_per_kv_head, prompt)
