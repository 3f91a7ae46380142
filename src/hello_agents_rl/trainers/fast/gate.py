"""Where the fast path applies: every decision of the fast trainer's in one place, each a reason or None.

A reason means TRL's own code for that part, recorded with the reason in `fast_path` (record.py). Decided once
per run: the switch, the versions and TRL's methods before TRL's `__init__` (`class_blocker`), the device and the
attributes TRL set after it (`run_blocker`). Per call: the sampler (`sampler_blocker`), the training and reference
forwards (`forward_blocker`, then `scorer_blocker` or `train_forward_blocker`) and the loss chunks (`chunk_blocker`).
What a model's layers are (LoRA variants, norms, embeddings) only the views that read them can tell: building one
raises `Unsupported` with the reason, which the engine records the same way.
"""

from __future__ import annotations

from typing import Any

import torch

from hello_agents_rl.compat import model_is_checkpointing
from hello_agents_rl.coupling import class_blocker as trl_class_blocker
from hello_agents_rl.coupling import instance_blocker
from hello_agents_rl.trainers.fast import chunked_loss, switches
from hello_agents_rl.trainers.fast.sampling.decoder import architecture_blocker, base_model
from hello_agents_rl.trainers.fast.switches import ENV_SWITCH, enabled
from hello_agents_rl.trainers.fast.verified import device_blocker, version_blocker


def class_blocker(trl_trainer_class: type) -> str | None:
    """Before TRL's __init__: the switch, the installed versions, TRL's overridden methods."""
    if not enabled():
        return f"{ENV_SWITCH}=0"
    return version_blocker() or trl_class_blocker(trl_trainer_class)


def run_blocker(trainer: Any, trl_trainer_class: type) -> str | None:
    """After TRL's __init__: the device it chose and every attribute the fast path reads."""
    return device_blocker(trainer.accelerator.device.type) or instance_blocker(trainer, trl_trainer_class)


def sampler_blocker(trainer: Any, images: Any, multimodal_fields: Any, has_tool_images: bool) -> str | None:
    """Why the fast sampler cannot stand in for TRL's generate on this call (None: it can)."""
    args = trainer.args
    checks = [
        (trainer.use_vllm, "use_vllm"),
        (trainer.use_transformers_continuous_batching, "continuous batching"),
        (bool(images) or bool(multimodal_fields), "multimodal prompts"),
        (has_tool_images, "tool images"),
        (trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled, "DeepSpeed/FSDP"),
        (bool(args.generation_kwargs), "generation_kwargs"),
        (args.cache_implementation is not None, "cache_implementation"),
        (trainer._is_vlm, "vision-language model"),
    ]
    return next((reason for blocked, reason in checks if blocked), None)


def forward_blocker(trainer: Any, model: Any, unwrapped: Any, compute_aux_loss: bool,
                    extra: dict[str, Any]) -> str | None:
    """Why TRL's own per-token log-prob forward must run on this call (None: one of ours may: the functional
    scorer or training forward, each of which may still find the model beyond it; see their own blockers)."""
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        return "DeepSpeed/FSDP"
    if compute_aux_loss or any(v is not None for v in extra.values()):
        return "multimodal inputs or MoE aux loss"
    base = base_model(unwrapped)
    if blocker := architecture_blocker(getattr(base, "config", None)):
        return blocker
    if model_is_checkpointing(base):
        return "gradient checkpointing"
    if unwrapped is not model and torch.is_grad_enabled():
        return "DDP-wrapped model"  # two forwards per backward through DDP's reducer: not here
    return None


def scorer_blocker(model: Any, compute_entropy: bool) -> str | None:
    """Why the functional scorer cannot give these log-probs exactly (None: it can): it has no gradient, no entropy
    and no dropout."""
    from hello_agents_rl.trainers.fast.sampling import no_active_dropout

    if torch.is_grad_enabled():
        return "a gradient is needed"
    if compute_entropy:
        return "entropies are needed"
    return None if no_active_dropout(model) else "live dropout"


def train_forward_blocker(device: torch.device) -> str | None:
    """Why the functional training forward does not run here (None: it may, if the policy's view builds)."""
    if device.type != "cpu":
        return f"{device.type}: the functional forward is for CPU float32"
    return None if switches.on("functional_forward") else f"{switches.OFF_SWITCH} names functional_forward"


def chunk_blocker(trainer: Any, model: Any, inputs: dict[str, Any]) -> str | None:
    """Why the loss must stay one whole-batch forward+backward (None: it may go in chunks)."""
    if not enabled():
        return f"{ENV_SWITCH}=0"
    if not torch.is_grad_enabled() or not trainer.model.training:
        return "no backward (evaluation)"
    if chunked_loss.LOSS_SPLIT.get(trainer.loss_type) is None:
        return f"loss_type {trainer.loss_type}"
    if trainer.importance_sampling_level != "token":  # its logged ratios are means over completions, not tokens
        return f"importance_sampling_level {trainer.importance_sampling_level}"
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled or trainer.accelerator.unwrap_model(model) is not model:
        return "DeepSpeed/FSDP/DDP"
    if trainer.aux_loss_enabled or trainer.top_entropy_quantile < 1.0:  # attributes checked in coupling.py
        return "aux loss or entropy masking"
    if trainer._entropy_bonus_enabled:
        return "entropy bonus"
    unknown = [k for k, v in inputs.items() if v is not None and k not in chunked_loss.CHUNKABLE_KEYS]
    if unknown:
        return f"inputs {sorted(unknown)}"
    rows = inputs["prompt_ids"].size(0)
    for key, value in inputs.items():
        if key != "num_items_in_batch" and value is not None and (not torch.is_tensor(value) or value.size(0) != rows):
            return f"input {key} is not per row"
    return None
