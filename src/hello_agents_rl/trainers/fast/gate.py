"""Where the fast path applies: every decision of the fast trainer's in one place, each a reason or None.

A reason means TRL's own code for that part, recorded with the reason in `fast_path` (record.py). Decided once
per run: the switch, the versions and TRL's methods before TRL's `__init__` (`class_blocker`), the device and the
attributes TRL set after it (`run_blocker`). Per call: the sampler (`sampler_blocker`), the training and reference
forwards (`forward_blocker`) and the loss chunks (chunked_loss.chunk_blocker).
"""

from __future__ import annotations

from typing import Any

import torch

from hello_agents_rl.coupling import class_blocker as trl_class_blocker
from hello_agents_rl.coupling import instance_blocker
from hello_agents_rl.trainers.fast.shared_prefix import shared_prefix_blocker
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
    """Why TRL's own per-token log-prob forward must run on this call (None: one of ours may)."""
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        return "DeepSpeed/FSDP"
    if blocker := shared_prefix_blocker(unwrapped, compute_aux_loss, extra):
        return blocker
    if unwrapped is not model and torch.is_grad_enabled():
        return "DDP-wrapped model"  # two forwards per backward through DDP's reducer: not here
    return None
