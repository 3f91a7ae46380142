"""Config -> trl.SFTTrainer on prompt/completion chat pairs (loss on the answer only)."""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from hello_agents.rl.config import TrainConfig
from hello_agents.rl.trainers.args import lora_for, trl_args


def build_sft_trainer(
    cfg: TrainConfig,
    model: Any,
    tokenizer: Any,
    train_data: Dataset,
    eval_data: Dataset | None,
    callbacks: list[Any],
    device: str,
    bf16: bool,
) -> Any:
    from trl import SFTConfig, SFTTrainer

    keep = ["prompt", "completion"]
    return SFTTrainer(
        model=model,
        args=SFTConfig(**trl_args(cfg, device, bf16)),
        train_dataset=train_data.select_columns(keep),
        eval_dataset=eval_data.select_columns(keep) if eval_data is not None else None,
        processing_class=tokenizer,
        peft_config=lora_for(cfg),
        callbacks=callbacks,
    )
