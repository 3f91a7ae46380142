"""Per-token log-probs (and entropies) of given labels through the LM head, for the CPU training forward.

TRL's fused head (trl/kernels/chunked_logprob.py) never keeps the [tokens, vocab] logits: its forward folds them
tile by tile, its backward multiplies every tile out again and runs ~11 elementwise passes over it. That suits a
GPU's memory; on a CPU, where one 4-completion group's probabilities are ~100 MB, keeping them is cheaper: the
forward multiplies the logits out once (tile by tile into one buffer), takes the log-sum-exp, the probabilities
and the entropy (a row-wise dot, no extra temporary), and keeps the probabilities; the backward is one in-place
pass over them and one matrix product. Only the scored positions go through it (TRL's CPU path scores every
position, padding included). Same values up to float rounding.
"""

from __future__ import annotations

from typing import Any

import torch

VOCAB_TILE = 2048  # columns per product: each writes a [~500, 2048] fp32 tile of the buffer
ROW_TILE = 32  # rows per softmax pass: a [32, vocab] fp32 tile (6 MB at a 49k vocabulary) stays in cache
MAX_KEPT_BYTES = 1 << 30  # above this many bytes of probabilities, callers use TRL's recomputing head instead


def fits(tokens: int, vocab: int) -> bool:
    return tokens * vocab * 4 <= MAX_KEPT_BYTES


def _softmax_in_place(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [N, V] overwritten by softmax(logits), ROW_TILE rows at a time in cache; returns log Z [N] and the
    entropy [N]. Whole-batch passes would each allocate a fresh [N, V] buffer (page faults) and stream it."""
    tokens = logits.shape[0]
    log_z, entropy = logits.new_empty(tokens), logits.new_empty(tokens)
    scratch = logits.new_empty(min(ROW_TILE, tokens), logits.shape[1])
    for start in range(0, tokens, ROW_TILE):
        z = logits[start : start + ROW_TILE]  # [n, V]
        top = z.amax(dim=-1, keepdim=True)
        e = torch.sub(z, top, out=scratch[: z.shape[0]]).exp_()  # exp(z - max)
        mass = e.sum(dim=-1, keepdim=True)
        rows = slice(start, start + z.shape[0])
        log_z[rows] = (top + mass.log()).squeeze(1)
        entropy[rows] = log_z[rows] - torch.linalg.vecdot(e, z) / mass.squeeze(1)  # log Z - sum_j p_j z_j
        torch.div(e, mass, out=z)
    return log_z, entropy


class KeptProbsLogProb(torch.autograd.Function):
    """hidden [N, H], weight [V, H] (frozen), labels [N] -> log p(label) [N], entropy [N] (of softmax(h W^T / T))."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        tokens, vocab = hidden.shape[0], weight.shape[0]
        logits = torch.empty(tokens, vocab, dtype=torch.float32, device=hidden.device)
        for start in range(0, vocab, VOCAB_TILE):
            tile = logits[:, start : start + VOCAB_TILE]
            torch.mm(hidden, weight[start : start + VOCAB_TILE].t(), out=tile)
            if temperature != 1.0:
                tile.div_(temperature)
        target = logits.gather(1, labels[:, None]).squeeze(1)
        log_z, entropy = _softmax_in_place(logits)
        probs = logits
        del logits
        ctx.save_for_backward(hidden, weight, labels, probs, entropy)
        ctx.temperature = temperature
        return target - log_z, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor | None, grad_entropy: torch.Tensor | None) -> tuple:
        hidden, weight, labels, probs, entropy = ctx.saved_tensors
        if not ctx.needs_input_grad[0] or (grad_logp is None and grad_entropy is None):
            return None, None, None, None
        # d log p_y / dz_j = 1[j = y] - p_j;  d entropy / dz_j = -p_j (log p_j + entropy)
        if grad_logp is None:
            grad = torch.zeros_like(probs)
        elif grad_entropy is None:  # the probabilities are not needed again: this pass overwrites them
            grad = probs.mul_(-grad_logp[:, None])
        else:
            grad = probs.mul(-grad_logp[:, None])
        if grad_logp is not None:
            grad.scatter_add_(1, labels[:, None], grad_logp[:, None])
        if grad_entropy is not None:  # log p_j = log of the kept probability (0 log 0 = 0)
            grad -= grad_entropy[:, None] * (torch.special.xlogy(probs, probs) + probs * entropy[:, None])
        if ctx.temperature != 1.0:
            grad.div_(ctx.temperature)
        return grad @ weight, None, None, None


def label_logps(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, temperature: float,
                compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """TRL's fused head for next-token labels [B, S] (-100: not scored) on hidden states [B, S, H] that already
    predict them (shifted): log-probs [B, S] and entropies, 0 where not scored."""
    scored = labels != -100
    logp, entropy = KeptProbsLogProb.apply(hidden[scored], weight, labels[scored], temperature)
    out = hidden.new_zeros(labels.shape).masked_scatter(scored, logp)
    ent = hidden.new_zeros(labels.shape).masked_scatter(scored, entropy) if compute_entropy else None
    return out, ent
