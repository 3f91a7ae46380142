"""Faster GRPO on TRL's own loss: the same trainer, the slow parts done leaner (docs/performance.md).

`FastGRPOTrainer` is TRL's GRPOTrainer -- prompts, rewards, group advantages, the reference model and
KL, the clipped importance-ratio loss, logging -- with four replacements, each exact or documented:

1. Rollouts: `sample()` instead of `model.generate`. For small and mid-sized models generate is mostly
   per-token Python overhead (mask building, cache objects, logits processors, PEFT's LoRA wrappers).
   `FastDecoder` is a functional view of a Llama-family decoder: LoRA merged into the weights once per
   rollout, q/k/v and gate/up fused into one matmul each, q/k norm and RoPE applied to all heads at once,
   a preallocated (growing) KV cache, and each distinct prompt prefilled once for its whole group.
   Sampling is transformers' temperature/top-k/top-p; rows stop at EOS, never past max_new_tokens; each
   token's log-prob under the temperature-scaled policy comes back too (what TRL's forward computes).
   Rollouts run without dropout (TRL's generate runs in train mode, so LoRA dropout is live there).
2. Training forward: `shared_prefix_logps()` computes each distinct prompt once per batch (a GRPO batch
   holds it num_generations times), keeps its KV cache in the autograd graph, indexes it out to the
   completions and scores them through TRL's own fused LM head. Same values and gradients; LoRA dropout
   on prompt tokens is drawn once per group instead of once per row (the same in expectation).
3. Reference (and any dropout-free) log-probs: `score()` runs the functional decoder without gradients,
   with the adapter off exactly as TRL's `use_adapter` leaves it -- no dropout involved, so exact.
4. LoRA dropout on CPU: `FastDropout`, the same Bernoulli mask from a quarter of the random draws
   (p rounded to a multiple of 2^-15).

Anything outside that (vLLM, continuous batching, images, DeepSpeed/FSDP, a DDP-wrapped training
forward, gradient checkpointing, any generation_config field generate() would apply beyond temperature/top-k/
top-p (repetition penalty, min_p, no_repeat_ngram_size, bad words...), extra generation kwargs, non
Llama-family or sliding-window models, quantized or DoRA layers) falls back to TRL's own code, unchanged;
so does everything when the installed TRL/transformers/PEFT are not the versions this was verified against
(VERIFIED_VERSIONS) or a TRL method we override is gone. Each fallback is warned once and recorded with its
reason in `trainer.fast_path` (the run's results.json). `HELLO_AGENTS_FAST=0` turns all of it off.
"""

from __future__ import annotations

import inspect
import logging
import os
from dataclasses import dataclass, field
from importlib import metadata
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
ENV_SWITCH = "HELLO_AGENTS_FAST"


class Unsupported(Exception):
    """The model (or the request) is outside what the lean sampler reproduces; use model.generate."""


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


# The releases whose internals this module was checked against (the overrides below, PEFT's LoRA layers,
# generate's config merge; tests/test_fast_equivalence.py). Patch releases of the same minor are accepted;
# anything else runs plain TRL, with a warning, until someone re-runs the tests and updates this table.
VERIFIED_VERSIONS = {"trl": "1.16.0", "transformers": "5.24.0", "peft": "0.21.2"}


def version_blocker() -> str | None:
    """Why the installed libraries are not the verified ones (None: they are)."""
    from packaging.version import Version

    off = []
    for name, verified in VERIFIED_VERSIONS.items():
        try:
            installed = metadata.version(name)  # looked up now (not at import): what is really installed
        except metadata.PackageNotFoundError:  # e.g. no PEFT: nothing of it to be coupled to
            continue
        if Version(installed).release[:2] != Version(verified).release[:2]:
            off.append(f"{name} {installed}")
    if not off:
        return None
    verified = ", ".join(f"{n} {v}" for n, v in VERIFIED_VERSIONS.items())
    return f"{', '.join(off)} installed; the fast path is verified with {verified} (x.y.*)"


# TRL methods FastGRPOTrainer overrides, with the leading parameters it relies on: if TRL renames or reshapes
# one, the override would silently never run (or mis-bind), so the trainer turns the fast path off instead.
OVERRIDDEN_TRL_METHODS = {
    "_generate_single_turn": (
        "self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images",
    ),
    "_get_per_token_logps_and_entropies": (
        "self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy",
        "compute_aux_loss",
    ),
}


def coupling_blocker(trl_trainer_class: type) -> str | None:
    """Why the fast trainer must not touch TRL's internals here (None: it may)."""
    reason = version_blocker()
    if reason:
        return reason
    for name, expected in OVERRIDDEN_TRL_METHODS.items():
        method = getattr(trl_trainer_class, name, None)
        if method is None:
            return f"TRL has no {trl_trainer_class.__name__}.{name} any more (our override would never run)"
        if tuple(inspect.signature(method).parameters)[: len(expected)] != expected:
            return f"TRL changed the signature of {trl_trainer_class.__name__}.{name}"
    return None


class FastPathRecord:
    """What the fast trainer did: counters per path and each fallback with its reason (results.json: fast_path).

    A fallback is warned the first time it happens (printed, and logged where logging is set up), then counted.
    """

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.fallbacks: dict[tuple[str, str], int] = {}

    def ran(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def fell_back(self, part: str, reason: str, n: int = 1) -> None:
        if (part, reason) not in self.fallbacks:
            message = f"[fast path] {part}: using TRL's own code ({reason})"
            print(message, flush=True)  # the console a user watches (ConsoleProgress prints there too)
            if log.hasHandlers():  # else logging's last resort would print it a second time, on stderr
                log.warning(message)
        self.fallbacks[(part, reason)] = self.fallbacks.get((part, reason), 0) + n

    def as_dict(self) -> dict[str, Any]:
        return {
            "sampler": self.counts.get("sampler_completions", 0) > 0,
            "shared_prompt_forward": self.counts.get("shared_prompt_forwards", 0) > 0,
            "counts": dict(sorted(self.counts.items())),
            "fallbacks": [{"part": p, "reason": r, "times": n} for (p, r), n in self.fallbacks.items()],
        }


# --- a cheaper LoRA dropout on CPU ----------------------------------------------------------------------------


class FastDropout(torch.nn.Module):
    """nn.Dropout(p) whose mask costs a quarter of the random draws: on CPU `bernoulli_` draws one 32-bit
    number per element, this draws one 64-bit number per four elements (15 random bits each).

    Each element is still dropped independently, with probability round(p * 2**15) / 2**15 (p = 0.05 ->
    0.049988), and survivors are scaled by 1 / (1 - that probability), so the expectation is exact. Eval
    mode is the identity, like nn.Dropout. A different random stream than nn.Dropout, not a different model.
    """

    BITS = 15

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = float(p)
        self.threshold = round(self.p * 2**self.BITS)
        self.scale = 1.0 / (1.0 - self.threshold / 2**self.BITS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.threshold == 0:
            return x
        n = x.numel()
        words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()  # 63 random bits each
        lanes = words.view(torch.int16)[:n].view(x.shape) & (2**self.BITS - 1)
        return x * ((lanes >= self.threshold) * self.scale).to(x.dtype)

    def extra_repr(self) -> str:
        return f"p={self.p}, quantised to {self.threshold}/2^{self.BITS}"


def use_fast_dropout(model: Any) -> int:
    """Swap every LoRA dropout of `model` (PEFT) for FastDropout, on CPU only; returns how many."""
    if not enabled():
        return 0
    reason = version_blocker()
    if reason:  # PEFT's layer layout is what we swap into: only on verified versions
        log.warning("FastDropout off: %s", reason)
        return 0
    swapped = 0
    for module in model.modules():
        dropouts = getattr(module, "lora_dropout", None)
        if not isinstance(dropouts, torch.nn.ModuleDict):
            continue
        for name, dropout in list(dropouts.items()):
            weight = getattr(module, "weight", None)
            if type(dropout) is torch.nn.Dropout and dropout.p > 0 and (weight is None or weight.device.type == "cpu"):
                fast_dropout = FastDropout(dropout.p)
                fast_dropout.train(dropout.training)
                dropouts[name] = fast_dropout
                swapped += 1
    return swapped


# --- a functional copy of the decoder ------------------------------------------------------------------


@dataclass
class _Linear:
    """y = x W^T + b + sum_i s_i (x A_i^T) B_i^T, with references to the live tensors (no copies)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    loras: list[tuple[torch.Tensor, torch.Tensor, float]] = field(default_factory=list)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        for a, b, scale in self.loras:  # PEFT may keep adapters in float32 under a bf16 base: cast like it does
            y = y + (F.linear(F.linear(x.to(a.dtype), a), b) * scale).to(y.dtype)
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
    qk_norm: tuple[torch.Tensor, float] | None  # Qwen3's per-head q/k norms as one [heads_q + heads_kv, D] norm
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
    # the HF RMSNorm of this family: normalise in float32, cast back, then scale (one op in float32)
    weight, eps = norm
    if x.dtype == torch.float32 and weight.dtype == torch.float32 and weight.dim() == 1:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    # x * cos + rotate_half(x) * sin, with rotate_half(x) * sin == roll(x, D/2) * [-sin_1, sin_2]
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


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
        cos, sin = rope
        end = start + length
        h = F.embedding(ids, self.embed)
        nq, nkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        for layer, (keys, values) in zip(self.layers, cache):
            x = _rms(h, layer.in_norm)
            if len(layer.qkv) == 1:
                qkv = layer.qkv[0](x)
                qk, v = qkv[..., : (nq + nkv) * d], qkv[..., (nq + nkv) * d :]
            else:
                q, k, v = (proj(x) for proj in layer.qkv)
                qk = torch.cat([q, k], dim=-1)
            qk = qk.view(batch, length, nq + nkv, d)  # q and k heads side by side: one norm, one rope
            if layer.qk_norm is not None:
                qk = _rms(qk, layer.qk_norm)
            qk = _rope(qk, cos, sin).transpose(1, 2)
            q, k = qk[:, :nq], qk[:, nq:]
            keys[:, :, start:end] = k
            values[:, :, start:end] = v.view(batch, length, nkv, d).transpose(1, 2)
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


def _prefill(
    decoder: FastDecoder, prompts: torch.Tensor, prompt_mask: torch.Tensor, extra: int, reserve: int | None = None
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A KV cache for left-padded prompts [B, P] with room for `extra` more tokens per row; each distinct
    prompt is computed once (a GRPO batch repeats each prompt num_generations times) and copied to its rows.

    Returns the cache, the hidden state after the last prompt token [B, H], rope tables for all P + extra
    slots, and the key-validity mask [B, P + extra] (prompt pads False, everything after them True).
    The cache holds P + `reserve` slots (default all); `_grow` adds more.
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

    def buffers(rows: int, slots: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
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


def _grow(cache: list[tuple[torch.Tensor, torch.Tensor]], slots: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The same cache with room for `slots` tokens (amortised doubling, like a dynamic cache, not a static one)."""
    def grown(t: torch.Tensor) -> torch.Tensor:
        more = t.new_empty(t.shape[0], t.shape[1], slots - t.shape[2], t.shape[3])
        return torch.cat([t, more], dim=2)

    return [(grown(k), grown(v)) for k, v in cache]


KV_RESERVE = 64  # decode slots allocated up front; completions that run longer double it as they go
LOGITS_CHUNK_BYTES = 64 * 2**20  # scoring materialises logits for this many bytes of rows at a time


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
    cache, last, (cos, sin), valid = _prefill(decoder, input_ids[:, :length], attention_mask[:, :length], logits_to_keep - 1)
    hidden = last[:, None]
    if logits_to_keep > 1:
        steps = logits_to_keep - 1
        causal = torch.ones(steps, steps, dtype=torch.bool, device=input_ids.device).tril()
        mask = torch.cat([valid[:, None, None, :length].expand(batch, 1, steps, length), causal.expand(batch, 1, -1, -1)], -1)
        rope = (cos[:, length : length + steps], sin[:, length : length + steps])
        hidden = torch.cat([hidden, decoder.forward(completion[:, :-1], rope, cache, length, mask)], dim=1)
    del cache
    vocab = decoder.embed.shape[0]
    rows = max(1, LOGITS_CHUNK_BYTES // (4 * vocab * logits_to_keep))
    logps = []
    for start in range(0, batch, rows):
        logits = decoder.logits(hidden[start : start + rows]) / temperature
        logps.append(logits.log_softmax(-1).gather(-1, completion[start : start + rows, :, None]).squeeze(-1))
    return torch.cat(logps) * attention_mask[:, length:]


def _live_dropout(module: torch.nn.Module) -> bool:
    # nn.Dropout, our FastDropout, or whatever else PEFT put there (Identity when p == 0): unknown kinds count as live
    return module.training and not isinstance(module, torch.nn.Identity) and getattr(module, "p", 1.0) > 0


def no_active_dropout(model: Any) -> bool:
    """True when a forward of `model` right now is deterministic (eval mode, or every live dropout is 0)."""
    if not model.training:
        return True
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
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
    prompts = torch.full((batch, longest), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((batch, longest), dtype=torch.long)
    for row, prompt in enumerate(prompt_ids):  # left padding, like TRL
        prompts[row, longest - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        prompt_mask[row, longest - len(prompt) :] = 1
    cache, hidden, (cos, sin), valid = _prefill(
        decoder, prompts.to(device), prompt_mask.to(device), max_new_tokens, reserve=KV_RESERVE
    )
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
        if slot >= cache[0][0].shape[2]:
            cache = _grow(cache, min(longest + max_new_tokens, 2 * cache[0][0].shape[2]))
        rope = (cos[:, slot : slot + 1], sin[:, slot : slot + 1])
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


# GenerationConfig fields the lean sampler implements, or that do not change which tokens generate() samples:
# lengths and ids TRL sets, output formats, caching and compilation, beam-only knobs, assisted-decoding knobs
# (inert without an assistant). Any other field away from its neutral value sends the rollout to generate().
SAMPLER_FIELDS = frozenset({
    "do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "max_length", "eos_token_id", "pad_token_id",
    "bos_token_id", "decoder_start_token_id", "use_cache", "cache_implementation", "cache_config", "max_cache_len",
    "compile_config", "disable_compile", "prefill_chunk_size", "low_memory", "continuous_batching_config",
    "output_attentions", "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate",
    "renormalize_logits", "early_stopping", "length_penalty", "num_assistant_tokens", "num_assistant_tokens_schedule",
    "assistant_confidence_threshold", "assistant_lookbehind", "target_lookbehind", "max_matching_ngram_size",
    "transformers_version", "_from_model_config",
})


def sampler_settings(model: Any, requested: Any) -> tuple[dict[str, Any], str | None]:
    """What `model.generate(generation_config=requested)` samples with, as `sample()`'s temperature/top_p/top_k,
    or why the sampler cannot reproduce it. generate fills every field TRL's config leaves unset from the model's
    own generation_config (a checkpoint may ship min_p, no_repeat_ngram_size, bad_words_ids...): merge the same way.
    """
    from transformers import GenerationConfig

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    merged, _ = base._prepare_generation_config(requested)  # generate's own merge: requested > model's > defaults
    blank = GenerationConfig()
    neutral = {**dict.fromkeys(blank.to_dict()), **blank._get_default_generation_params()}
    applied = []
    for name, default in neutral.items():
        value = getattr(merged, name, None)
        if name in SAMPLER_FIELDS or value == default or (default is None and value in ([], {}, ())):
            continue
        applied.append(f"{name}={value!r}"[:60])
    if applied:
        return {}, "generation_config " + ", ".join(applied)
    temperature = merged.temperature if merged.do_sample else 0.0  # generate: do_sample=False is greedy
    return {"temperature": temperature, "top_p": merged.top_p, "top_k": merged.top_k}, None


def fast_decoder_or_reason(model: Any) -> tuple[FastDecoder | None, str | None]:
    try:
        return FastDecoder(model), None
    except Unsupported as why:
        return None, str(why)


BUCKET_OVERHEAD_TOKENS = 256  # padding worth one more forward call
MAX_BUCKETS = 4


def length_buckets(lengths: list[int]) -> list[tuple[list[int], int]]:
    """Rows grouped by completion length so each group pads only to its own longest: (rows, width) pairs.

    One long completion would otherwise pad every row of the batch to its length (TRL pads to the batch's
    longest), multiplying the forward's compute and activation memory. Adjacent length groups are merged
    while merging adds less padding than BUCKET_OVERHEAD_TOKENS, and down to MAX_BUCKETS groups.
    """
    by_length: dict[int, list[int]] = {}
    for row, length in enumerate(lengths):
        by_length.setdefault(int(length), []).append(row)
    buckets = [(rows, length) for length, rows in sorted(by_length.items())]
    while len(buckets) > 1:
        costs = [len(lo[0]) * (hi[1] - lo[1]) for lo, hi in zip(buckets, buckets[1:])]
        best = min(range(len(costs)), key=costs.__getitem__)
        if costs[best] >= BUCKET_OVERHEAD_TOKENS and len(buckets) <= MAX_BUCKETS:
            break
        (low, _), (high, width) = buckets[best], buckets[best + 1]
        buckets[best : best + 2] = [(low + high, width)]
    return buckets


# --- log-probabilities with the prompt computed once per group ------------------------------------------------


def shared_prefix_blocker(model: Any, compute_aux_loss: bool = False, extra: dict | None = None) -> str | None:
    """Why the shared-prompt forward cannot stand in for TRL's full forward here (None: it can)."""
    if not enabled():
        return f"{ENV_SWITCH}=0"
    if compute_aux_loss or any(v is not None for v in (extra or {}).values()):
        return "multimodal inputs or MoE aux loss"
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    if getattr(config, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return "model type"
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if any(t != "full_attention" for t in layer_types) or (
        config.model_type == "mistral" and getattr(config, "sliding_window", None)
    ):
        return "sliding-window attention"
    if getattr(base, "is_activation_checkpointing", False):
        return "gradient checkpointing"
    return None


def _cache_kwarg(model: Any) -> str:
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.model.forward).parameters else "past_key_values"


def shared_prefix_logps(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, compute_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """TRL's per-token log-probs (and entropies) of the last `logits_to_keep` tokens, computing each distinct
    prompt once: a forward over the unique prompts fills a KV cache (kept in the autograd graph), the cache is
    indexed out to every completion of the group, and one forward over the completions scores them through
    TRL's fused LM head. Same positions, masks and head as TRL's full forward; a GRPO batch holds each
    prompt num_generations times, so prompt tokens cost 1/num_generations of before. None if no prompt repeats.
    """
    prompt_len = input_ids.size(1) - logits_to_keep
    if prompt_len < 2:
        return None
    prompts = input_ids[:, :prompt_len].masked_fill(attention_mask[:, :prompt_len] == 0, -1)
    unique, inverse = torch.unique(prompts, dim=0, return_inverse=True)
    if unique.size(0) == input_ids.size(0):
        return None
    first = torch.zeros(unique.size(0), dtype=torch.long, device=input_ids.device)
    first.scatter_(0, inverse, torch.arange(input_ids.size(0), device=input_ids.device))  # any row of each group
    key = _cache_kwarg(model)
    prefix = model(
        input_ids=input_ids[first, : prompt_len - 1],
        attention_mask=attention_mask[first, : prompt_len - 1],
        use_cache=True,
        logits_to_keep=1,
    )
    cache = getattr(prefix, key, None)
    if cache is None:
        cache = prefix.past_key_values
    cache.batch_select_indices(inverse)
    suffix = input_ids[:, prompt_len - 1 :]
    labels = suffix.masked_fill(attention_mask[:, prompt_len - 1 :] == 0, -100)
    labels[:, 0] = -100  # the last prompt token only predicts the first completion token
    outputs = model(input_ids=suffix, attention_mask=attention_mask, labels=labels, fused_lm_head=True, **{key: cache})
    logps = outputs.log_probs[:, -logits_to_keep:]
    entropies = outputs.entropy[:, -logits_to_keep:] if compute_entropy else None
    return logps, entropies


# --- the loss in chunks of whole groups, each backpropagated at once -------------------------------------------

# Training rows scored together in one forward+backward: whole groups (a group shares its prompt) up to this many
# tokens (completion tokens, plus each distinct prompt once). Activations are kept for one chunk at a time instead
# of the whole batch; below it (short completions, small batches) the batch stays one piece, exactly as before.
LOSS_CHUNK_TOKENS = 1024
# On an accelerator one big batch keeps the device busy and memory is rarely what binds at these sizes: chunk only
# far larger batches there (not measured on a GPU yet; benchmarks/gpu_check.sh measures it).
LOSS_CHUNK_TOKENS_ACCELERATOR = 32768
# Per-row keys of TRL's generation batch the chunks may carry; anything else (images, tool masks of other
# shapes...) keeps TRL's whole-batch loss.
CHUNKABLE_KEYS = frozenset({
    "prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch",
    "old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio",
    "tool_mask",
})
# How each loss type's whole-batch value splits into a sum over row chunks: "sum" (divided by a normaliser
# fixed for the batch: chunks add up exactly), "rows" (a mean over rows: weight rows_c / rows), "tokens"
# (a mean over the batch's tokens: weight tokens_c / tokens). Other loss types keep the whole-batch loss.
LOSS_SPLIT = {"dapo": "sum", "cispo": "sum", "grpo": "rows", "sapo": "rows", "dr_grpo": "rows", "bnpo": "tokens"}


def loss_chunks(inputs: dict[str, Any], budget: int) -> list[torch.Tensor] | None:
    """Row indices of each chunk: whole prompt groups, in order, up to `budget` tokens; None for one chunk."""
    prompts = inputs["prompt_ids"].masked_fill(inputs["prompt_mask"] == 0, -1)
    rows = prompts.size(0)
    _, group = torch.unique(prompts, dim=0, return_inverse=True)
    prompt_tokens = inputs["prompt_mask"].sum(dim=1).tolist()
    completion_tokens = inputs["completion_mask"].sum(dim=1).tolist()
    members: dict[int, list[int]] = {}
    for row, g in enumerate(group.tolist()):
        members.setdefault(g, []).append(row)
    chunks: list[list[int]] = []
    size = budget + 1
    for rows_of_group in members.values():
        cost = prompt_tokens[rows_of_group[0]] + sum(completion_tokens[r] for r in rows_of_group)
        if chunks and size + cost <= budget:
            chunks[-1] += rows_of_group
            size += cost
        else:
            chunks.append(list(rows_of_group))
            size = cost
    if len(chunks) < 2:
        return None
    device = inputs["prompt_ids"].device
    assert sum(len(c) for c in chunks) == rows
    return [torch.tensor(sorted(c), device=device) for c in chunks]


def chunk_blocker(trainer: Any, model: Any, inputs: dict[str, Any]) -> str | None:
    """Why the loss must stay one whole-batch forward+backward (None: it may go in chunks)."""
    if not enabled():
        return f"{ENV_SWITCH}=0"
    if not torch.is_grad_enabled() or not trainer.model.training:
        return "no backward (evaluation)"
    if LOSS_SPLIT.get(trainer.loss_type) is None:
        return f"loss_type {trainer.loss_type}"
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled or trainer.accelerator.unwrap_model(model) is not model:
        return "DeepSpeed/FSDP/DDP"
    if getattr(trainer, "aux_loss_enabled", False) or getattr(trainer, "top_entropy_quantile", 1.0) < 1.0:
        return "aux loss or entropy masking"
    if getattr(trainer, "_entropy_bonus_enabled", False):
        return "entropy bonus"
    unknown = [k for k, v in inputs.items() if v is not None and k not in CHUNKABLE_KEYS]
    if unknown:
        return f"inputs {sorted(unknown)}"
    rows = inputs["prompt_ids"].size(0)
    for key, value in inputs.items():
        if key != "num_items_in_batch" and value is not None and (not torch.is_tensor(value) or value.size(0) != rows):
            return f"input {key} is not per row"
    return None


def combine_metrics(metrics: dict[str, list], before: dict[str, int], weights: list[float]) -> None:
    """Each chunk appended its own value of every metric: one value for the batch instead, weighted by tokens
    (TRL's metrics here are token means over the batch), min/max for the *_min/*_max ones."""
    total = sum(weights) or 1.0
    for key, values in metrics.items():
        new = values[before.get(key, 0):]
        if len(new) != len(weights) or len(new) < 2:
            continue
        if key.endswith("_min") or key.endswith("/min"):
            value = min(new)
        elif key.endswith("_max") or key.endswith("/max"):
            value = max(new)
        else:
            value = sum(v * w for v, w in zip(new, weights)) / total
        del values[before.get(key, 0):]
        values.append(value)


# --- the trainer --------------------------------------------------------------------------------------


def fast_grpo_trainer_class() -> type:
    """GRPOTrainer with the lean sampler and shared-prompt forwards (TRL imported lazily, like the package)."""
    from trl import GRPOTrainer
    from trl.extras.profiling import profiling_context

    class FastGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer; only rollouts and per-token log-prob forwards differ, each falling back to TRL's."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._fast_record = FastPathRecord()
            # checked before anything of ours touches TRL/PEFT internals; outside them this is plain GRPOTrainer
            self._fast_off = coupling_blocker(GRPOTrainer)
            super().__init__(*args, **kwargs)
            if self._fast_off:
                self._fast_record.fell_back("all", self._fast_off)
            else:
                self._fast_record.ran("fast_dropout_layers", use_fast_dropout(self.model))

        @property
        def fast_path(self) -> dict[str, Any]:
            """Which paths ran, how often, and every fallback with its reason (JSON-ready)."""
            return self._fast_record.as_dict()

        def _fast_generation_blocker(self, images: Any, multimodal_fields: Any) -> str | None:
            args = self.args
            checks = [
                (not enabled(), f"{ENV_SWITCH}=0"),
                (self.use_vllm, "use_vllm"),
                (getattr(self, "use_transformers_continuous_batching", False), "continuous batching"),
                (bool(images) or bool(multimodal_fields), "multimodal prompts"),
                (self.is_deepspeed_enabled or self.is_fsdp_enabled, "DeepSpeed/FSDP"),
                (bool(args.generation_kwargs), "generation_kwargs"),
                (args.cache_implementation is not None, "cache_implementation"),
                (getattr(self, "_is_vlm", False), "vision-language model"),
            ]
            return next((reason for blocked, reason in checks if blocked), None)

        def _get_per_token_logps_and_entropies(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **extra,
        ):
            if self._fast_off:
                self._fast_record.ran("trl_forwards")
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **extra
                )
            unwrapped = self.accelerator.unwrap_model(model)
            blocker = (
                (self.is_deepspeed_enabled or self.is_fsdp_enabled) and "DeepSpeed/FSDP"
            ) or shared_prefix_blocker(unwrapped, compute_aux_loss, extra)
            if not blocker and unwrapped is not model and torch.is_grad_enabled():
                blocker = "DDP-wrapped model"  # two forwards per backward through DDP's reducer: not here
            if blocker:
                self._fast_record.fell_back("forward", blocker)
                self._fast_record.ran("trl_forwards")
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **extra
                )
            decoder = None
            if not torch.is_grad_enabled() and not compute_entropy and no_active_dropout(unwrapped):
                decoder, _ = fast_decoder_or_reason(unwrapped)  # the reference (adapter off), eval forwards
            batch_size = batch_size or input_ids.size(0)
            prompt_len = input_ids.size(1) - logits_to_keep
            lengths = attention_mask[:, prompt_len:].sum(dim=1).tolist()
            parts, order = [], []
            for rows, width in length_buckets(lengths):
                # each bucket padded to its own longest completion, not the batch's (right padding: exact)
                width = max(width, 1)
                for start in range(0, len(rows), batch_size):
                    index = torch.tensor(rows[start : start + batch_size], device=input_ids.device)
                    ids = input_ids[index, : prompt_len + width]
                    mask = attention_mask[index, : prompt_len + width]
                    with self.accelerator.autocast():
                        if decoder is not None:
                            with profiling_context(self, "fast.score"):
                                part = (score(decoder, ids, mask, width, self.temperature), None)
                            self._fast_record.ran("functional_scores")
                        else:
                            part = shared_prefix_logps(unwrapped, ids, mask, width, compute_entropy)
                            self._fast_record.ran("shared_prompt_forwards" if part is not None else "trl_forwards")
                    if part is None:  # no prompt repeats in these rows (data, not a fallback): TRL's own forward
                        part = super()._get_per_token_logps_and_entropies(model, ids, mask, width, None, compute_entropy)[:2]
                    parts.append(tuple(None if t is None else F.pad(t, (0, logits_to_keep - width)) for t in part))
                    order.append(index)
            restore = torch.argsort(torch.cat(order))
            logps = torch.cat([p[0] for p in parts])[restore]
            entropies = torch.cat([p[1] for p in parts])[restore] if compute_entropy else None
            return logps, entropies, None

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            """TRL's loss, computed and backpropagated one chunk of whole groups at a time when the batch is big:
            the same loss and gradients (each chunk's loss is TRL's own on its rows, weighted so that the chunks
            add up to the whole-batch loss), activations for one chunk instead of all rows. The gradients are
            already in .grad when this returns; the returned loss is a detached leaf, so the Trainer's own
            backward adds nothing."""
            blocker = "" if self._fast_off or return_outputs else chunk_blocker(self, model, inputs)
            on_cpu = inputs["prompt_ids"].device.type == "cpu"
            budget = LOSS_CHUNK_TOKENS if on_cpu else LOSS_CHUNK_TOKENS_ACCELERATOR
            chunks = loss_chunks(inputs, budget) if blocker is None else None
            if chunks is None:
                if blocker:  # "" = the whole fast path is off (already reported)
                    self._fast_record.fell_back("loss chunks", blocker)
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            split = LOSS_SPLIT[self.loss_type]
            mask = inputs["completion_mask"] if inputs.get("tool_mask") is None else inputs["completion_mask"] * inputs["tool_mask"]
            rows, tokens = mask.size(0), mask.sum().clamp(min=1.0)
            mode = "train" if self.model.training else "eval"
            metrics = self._metrics[mode]
            before = {key: len(values) for key, values in metrics.items()}
            total, weights = None, []
            for index in chunks:
                part = {k: (v if k == "num_items_in_batch" or v is None else v[index]) for k, v in inputs.items()}
                part_tokens = mask[index].sum()
                loss = super().compute_loss(model, part, False, num_items_in_batch)
                if split == "rows":
                    loss = loss * (len(index) / rows)
                elif split == "tokens":
                    loss = loss * (part_tokens.clamp(min=1.0) / tokens)
                self.accelerator.backward(loss)  # this chunk's activations are freed here
                total = loss.detach() if total is None else total + loss.detach()
                weights.append(float(part_tokens))
            combine_metrics(metrics, before, weights)
            self._fast_record.ran("loss_chunks", len(chunks))
            return total.requires_grad_()

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            if self._fast_off:
                blocker: str | None = ""  # the whole fast path is off, reported once at start
            else:
                blocker = self._fast_generation_blocker(images, multimodal_fields)
                blocker = blocker or ("tool images" if has_tool_images else None)
            decoder, settings = None, {}
            if blocker is None:
                model = self.accelerator.unwrap_model(self.model)
                settings, blocker = sampler_settings(model, self.generation_config)
            if blocker is None:
                decoder, blocker = fast_decoder_or_reason(model)
            if blocker is not None:
                if blocker:  # "" = the whole fast path is off, already reported once
                    self._fast_record.fell_back("sampler", blocker, len(prompt_ids))
                self._fast_record.ran("generate_completions", len(prompt_ids))
                return super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )
            with profiling_context(self, "fast.sample"):
                completion_ids, logprobs = sample(
                    model,
                    prompt_ids,
                    max_new_tokens=self.max_completion_length,
                    eos_token_ids=list(self.eos_token_ids),
                    pad_token_id=self._tokenizer.pad_token_id,
                    decoder=decoder,
                    **settings,
                )
            del decoder  # frees the merged weights before the training forward
            self._fast_record.ran("sampler_completions", len(prompt_ids))
            return completion_ids, logprobs

    return FastGRPOTrainer
