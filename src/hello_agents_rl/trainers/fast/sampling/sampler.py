"""`sample`: completions and their log-probs from the functional decoder, as transformers' sampling draws them.

Temperature, top-k and top-p as transformers' warpers apply them; rows stop at EOS, never past max_new_tokens;
each token's log-prob under the temperature-scaled policy comes back too (what TRL's training forward computes).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from hello_agents_rl.trainers.fast import switches
from hello_agents_rl.trainers.fast.sampling.decoder import FastDecoder
from hello_agents_rl.trainers.fast.sampling.kv_cache import grow_own, prefill_shared

KV_RESERVE = 64  # decode slots allocated up front; completions that run longer double it as they go


def filter_logits(logits: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
    """transformers' TopK then TopP logits warpers (same tie and keep-at-least-one rules)."""
    if top_k and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= 1 - top_p
        remove[..., -1:] = False
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return logits


def prompt_groups(prompt_ids: list[list[int]]) -> tuple[list[int], int]:
    """An order of the rows that puts equal prompts side by side, and the group size when every prompt is repeated
    the same number of times (a GRPO batch: num_generations); otherwise (1 and the rows as they are) each row is
    its own group. Switched off (`shared_prompt_kv`), every row is its own group."""
    rows: dict[tuple[int, ...], list[int]] = {}
    for row, prompt in enumerate(prompt_ids):
        rows.setdefault(tuple(prompt), []).append(row)
    sizes = {len(group) for group in rows.values()}
    if len(sizes) != 1 or 1 in sizes or not switches.on("shared_prompt_kv"):
        return list(range(len(prompt_ids))), 1
    return [row for group in rows.values() for row in group], sizes.pop()


DRAW_BLOCK = 1024  # vocabulary entries per block of the two-level inverse CDF


def draw(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of probs [B, V] -> [B], from the categorical distribution each row defines.

    By the inverse CDF of one uniform per row, in two levels: the block (of DRAW_BLOCK entries) from the blocks'
    masses, then the entry within it, both accumulated in float64 so that the tail's tiny probabilities are not
    rounded away. torch.multinomial draws an exponential for every vocabulary entry instead (for a 49k vocabulary
    a large share of a decode step: the `ours-inverse_cdf` row of docs/performance.md). The same distribution,
    another random stream.
    """
    if not switches.on("inverse_cdf"):
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    rows, vocab = probs.shape
    blocks = -(-vocab // DRAW_BLOCK)
    padded = F.pad(probs, (0, blocks * DRAW_BLOCK - vocab)).view(rows, blocks, DRAW_BLOCK)  # zeros are never drawn
    block_cdf = padded.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1)  # [B, blocks]
    total = block_cdf[:, -1:]
    target = torch.rand(total.shape, generator=generator, dtype=torch.float64, device=probs.device) * total
    # strictly below the total, so that the entry found has non-zero probability
    target = torch.minimum(target, torch.nextafter(total, torch.zeros_like(total)))
    block = torch.searchsorted(block_cdf, target, right=True).clamp_(max=blocks - 1)  # [B, 1]
    before = torch.where(block > 0, block_cdf.gather(1, (block - 1).clamp_(min=0)), torch.zeros_like(target))
    within = padded.gather(1, block[:, :, None].expand(rows, 1, DRAW_BLOCK)).squeeze(1).double().cumsum(dim=-1)
    # the remainder, kept below the block's own float64 sum (which can differ from block_cdf's by rounding)
    rest = torch.minimum(target - before, torch.nextafter(within[:, -1:], torch.zeros_like(target)))
    entry = torch.searchsorted(within, rest, right=True).clamp_(max=DRAW_BLOCK - 1)
    return (block * DRAW_BLOCK + entry).squeeze(1)


@torch.no_grad()
def sample(
    model: Any,
    prompt_ids: list[list[int]],
    max_new_tokens: int,
    eos_token_ids: list[int],
    pad_token_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int | None = None,
    decoder: FastDecoder | None = None,
    generator: torch.Generator | None = None,
    with_logprobs: bool = True,
) -> tuple[list[list[int]], list[list[float]] | None]:
    """Sample one completion per prompt (repeat prompts for groups); returns token ids and their logprobs.

    A completion ends with (and includes) its first EOS token, or has exactly max_new_tokens tokens.
    temperature <= 0 means greedy. Logprobs are log softmax(logits / temperature) of the chosen token,
    before top-k/top-p, which is what TRL's GRPO forward computes for the same token; with_logprobs=False
    skips them (None) where nobody reads them (TRL's loss scores the tokens again in its training forward).
    """
    decoder = decoder or FastDecoder(model, pack_rows=len(prompt_ids))
    device = decoder.embed.device
    order, group_size = prompt_groups(prompt_ids)
    batch = len(prompt_ids)
    longest = max(len(p) for p in prompt_ids)
    prompts = torch.full((batch, longest), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((batch, longest), dtype=torch.long)
    for row, source in enumerate(order):  # left padding, like TRL; a group's rows side by side
        prompt = prompt_ids[source]
        prompts[row, longest - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        prompt_mask[row, longest - len(prompt) :] = 1
    cache, hidden, (cos, sin) = prefill_shared(
        decoder, prompts.to(device), prompt_mask.to(device), group_size, max_new_tokens, reserve=KV_RESERVE
    )
    eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens, logps = [], []
    for step in range(max_new_tokens):
        logits = decoder.logits(hidden)
        if temperature > 0:
            scaled = logits / temperature if temperature != 1.0 else logits
            probs = filter_logits(scaled, top_k, top_p).softmax(dim=-1)
            token = draw(probs, generator)
        else:
            scaled = logits
            token = logits.argmax(dim=-1)
        if with_logprobs:
            logps.append(scaled.log_softmax(dim=-1).gather(1, token[:, None]).squeeze(1))
        token = token.masked_fill(done, pad_token_id)
        tokens.append(token)
        done = done | torch.isin(token, eos)
        if step + 1 == max_new_tokens or bool(done.all()):
            break
        slots = cache.own[0][1].shape[-2]  # the values' [G, Hkv, n, slots, D]
        if step >= slots:
            cache = grow_own(cache, min(max_new_tokens, 2 * slots))
        slot = longest + step
        rope = (cos[:, slot : slot + 1].contiguous(), sin[:, slot : slot + 1].contiguous())  # once, not per layer
        hidden = decoder.decode(token[:, None], rope, cache, step)[:, -1]
    back = sorted(range(batch), key=order.__getitem__)  # row i of the batch was prompt order[i]
    batch_rows = torch.stack(tokens, dim=1).tolist()
    token_rows = [batch_rows[i] for i in back]
    eos_set = set(eos_token_ids)
    ends = [next((i + 1 for i, t in enumerate(row) if t in eos_set), len(row)) for row in token_rows]
    completions = [row[:end] for row, end in zip(token_rows, ends)]
    if not with_logprobs:
        return completions, None
    logp_rows = torch.stack(logps, dim=1).tolist()
    return completions, [logp_rows[i][:end] for i, end in zip(back, ends)]
