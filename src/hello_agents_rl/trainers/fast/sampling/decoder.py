"""A functional view of a Llama-family decoder (optionally under PEFT LoRA): what the fast sampler runs.

LoRA is merged into the weights once per view (one rollout), q/k/v and gate/up fused into one matmul each,
q/k norm and RoPE applied to all heads at once. Anything it does not reproduce exactly raises `Unsupported`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from hello_agents_rl.trainers.fast.sampling.attention import SharedPromptCache, grouped_attention
from hello_agents_rl.trainers.fast.sampling.frozen_gemm import PackedWeight, pack

# Llama-family decoders this view reproduces exactly: pre-norm, RMSNorm, RoPE, GQA, SwiGLU MLP.
SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}
# Above this many bytes of projection weights, do not build merged/fused copies (memory would grow by
# one copy of the weights): use the live weights and run the LoRA branch unmerged instead. Small models,
# where fusion pays most (overhead-bound), are far below it; big ones are compute-bound anyway.
FUSE_LIMIT_BYTES = 512 * 2**20


class Unsupported(Exception):
    """The model (or the request) is outside what the fast sampler reproduces; use model.generate."""


def base_model(model: Any) -> Any:
    """The transformers model under a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def architecture_blocker(config: Any) -> str | None:
    """Why a model of this config is not one this family's code reproduces (None: it is)."""
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_MODEL_TYPES:
        return f"model_type {kind!r} (the fast path covers {sorted(SUPPORTED_MODEL_TYPES)})"
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    sliding = kind == "mistral" and getattr(config, "sliding_window", None)
    if sliding or any(t != "full_attention" for t in layer_types):
        return "sliding-window attention"
    return None


@dataclass
class LinearView:
    """y = x W^T + b + sum_i s_i (x A_i^T) B_i^T, with references to the live tensors (no copies)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    loras: list[tuple[torch.Tensor, torch.Tensor, float]] = field(default_factory=list)
    dropouts: list[Any] = field(default_factory=list)  # each LoRA's dropout module (the training forward's)
    packed: PackedWeight | None = None  # the weight packed for this CPU's kernel (an owned copy, see pack())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and not torch.is_grad_enabled():
            y = self.packed(x, self.bias)
        else:
            y = F.linear(x, self.weight, self.bias)
        for a, b, scale in self.loras:  # PEFT may keep adapters in float32 under a bf16 base: cast like it does
            y = y + (F.linear(F.linear(x.to(a.dtype), a), b) * scale).to(y.dtype)
        return y

    def pack(self, rows: int) -> None:
        """Pack the weight once for this CPU's fastest kernel at `rows` rows per call (frozen_gemm.py): F.linear
        re-packs it for MKL on every call, which at a decode step's few rows costs about as much as the product
        (the same results up to float rounding; a copy of the weight)."""
        if not self.loras and self.packed is None:
            self.packed = pack(self.weight, rows)

    def merged_weight(self) -> torch.Tensor:
        weight = self.weight
        for a, b, scale in self.loras:
            weight = weight + (b.to(weight.dtype) @ a.to(weight.dtype)) * scale
        return weight


def fused_bias(parts: list[LinearView]) -> torch.Tensor | None:
    """The biases of projections fused into one (zeros for a part without), or None if none has one."""
    if all(p.bias is None for p in parts):
        return None
    return torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.weight.shape[0]) for p in parts])


def _fuse(parts: list[LinearView]) -> LinearView:
    """One projection for several that read the same input: merged LoRA, concatenated outputs (a copy)."""
    with torch.no_grad():  # a frozen copy for inference: no graph back to the live LoRA weights
        weight = torch.cat([p.merged_weight() for p in parts], dim=0)
    return LinearView(weight, fused_bias(parts))


def _linear(module: Any) -> LinearView:
    """A plain nn.Linear, or a PEFT LoRA Linear over one, as a LinearView."""
    if type(module) is torch.nn.Linear:
        return LinearView(module.weight, module.bias)
    base = getattr(module, "base_layer", None)
    if base is None or type(base) is not torch.nn.Linear or not hasattr(module, "lora_A"):
        raise Unsupported(f"{type(module).__name__} layers (quantized or non-LoRA adapters)")
    if module.disable_adapters or module.merged:  # merged: the delta is already in the base weight
        return LinearView(base.weight, base.bias)
    if getattr(module, "fan_in_fan_out", False):
        raise Unsupported("fan_in_fan_out LoRA layers")
    loras, dropouts = [], []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if name in getattr(module, "lora_variant", {}):
            raise Unsupported("LoRA variants such as DoRA")
        a, b = module.lora_A[name], module.lora_B[name]
        if not isinstance(a, torch.nn.Linear) or not isinstance(b, torch.nn.Linear) or b.bias is not None:
            raise Unsupported("LoRA layers with bias or non-linear adapters")
        loras.append((a.weight, b.weight, float(module.scaling[name])))
        dropouts.append(module.lora_dropout[name] if name in module.lora_dropout else torch.nn.Identity())
    return LinearView(base.weight, base.bias, loras, dropouts)


@dataclass
class _Layer:
    in_norm: tuple[torch.Tensor, float]
    post_norm: tuple[torch.Tensor, float]
    qk_norm: tuple[torch.Tensor, float] | None  # Qwen3's per-head q/k norms as one [heads_q + heads_kv, D] norm
    qkv: list[LinearView]  # one fused projection, or q, k, v
    o: LinearView
    gate_up: list[LinearView]  # one fused projection, or gate, up
    down: LinearView


def _norm(module: Any) -> tuple[torch.Tensor, float]:
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if eps is None or not isinstance(getattr(module, "weight", None), torch.Tensor):
        raise Unsupported(f"norm layer {type(module).__name__}")
    return module.weight, float(eps)


def rms_norm(x: torch.Tensor, norm: tuple[torch.Tensor, float]) -> torch.Tensor:
    # the HF RMSNorm of this family: normalise in float32, cast back, then scale (one op in float32)
    weight, eps = norm
    if x.dtype == torch.float32 and weight.dtype == torch.float32 and weight.dim() == 1:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def swiglu(gate_up: list[LinearView], x: torch.Tensor) -> torch.Tensor:
    """silu(gate(x)) * up(x), from the fused gate/up projection's [..., 2I] or from the two."""
    gate, up = gate_up[0](x).chunk(2, dim=-1) if len(gate_up) == 1 else (proj(x) for proj in gate_up)
    return F.silu(gate) * up


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    # x * cos + rotate_half(x) * sin, with rotate_half(x) * sin == roll(x, D/2) * [-sin_1, sin_2]
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


class FastDecoder:
    """Read-only functional view of a Llama-family causal LM (optionally under PEFT LoRA)."""

    def __init__(self, model: Any, fuse: bool | None = None, pack_rows: int | None = None) -> None:
        """fuse: merged and fused weight copies (default: below FUSE_LIMIT_BYTES); pack_rows: with fused copies,
        also pack them for this CPU's kernel at that many rows per call (frozen_gemm.choose_kernel: MKL's packing
        only at a decode step's few rows, oneDNN's at any)."""
        base = base_model(model)
        config = base.config
        blocker = architecture_blocker(config)
        if blocker:
            raise Unsupported(blocker)
        if getattr(config, "hidden_act", "silu") != "silu":
            raise Unsupported(f"hidden_act {config.hidden_act!r}")
        for scaled in ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier"):
            if getattr(config, scaled, None) not in (None, 1.0):
                raise Unsupported(f"{scaled} on the logits")
        inner = base.model
        if type(inner.embed_tokens) is not torch.nn.Embedding:
            raise Unsupported("adapted or custom embeddings")
        self.embed = inner.embed_tokens.weight
        self.final_norm = _norm(inner.norm)
        self.rotary = inner.rotary_emb
        self.lm_head = _linear(base.lm_head)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.dtype = self.embed.dtype
        attn0 = inner.layers[0].self_attn
        self.scaling = float(getattr(attn0, "scaling", self.head_dim**-0.5))
        projections = []
        self.layers: list[_Layer] = []
        for layer in inner.layers[: config.num_hidden_layers]:
            attn, mlp = layer.self_attn, layer.mlp
            q, k, v, o = (_linear(getattr(attn, n)) for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
            gate, up, down = (_linear(getattr(mlp, n)) for n in ("gate_proj", "up_proj", "down_proj"))
            projections += [q, k, v, o, gate, up, down]
            self.layers.append(
                _Layer(
                    in_norm=_norm(layer.input_layernorm),
                    post_norm=_norm(layer.post_attention_layernorm),
                    qk_norm=self._qk_norm(attn),
                    qkv=[q, k, v],
                    o=o,
                    gate_up=[gate, up],
                    down=down,
                )
            )
        size = sum(p.weight.numel() * p.weight.element_size() for p in projections)
        self.fused = size <= FUSE_LIMIT_BYTES if fuse is None else fuse
        if self.fused:  # merged copies live only as long as this view (one rollout)
            for layer in self.layers:
                layer.qkv, layer.gate_up = [_fuse(layer.qkv)], [_fuse(layer.gate_up)]
                layer.o, layer.down = _fuse([layer.o]), _fuse([layer.down])
            self.lm_head = _fuse([self.lm_head]) if self.lm_head.loras else self.lm_head
            for linear in self._projections() if pack_rows else ():
                linear.pack(pack_rows)

    def _projections(self) -> list[LinearView]:
        return [p for layer in self.layers for p in (*layer.qkv, layer.o, *layer.gate_up, layer.down)] + [self.lm_head]

    def _qk_norm(self, attn: Any) -> tuple[torch.Tensor, float] | None:
        if not hasattr(attn, "q_norm"):
            return None
        (wq, eps_q), (wk, eps_k) = _norm(attn.q_norm), _norm(attn.k_norm)
        if eps_q != eps_k or wq.shape != (self.head_dim,) or wk.shape != (self.head_dim,):
            raise Unsupported("q/k norms of this shape")
        weight = torch.cat([wq.expand(self.num_heads, -1), wk.expand(self.num_kv_heads, -1)])
        return weight, eps_q

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin for integer positions [B, S] as [B, S, 1, D], from the model's own rotary module."""
        probe = self.embed.new_empty(1)
        cos, sin = self.rotary(probe, positions)
        half = sin.shape[-1] // 2
        signed_sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
        return cos.unsqueeze(2), signed_sin.unsqueeze(2)

    def forward(
        self,
        ids: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: list[tuple[torch.Tensor, torch.Tensor]],
        start: int,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Hidden states (after the final norm) for ids [B, S] written at cache slots start..start+S.

        mask: bool [B, 1, S, start+S], True where a query may attend a key.
        """
        batch, length = ids.shape
        end = start + length

        def attend(index: int, layer: _Layer, qkv: torch.Tensor) -> torch.Tensor:
            q, k, v = self._heads(layer, qkv, rope)
            keys, values = cache[index]
            keys[:, :, start:end], values[:, :, start:end] = k, v
            out = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=mask,
                                                 scale=self.scaling, enable_gqa=self.num_heads != self.num_kv_heads)
            return out.transpose(1, 2).reshape(batch, length, -1)

        return self._layers(ids, attend)

    def decode(self, ids: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], cache: SharedPromptCache,
               step: int) -> torch.Tensor:
        """One decode step: hidden states [B, 1, H] for ids [B, 1], the completions' token `step` (0-based),
        written to the rows' own cache slot `step`; the prompt's keys are read once per group."""
        batch = ids.shape[0]

        def attend(index: int, layer: _Layer, qkv: torch.Tensor) -> torch.Tensor:
            keys, values = cache.own[index]  # [G, Hkv, n, slots, D] each
            q, k, v = self._heads(layer, qkv, rope)
            own = (keys[:, :, :, : step + 1], values[:, :, :, : step + 1])  # k and v go to slot `step`
            out = grouped_attention(q, cache.prefix[index], cache.prefix_bias, own, cache.group_size, self.scaling,
                                    new=(k, v))
            return out.view(batch, 1, -1)  # [B, Hq, 1, D] as [B, 1, Hq * D]

        return self._layers(ids, attend)

    def _heads(self, layer: _Layer, qkv: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, Hq, S, D] and k [B, Hkv, S, D] normed (Qwen3) and roped, and v [B, Hkv, S, D], from the fused
        projection's [B, S, (Hq + 2 Hkv) D]."""
        batch, length = qkv.shape[:2]
        nq, nkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        qk = qkv[..., : (nq + nkv) * d].view(batch, length, nq + nkv, d)  # q and k heads side by side: one rope
        if layer.qk_norm is not None:
            qk = rms_norm(qk, layer.qk_norm)
        qk = apply_rope(qk, *rope).transpose(1, 2)
        return qk[:, :nq], qk[:, nq:], qkv[..., (nq + nkv) * d :].view(batch, length, nkv, d).transpose(1, 2)

    def _layers(self, ids: torch.Tensor, attend: Callable[[int, _Layer, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The decoder over ids [B, S]; attend(layer index, layer, its q/k/v projection [B, S, (Hq + 2 Hkv) D])
        -> [B, S, Hq D]. Returns the hidden states after the final norm."""
        h = F.embedding(ids, self.embed)
        x = rms_norm(h, self.layers[0].in_norm)
        norms_after = [layer.in_norm for layer in self.layers[1:]] + [self.final_norm]
        for index, (layer, norm_after) in enumerate(zip(self.layers, norms_after)):
            qkv = layer.qkv[0](x) if len(layer.qkv) == 1 else torch.cat([proj(x) for proj in layer.qkv], dim=-1)
            h = h + layer.o(attend(index, layer, qkv))
            x = rms_norm(h, layer.post_norm)
            h = h + layer.down(swiglu(layer.gate_up, x))
            x = rms_norm(h, norm_after)
        return x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()



def fast_decoder_or_reason(model: Any, pack_rows: int | None = None) -> tuple[FastDecoder | None, str | None]:
    try:
        return FastDecoder(model, pack_rows=pack_rows), None
    except Unsupported as why:
        return None, str(why)
