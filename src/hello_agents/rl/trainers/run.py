"""One training run, top to bottom: check the folder, load data and model, train, save, summarise."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from hello_agents.rl import data as data_layer
from hello_agents.rl.config import TrainConfig
from hello_agents.rl.models import load_model, load_tokenizer, pick_device_dtype
from hello_agents.rl.outputs import RESULTS, atomic_write_json, prepare_output_dir, save_final_model
from hello_agents.rl.rewards import build_reward
from hello_agents.rl.trainers.callbacks import ConsoleProgress, RunMonitor
from hello_agents.rl.trainers.doctor import Doctor


def train(cfg: TrainConfig) -> dict[str, Any]:
    from transformers.trainer_callback import ProgressCallback

    resume = prepare_output_dir(cfg.output_dir, cfg.resume_from_checkpoint, cfg.overwrite_output_dir)
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    started = time.time()
    device, dtype = pick_device_dtype()
    train_data = data_layer.load(cfg)
    eval_data = _eval_data(cfg) if cfg.eval_steps else None
    tokenizer = load_tokenizer(cfg.model_name, cfg.trust_remote_code)
    model = load_model(cfg.model_name, cfg.trust_remote_code, dtype)
    doctor = Doctor(cfg.learning_rate, cfg.kl_coef if cfg.algorithm == "grpo" else 0.0, cfg.max_new_tokens)
    monitor = RunMonitor(cfg.output_dir, doctor)
    bf16 = str(dtype) == "torch.bfloat16"
    if cfg.algorithm == "grpo":
        from hello_agents.rl.trainers.grpo import build_grpo_trainer

        reward = build_reward(cfg.reward_type, cfg.reward_config)
        trainer = build_grpo_trainer(cfg, model, tokenizer, train_data, eval_data, reward, [monitor], device, bf16)
    else:
        from hello_agents.rl.trainers.sft import build_sft_trainer

        trainer = build_sft_trainer(cfg, model, tokenizer, train_data, eval_data, [monitor], device, bf16)
    trainable, total = _parameter_counts(trainer.model)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(ConsoleProgress())
    output = trainer.train(resume_from_checkpoint=resume)
    model_path = save_final_model(trainer, cfg.output_dir, cfg.merge_lora) if trainer.is_world_process_zero() else ""
    result = summarise(cfg, trainer, output, monitor, len(train_data), model_path, time.time() - started)
    result.update(trainable_parameters=trainable, total_parameters=total)
    if trainer.is_world_process_zero():
        atomic_write_json(Path(cfg.output_dir) / RESULTS, result)
    return result


def _parameter_counts(model: Any) -> tuple[int, int]:
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def _eval_data(cfg: TrainConfig) -> Any:
    subset = cfg.model_copy(update={"max_samples": cfg.eval_samples})
    return data_layer.load(subset, split=cfg.eval_split)


def summarise(
    cfg: TrainConfig, trainer: Any, output: Any, monitor: RunMonitor, num_samples: int, model_path: str, runtime: float
) -> dict[str, Any]:
    logs = [entry for entry in monitor.history if "train_runtime" not in entry and not any(k.startswith("eval_") for k in entry)]
    rewards = [e["reward"] for e in logs if isinstance(e.get("reward"), (int, float))]
    kls = [e["kl"] for e in logs if isinstance(e.get("kl"), (int, float))]
    losses = [e["loss"] for e in logs if isinstance(e.get("loss"), (int, float))]
    result: dict[str, Any] = {
        "status": "completed",
        "algorithm": cfg.algorithm,
        "model_path": model_path,
        "output_dir": str(cfg.output_dir),
        "num_samples": num_samples,
        "num_epochs": cfg.num_epochs,
        "num_steps": trainer.state.global_step,
        "final_loss": losses[-1] if losses else output.training_loss,
        "train_runtime_s": round(runtime, 2),
        "diagnostics": list(monitor.doctor.findings),
        "use_lora": cfg.use_lora,
    }
    if cfg.algorithm == "grpo":
        result.update(
            average_reward=sum(rewards) / len(rewards) if rewards else math.nan,
            final_reward=rewards[-1] if rewards else math.nan,
            mean_kl=sum(kls) / len(kls) if kls else 0.0,
            final_kl=kls[-1] if kls else 0.0,
        )
    return result
