"""Faster GRPO on TRL's own loss: a lean sampler replaces `model.generate` for the rollouts.

Where a GRPO step's time goes (tiny Qwen3 on CPU): about half is `model.generate`, and for small and
mid-sized models most of that is not matrix products but per-token Python overhead -- the HF forward
(mask building, cache objects, module hooks, PEFT's LoRA wrappers) and generate's machinery (logits
processors, stopping criteria). `FastGRPOTrainer` keeps everything of TRL's GRPOTrainer -- prompts,
rewards, advantages, the reference model and KL, the clipped importance-ratio loss -- and only swaps
the rollout for `sample()`: a plain loop over a functional copy of the decoder that

* merges LoRA into the weights once per rollout (and fuses q/k/v and gate/up into one matmul each),
  so a decode step is ~15 tensor ops per layer instead of ~60, and no LoRA matmuls;
* keeps a preallocated KV cache and one boolean padding mask, no cache objects or mask factories;
* samples with temperature / top-k / top-p exactly like transformers' processors, stops rows at
  EOS and the whole batch once every row has ended, and never exceeds max_new_tokens;
* returns each sampled token's log-probability under the temperature-scaled policy, the quantity
  TRL's training forward computes (`tests/test_performance_semantics.py` checks they agree).

Anything it does not cover (vLLM, continuous batching, images, DeepSpeed/FSDP, repetition penalty,
min_p, extra generation kwargs, non Llama-family architectures, quantized or DoRA layers) falls back
to TRL's own generation, unchanged. `HELLO_AGENTS_FAST_GENERATION=0` turns it off (for A/B runs).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

# Llama-family decoders this sampler reproduces exactly: pre-norm, RMSNorm, RoPE, GQA, SwiGLU MLP.
SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3"}
# Above this many bytes of projection weights, do not build merged/fused copies (memory would grow by
# one copy of the weights): use the live weights and run the LoRA branch unmerged instead. Small models,
# where fusion pays most (overhead-bound), are far below it; big ones are compute-bound anyway.
FUSE_LIMIT_BYTES = 512 * 2**20
ENV_SWITCH = "HELLO_AGENTS_FAST_GENERATION"


class Unsupported(Exception):
    """The model (or the request) is outside what the lean sampler reproduces; use model.generate."""


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


# --- a functional copy of the decoder ------------------------------------------------------------------


@dataclass
class _Linear:
    """y = x W^T + b + sum_i s_i (x A_i^T) B_i^T, with references to the live tensors (no copies)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    loras: list[tuple[torch.Tensor, torch.Tensor, float]] = field(default_factory=list)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        for a, b, scale in self.loras:
            y = y + F.linear(F.linear(x, a), b) * scale
        return y

    def merged_weight(self) -> torch.Tensor:
        weight = self.weight
        for a, b, scale in self.loras:
            weight = weight + (b.to(weight.dtype) @ a.to(weight.dtype)) * scale
        return weight


def _fuse(parts: list[_Linear]) -> _Linear:
    """One projection for several that read the same input: merged LoRA, concatenated outputs (a copy)."""
    weight = torch.cat([p.merged_weight() for p in parts], dim=0)
    if all(p.bias is None for p in parts):
        bias = None
    else:
        bias = torch.cat([p.bias if p.bias is not None else weight.new_zeros(p.weight.shape[0]) for p in parts])
    return _Linear(weight, bias)


def _linear(module: Any) -> _Linear:
    """A plain nn.Linear, or a PEFT LoRA Linear over one, as a _Linear."""
    if type(module) is torch.nn.Linear:
        return _Linear(module.weight, module.bias)
    base = getattr(module, "base_layer", None)
    if base is None or type(base) is not torch.nn.Linear or not hasattr(module, "lora_A"):
        raise Unsupported(f"{type(module).__name__} layers (quantized or non-LoRA adapters)")
    if module.disable_adapters or module.merged:  # merged: the delta is already in the base weight
        return _Linear(base.weight, base.bias)
    if getattr(module, "fan_in_fan_out", False):
        raise Unsupported("fan_in_fan_out LoRA layers")
    loras = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if name in getattr(module, "lora_variant", {}):
            raise Unsupported("LoRA variants such as DoRA")
        a, b = module.lora_A[name], module.lora_B[name]
        if not isinstance(a, torch.nn.Linear) or not isinstance(b, torch.nn.Linear) or b.bias is not None:
            raise Unsupported("LoRA layers with bias or non-linear adapters")
        loras.append((a.weight, b.weight, float(module.scaling[name])))
    return _Linear(base.weight, base.bias, loras)


@dataclass
class _Layer:
    in_norm: tuple[torch.Tensor, float]
    post_norm: tuple[torch.Tensor, float]
    q_norm: tuple[torch.Tensor, float] | None
    k_norm: tuple[torch.Tensor, float] | None
    qkv: list[_Linear]  # one fused projection, or q, k, v
    o: _Linear
    gate_up: list[_Linear]  # one fused projection, or gate, up
    down: _Linear


def _norm(module: Any) -> tuple[torch.Tensor, float]:
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if eps is None or not isinstance(getattr(module, "weight", None), torch.Tensor):
        raise Unsupported(f"norm layer {type(module).__name__}")
    return module.weight, float(eps)


def _rms(x: torch.Tensor, norm: tuple[torch.Tensor, float]) -> torch.Tensor:
    # exactly the HF RMSNorm of this family: normalise in float32, cast back, then scale
    weight, eps = norm
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class FastDecoder:
    """Read-only functional view of a Llama-family causal LM (optionally under PEFT LoRA)."""

    def __init__(self, model: Any, fuse: bool | None = None) -> None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = base.config
        kind = getattr(config, "model_type", None)
        if kind not in SUPPORTED_MODEL_TYPES:
            raise Unsupported(f"model_type {kind!r} (lean sampler covers {sorted(SUPPORTED_MODEL_TYPES)})")
        if getattr(config, "hidden_act", "silu") != "silu":
            raise Unsupported(f"hidden_act {config.hidden_act!r}")
        layer_types = getattr(config, "layer_types", None) or ["full_attention"]
        if any(t != "full_attention" for t in layer_types) or (
            kind == "mistral" and getattr(config, "sliding_window", None)
        ):
            raise Unsupported("sliding-window attention")
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
                    q_norm=_norm(attn.q_norm) if hasattr(attn, "q_norm") else None,
                    k_norm=_norm(attn.k_norm) if hasattr(attn, "k_norm") else None,
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

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin for integer positions [B, S], from the model's own rotary module (any rope scaling)."""
        probe = self.embed.new_empty(1)
        cos, sin = self.rotary(probe, positions)
        return cos.unsqueeze(1), sin.unsqueeze(1)  # [B, 1, S, D]

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
        cos, sin = rope
        end = start + length
        h = F.embedding(ids, self.embed)
        nq, nkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        for layer, (keys, values) in zip(self.layers, cache):
            x = _rms(h, layer.in_norm)
            if len(layer.qkv) == 1:
                q, k, v = layer.qkv[0](x).split([nq * d, nkv * d, nkv * d], dim=-1)
            else:
                q, k, v = (proj(x) for proj in layer.qkv)
            q = q.view(batch, length, nq, d)
            k = k.view(batch, length, nkv, d)
            if layer.q_norm is not None:
                q, k = _rms(q, layer.q_norm), _rms(k, layer.k_norm)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            v = v.view(batch, length, nkv, d).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
            attn = F.scaled_dot_product_attention(
                q, keys[:, :, :end], values[:, :, :end], attn_mask=mask, scale=self.scaling, enable_gqa=nq != nkv
            )
            h = h + layer.o(attn.transpose(1, 2).reshape(batch, length, nq * d))
            x = _rms(h, layer.post_norm)
            if len(layer.gate_up) == 1:
                gate, up = layer.gate_up[0](x).chunk(2, dim=-1)
            else:
                gate, up = (proj(x) for proj in layer.gate_up)
            h = h + layer.down(F.silu(gate) * up)
        return _rms(h, self.final_norm)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


# --- sampling ---------------------------------------------------------------------------------------------


def _filter(logits: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
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
) -> tuple[list[list[int]], list[list[float]]]:
    """Sample one completion per prompt (repeat prompts for groups); returns token ids and their logprobs.

    A completion ends with (and includes) its first EOS token, or has exactly max_new_tokens tokens.
    temperature <= 0 means greedy. Logprobs are log softmax(logits / temperature) of the chosen token,
    before top-k/top-p, which is what TRL's GRPO forward computes for the same token.
    """
    decoder = decoder or FastDecoder(model)
    device = decoder.embed.device
    batch = len(prompt_ids)
    longest = max(len(p) for p in prompt_ids)
    ids = torch.full((batch, longest), pad_token_id, dtype=torch.long)
    valid = torch.zeros((batch, longest + max_new_tokens), dtype=torch.bool)
    for row, prompt in enumerate(prompt_ids):
        ids[row, longest - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        valid[row, longest - len(prompt) :] = True  # prompt and every generated slot
    ids, valid = ids.to(device), valid.to(device)
    positions = (valid.long().cumsum(-1) - 1).clamp(min=0)  # pad-invariant positions
    cos, sin = decoder.rope(positions)
    shape = (batch, decoder.num_kv_heads, longest + max_new_tokens, decoder.head_dim)
    cache = [
        (torch.empty(shape, dtype=decoder.dtype, device=device), torch.empty(shape, dtype=decoder.dtype, device=device))
        for _ in decoder.layers
    ]
    # prefill: causal over the prompt, never attending pads; every position may see itself, so padded
    # query rows stay finite (their outputs are never read and their keys are masked for everyone)
    causal = torch.ones(longest, longest, dtype=torch.bool, device=device).tril()
    mask = (causal & valid[:, None, None, :longest]) | torch.eye(longest, dtype=torch.bool, device=device)
    hidden = decoder.forward(ids, (cos[:, :, :longest], sin[:, :, :longest]), cache, 0, mask)[:, -1]
    eos = torch.tensor(sorted(set(eos_token_ids)), dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens, logps = [], []
    for step in range(max_new_tokens):
        logits = decoder.logits(hidden)
        if temperature > 0:
            scaled = logits / temperature
            probs = _filter(scaled, top_k, top_p).softmax(dim=-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            scaled = logits
            token = logits.argmax(dim=-1)
        logp = scaled.log_softmax(dim=-1).gather(1, token[:, None]).squeeze(1)
        token = token.masked_fill(done, pad_token_id)
        tokens.append(token)
        logps.append(logp)
        done = done | torch.isin(token, eos)
        if step + 1 == max_new_tokens or bool(done.all()):
            break
        slot = longest + step
        rope = (cos[:, :, slot : slot + 1], sin[:, :, slot : slot + 1])
        hidden = decoder.forward(token[:, None], rope, cache, slot, valid[:, None, None, : slot + 1])[:, -1]
    token_rows = torch.stack(tokens, dim=1).tolist()
    logp_rows = torch.stack(logps, dim=1).tolist()
    eos_set = set(eos_token_ids)
    completions, logprobs = [], []
    for row, row_logps in zip(token_rows, logp_rows):
        end = next((i + 1 for i, t in enumerate(row) if t in eos_set), len(row))
        completions.append(row[:end])
        logprobs.append(row_logps[:end])
    return completions, logprobs


def fast_decoder_or_reason(model: Any) -> tuple[FastDecoder | None, str | None]:
    try:
        return FastDecoder(model), None
    except Unsupported as why:
        return None, str(why)


# --- the trainer --------------------------------------------------------------------------------------


def fast_grpo_trainer_class() -> type:
    """GRPOTrainer with the lean sampler for rollouts (TRL imported lazily, like the rest of the package)."""
    from trl import GRPOTrainer

    class FastGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer; only `_generate_single_turn` differs, and only where it is exact."""

        _fast_reason: str | None = None

        def _fast_generation_blocker(self, images: Any, multimodal_fields: Any) -> str | None:
            args = self.args
            checks = [
                (not enabled(), f"{ENV_SWITCH}=0"),
                (self.use_vllm, "use_vllm"),
                (getattr(self, "use_transformers_continuous_batching", False), "continuous batching"),
                (bool(images) or bool(multimodal_fields), "multimodal prompts"),
                (self.is_deepspeed_enabled or self.is_fsdp_enabled, "DeepSpeed/FSDP"),
                (self.min_p is not None, "min_p"),
                (self.repetition_penalty not in (None, 1.0), "repetition_penalty"),
                (bool(args.generation_kwargs), "generation_kwargs"),
                (args.cache_implementation is not None, "cache_implementation"),
                (getattr(self, "_is_vlm", False), "vision-language model"),
            ]
            return next((reason for blocked, reason in checks if blocked), None)

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            blocker = self._fast_generation_blocker(images, multimodal_fields) or has_tool_images and "tool images"
            decoder = None
            if not blocker:
                model = self.accelerator.unwrap_model(self.model)
                decoder, blocker = fast_decoder_or_reason(model)
            if blocker:
                if blocker != self._fast_reason:
                    log.info("lean sampler off (%s): generating with model.generate", blocker)
                    self._fast_reason = blocker
                return super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )
            from trl.extras.profiling import profiling_context

            with profiling_context(self, "fast.sample"):
                completion_ids, logprobs = sample(
                    model,
                    prompt_ids,
                    max_new_tokens=self.max_completion_length,
                    eos_token_ids=list(self.eos_token_ids),
                    pad_token_id=self._tokenizer.pad_token_id,
                    temperature=self.temperature,
                    top_p=self.top_p,
                    top_k=self.top_k,
                    decoder=decoder,
                )
            del decoder  # frees the merged weights before the training forward
            return completion_ids, logprobs

    return FastGRPOTrainer
