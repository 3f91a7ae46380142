"""The one mapping from our config keys to TRL's: every parameter the book names lands on the field it drives."""

from __future__ import annotations

import os
from typing import Any

from hello_agents_rl.config import TrainConfig
from hello_agents_rl.models import lora_config


def report_targets(cfg: TrainConfig) -> list[str]:
    targets = [t for t in cfg.report_to if t != "none"]
    if os.environ.get("WANDB_PROJECT") and "wandb" not in targets and "none" not in cfg.report_to:
        targets.append("wandb")  # the book: setting WANDB_PROJECT is how a reader turns wandb on
    return targets


def trl_args(cfg: TrainConfig, device: str = "cpu", bf16: bool = False) -> dict[str, Any]:
    """TrainConfig -> keyword arguments of trl.GRPOConfig / trl.SFTConfig (README: 'Parameter mapping')."""
    common: dict[str, Any] = {
        "output_dir": cfg.output_dir,
        "num_train_epochs": cfg.num_epochs,
        "max_steps": cfg.max_steps,
        "learning_rate": cfg.learning_rate,
        "warmup_steps": cfg.warmup_ratio,  # transformers 5 dropped warmup_ratio; a value < 1 is a ratio
        "lr_scheduler_type": cfg.lr_scheduler_type,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "max_grad_norm": cfg.max_grad_norm,
        "activation_checkpointing": cfg.gradient_checkpointing,  # transformers 5's name; the old one is deprecated
        "save_strategy": "steps",
        "save_steps": cfg.save_steps,
        "save_total_limit": cfg.save_total_limit,
        "logging_steps": cfg.logging_steps,
        "logging_first_step": True,
        "report_to": report_targets(cfg) or "none",
        "seed": cfg.seed,
        "data_seed": cfg.seed,
        "use_cpu": device == "cpu",
        # mixed precision: bf16 autocast, or on GPUs without bf16 fp16 autocast with a GradScaler (fp32 weights)
        "bf16": bf16,
        "fp16": device == "cuda" and not bf16,
        "model_init_kwargs": None,
        "trust_remote_code": cfg.trust_remote_code,
        "ddp_find_unused_parameters": False,  # every trainable weight gets a gradient; skips DDP's extra graph walk
    }
    if cfg.eval_steps:
        common.update(eval_strategy="steps", eval_steps=cfg.eval_steps)
    if cfg.algorithm == "sft":
        return common | {
            "per_device_train_batch_size": cfg.batch_size,
            "max_length": cfg.max_length,
            "completion_only_loss": True,  # learn the answer, not the question
            "assistant_only_loss": bool(cfg.tools),  # tool transcripts: the assistant's tokens, never tool results
            "packing": False,
        }
    return common | {
        # TRL counts completions per device batch; ours counts prompts, each with a group of completions
        "per_device_train_batch_size": cfg.batch_size * cfg.num_generations,
        "num_generations": cfg.num_generations,
        "max_completion_length": cfg.max_new_tokens,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "beta": cfg.kl_coef,
        "epsilon": cfg.clip_range,
        "scale_rewards": cfg.scale_rewards,
        "loss_type": cfg.loss_type,
        "steps_per_generation": cfg.effective_steps_per_generation,
        "chat_template_kwargs": {"enable_thinking": cfg.enable_thinking},
        "log_completions": False,
        # TRL's tool loop: at most this many tool rounds per rollout (None: no tools, no loop)
        "max_tool_calling_iterations": cfg.max_tool_turns if cfg.tools or cfg.environment is not None else None,  # our callback writes completions.jsonl instead of a rich table
        "use_vllm": cfg.use_vllm,
        "vllm_mode": cfg.vllm_mode,
        "vllm_gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
        "vllm_server_host": cfg.vllm_server_host,
        "vllm_server_port": cfg.vllm_server_port,
    }


def lora_for(cfg: TrainConfig) -> Any:
    """The PEFT LoraConfig TRL applies to the model, or None for full fine-tuning."""
    if not cfg.use_lora:
        return None
    return lora_config(cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
