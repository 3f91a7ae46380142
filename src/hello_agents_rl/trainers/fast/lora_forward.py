"""The training forward of a LoRA policy as one function of its tensors (CPU): shared_prefix_logps, leaner.

The same computation as transformers' and PEFT's modules under shared_prefix_logps -- each distinct prompt once,
its keys and values in the autograd graph, the completions scored against them -- with less in between:

* the frozen q/k/v and gate/up weights multiplied as one matrix each (a copy made once per run, kept while the
  base weights are unchanged); each LoRA branch's up-projection added into that product by one `addmm`, the
  branches of a fused product as one block-diagonal matrix, the LoRA scale (and FastDropout's 1/(1-p)) folded
  into the `addmm` instead of two elementwise passes;
* LoRA dropout drawn by the adapter's own dropout modules in PEFT's order (q, k, v, o, gate, up, down, prompt
  pass first), so the same seed draws the same masks as the module path;
* the LM head through lm_head.py's kept-probabilities head, on the scored positions only.

Values and gradients equal the module path's up to float rounding (tests/test_fast_switches.py). Anything else --
several adapters, LoRA on the LM head, a trainable base weight, attention dropout, another device -- raises
Unsupported and the caller uses shared_prefix_logps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from hello_agents_rl.trainers.fast import lm_head
from hello_agents_rl.trainers.fast.dropout import FastDropout
from hello_agents_rl.trainers.fast.sampling.decoder import (
    FastDecoder,
    LinearView,
    Unsupported,
    apply_rope,
    base_model,
    fused_bias,
    rms_norm,
)
from hello_agents_rl.trainers.fast.sampling.frozen_gemm import FrozenLinear

TRAIN_ROWS = 512  # a training pass's rows (tokens) per product: the hint frozen weights are packed for


@dataclass
class _Branch:
    a: torch.Tensor  # [r, in], live
    b: torch.Tensor  # [out, r], live
    scale: float
    dropout: Any


@dataclass
class _Projection:
    """x W^T + b (W frozen: one matrix for the fused parts) plus each part's LoRA branch, in one addmm. A part
    without LoRA (PEFT's default targets adapt q and v, not k) is a zero-width block of the block diagonal."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    branches: list[_Branch | None]  # per part
    widths: list[int]  # each part's output features
    frozen: FrozenLinear | None = None  # the frozen product on this CPU's packed kernel, where it has one

    @classmethod
    def of(cls, parts: list[LinearView]) -> _Projection:
        for part in parts:
            if part.weight.requires_grad or (part.bias is not None and part.bias.requires_grad):
                raise Unsupported("a trainable base weight (full fine-tuning)")
            if len(part.loras) > 1:
                raise Unsupported("several active adapters")
        with torch.no_grad():
            weight = parts[0].weight if len(parts) == 1 else torch.cat([p.weight for p in parts])
            bias = parts[0].bias if len(parts) == 1 else fused_bias(parts)
        branches = [_Branch(p.loras[0][0], p.loras[0][1], p.loras[0][2], p.dropouts[0]) if p.loras else None
                    for p in parts]
        return cls(weight, bias, branches, [p.weight.shape[0] for p in parts],
                   FrozenLinear.for_training(weight, bias, TRAIN_ROWS))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias) if self.frozen is None else self.frozen(x)
        live = [branch for branch in self.branches if branch is not None]
        if not live:
            return y
        hs, alphas = [], []
        for branch in live:
            dropped, keep_scale = _dropout(branch.dropout, x)
            hs.append(F.linear(dropped, branch.a))  # [..., r]
            alphas.append(branch.scale * keep_scale)
        if len(self.branches) == 1:
            h, b = hs[0], live[0].b
        else:
            if len(set(alphas)) > 1:  # differently scaled branches: scale each down-projection to the first's
                hs = [h * (alpha / alphas[0]) for h, alpha in zip(hs, alphas)]
            blocks = [branch.b if branch is not None else x.new_zeros(width, 0)
                      for branch, width in zip(self.branches, self.widths)]
            h, b = torch.cat(hs, dim=-1), torch.block_diag(*blocks)
        out = torch.addmm(y.reshape(-1, y.shape[-1]), h.reshape(-1, h.shape[-1]), b.t(), alpha=alphas[0])
        return out.view(y.shape)


def _dropout(module: Any, x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """dropout(x) as (x masked, the scale left to apply): FastDropout's 1/(1-p) goes into the addmm instead."""
    if isinstance(module, FastDropout) and module.training and module.threshold:
        return x * module.keep_mask(x), module.scale
    return module(x), 1.0


@dataclass
class _TrainLayer:
    in_norm: tuple[torch.Tensor, float]
    post_norm: tuple[torch.Tensor, float]
    qk_norm: tuple[torch.Tensor, float] | None
    qkv: _Projection
    o: _Projection
    gate_up: _Projection
    down: _Projection


class LoraTrainView:
    """The policy's tensors arranged for the training forward; raises Unsupported where it would not be exact."""

    def __init__(self, model: Any) -> None:
        base = base_model(model)
        if getattr(base.config, "attention_dropout", 0.0):
            raise Unsupported("attention dropout")
        decoder = FastDecoder(model, fuse=False)  # the architecture checks; live tensors, no merged copies
        if decoder.lm_head.loras or decoder.lm_head.weight.requires_grad:
            raise Unsupported("a trained LM head")
        if decoder.embed.device.type != "cpu" or decoder.embed.dtype != torch.float32:
            raise Unsupported("not float32 on CPU")
        self.decoder = decoder
        self.layers = [
            _TrainLayer(layer.in_norm, layer.post_norm, layer.qk_norm, _Projection.of(layer.qkv),
                        _Projection.of([layer.o]), _Projection.of(layer.gate_up), _Projection.of([layer.down]))
            for layer in decoder.layers
        ]
        self._sources = [p.weight for layer in decoder.layers for p in (*layer.qkv, *layer.gate_up)]
        self._versions = [(w.data_ptr(), w._version) for w in self._sources]

    def stale(self) -> bool:
        """Whether a base weight behind the fused copies changed since they were made."""
        return [(w.data_ptr(), w._version) for w in self._sources] != self._versions

    def _layers(self, h: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                past: list[tuple[torch.Tensor, torch.Tensor]] | None = None, rows: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Hidden states after the final norm for h [B, S, H] at positions [1, S]; every layer's keys and values
        (attending to `past`'s, indexed by `rows`, first). mask: bool [B, 1, S, keys]."""
        d = self.decoder
        cos, sin = d.rope(positions)
        batch, length, _ = h.shape
        nq, nkv, hd = d.num_heads, d.num_kv_heads, d.head_dim
        kv = []
        for i, layer in enumerate(self.layers):
            x = rms_norm(h, layer.in_norm)
            qkv = layer.qkv(x)
            qk = qkv[..., : (nq + nkv) * hd].view(batch, length, nq + nkv, hd)
            v = qkv[..., (nq + nkv) * hd :].view(batch, length, nkv, hd).transpose(1, 2)
            if layer.qk_norm is not None:
                qk = rms_norm(qk, layer.qk_norm)
            qk = apply_rope(qk, cos, sin).transpose(1, 2)
            q, k = qk[:, :nq], qk[:, nq:]
            kv.append((k, v))
            if past is not None:  # index_select: its backward is index_add, not advanced indexing's index_put
                k = torch.cat([past[i][0].index_select(0, rows), k], dim=2)
                v = torch.cat([past[i][1].index_select(0, rows), v], dim=2)
            attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=d.scaling, enable_gqa=nq != nkv)
            h = h + layer.o(attn.transpose(1, 2).reshape(batch, length, nq * hd))
            gate, up = layer.gate_up(rms_norm(h, layer.post_norm)).chunk(2, dim=-1)
            h = h + layer.down(F.silu(gate) * up)
        return rms_norm(h, d.final_norm), kv

    def logps(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, temperature: float,
              compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """What shared_prefix_logps returns for the same rows (None if no prompt repeats)."""
        rows, total = input_ids.shape
        prompt_len = total - logits_to_keep
        if prompt_len < 2:
            return None
        prompts = input_ids[:, :prompt_len].masked_fill(attention_mask[:, :prompt_len] == 0, -1)
        unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
        if unique.size(0) == rows:
            return None
        device = input_ids.device
        first = torch.zeros(unique.size(0), dtype=torch.long, device=device).scatter_(
            0, inverse, torch.arange(rows, device=device))
        n = prompt_len - 1  # the prompt pass; its last token starts the completions' pass (as in shared_prefix)
        valid = attention_mask[first, :n].bool()
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        # a padding query attends to itself so that its row stays finite; no real token attends to it
        mask = (causal & valid[:, None, None, :]) | torch.eye(n, dtype=torch.bool, device=device)
        embed = self.decoder.embed
        _, past = self._layers(F.embedding(input_ids[first, :n], embed), torch.arange(n, device=device)[None], mask)
        suffix = input_ids[:, n:]
        length = suffix.size(1)
        mask = torch.cat([attention_mask[:, None, None, :n].bool().expand(rows, 1, length, n),
                          torch.ones(length, length, dtype=torch.bool, device=device).tril().expand(rows, 1, -1, -1)], -1)
        hidden, _ = self._layers(F.embedding(suffix, embed), torch.arange(n, n + length, device=device)[None], mask,
                                 past, inverse)
        labels = suffix.masked_fill(attention_mask[:, n:] == 0, -100)[:, 1:]  # the next token of each position
        if not lm_head.fits(int((labels != -100).sum()), embed.shape[0]):
            raise Unsupported("a batch whose kept probabilities would pass lm_head.MAX_KEPT_BYTES")
        logps, entropies = lm_head.label_logps(hidden[:, :-1], self.decoder.lm_head.weight, labels, temperature,
                                               compute_entropy)
        return logps[:, -logits_to_keep:], None if entropies is None else entropies[:, -logits_to_keep:]
