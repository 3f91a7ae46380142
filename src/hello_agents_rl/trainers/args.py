"""The one mapping from our config keys to TRL's: every parameter the book names lands on the field it drives."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hello_agents_rl.compat import checkpointing_argument
from hello_agents_rl.config import TrainConfig
from hello_agents_rl.config.loss import COMPANIONS
from hello_agents_rl.models import lora_config
from hello_agents_rl.trainers.tool_run import uses_tools

TRACKIO_PROJECT = "hello-agents-rl"  # `trackio show --project hello-agents-rl`


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
        **checkpointing_argument(cfg.gradient_checkpointing),  # its name moved in transformers 5.18
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
    if "trackio" in report_targets(cfg):  # local only: one project, one run per output folder (resume continues it)
        common.update(project=TRACKIO_PROJECT, run_name=str(Path(cfg.output_dir).resolve()), trackio_static_space_id=False)
    if cfg.algorithm == "sft":
        return common | {
            "per_device_train_batch_size": cfg.batch_size,
            "max_length": cfg.max_length,
            "completion_only_loss": True,  # learn the answer, not the question
            "assistant_only_loss": uses_tools(cfg),  # tool transcripts: the assistant's tokens, never tool results
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
        "epsilon_high": cfg.clip_range_high,
        "scale_rewards": cfg.scale_rewards,
        "loss_type": cfg.loss_type,
        "importance_sampling_level": cfg.importance_sampling_level,
        "mask_truncated_completions": cfg.mask_truncated_completions,
        "top_entropy_quantile": cfg.top_entropy_quantile,
        **{key: getattr(cfg, key) for keys in COMPANIONS.values() for key in keys},
        # TRL refuses an eval batch that is not whole groups (its default, 8, is not one for 3 or 5 generations)
        "per_device_eval_batch_size": cfg.batch_size * cfg.num_generations,
        "steps_per_generation": cfg.effective_steps_per_generation,
        "chat_template_kwargs": {"enable_thinking": cfg.enable_thinking},
        "log_completions": False,
        # TRL's tool loop: at most this many tool rounds per rollout (None: no tools, no loop)
        "max_tool_calling_iterations": cfg.max_tool_turns if uses_tools(cfg) else None,  # our callback writes completions.jsonl instead of a rich table
        "use_vllm": cfg.use_vllm,
        "vllm_mode": cfg.vllm_mode,
        "vllm_gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
        # None here reserves KV cache for the model's whole context (Qwen3: 40,960 tokens): run.py fills it in
        "vllm_max_model_length": cfg.vllm_max_model_length,
        "vllm_server_host": cfg.vllm_server_host,
        "vllm_server_port": cfg.vllm_server_port,
    }


def vllm_context_length(cfg: TrainConfig, tokenizer: Any, rows: Any) -> int:
    """The longest prompt of the data, chat template applied (tools' schemas too), plus max_new_tokens."""
    tools = None
    if cfg.tools:
        from transformers.utils import get_json_schema

        from hello_agents_rl.rollouts.tools import resolve_tools

        tools = [get_json_schema(tool) for tool in resolve_tools(cfg.tools)]
    texts = [tokenizer.apply_chat_template(row["prompt"], tools=tools, tokenize=False, add_generation_prompt=True,
                                           enable_thinking=cfg.enable_thinking) for row in rows]
    return max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]) + cfg.max_new_tokens


def lora_for(cfg: TrainConfig) -> Any:
    """The PEFT LoraConfig TRL applies to the model, or None for full fine-tuning."""
    if not cfg.use_lora:
        return None
    return lora_config(cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
