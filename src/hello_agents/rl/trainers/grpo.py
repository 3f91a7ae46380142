"""Config -> trl.GRPOTrainer. The group, the KL penalty, the clip and the rewards are TRL's own."""

from __future__ import annotations

from typing import Any, Callable

from datasets import Dataset

from hello_agents.rl.config import TrainConfig
from hello_agents.rl.trainers.args import lora_for, trl_args


def build_grpo_trainer(
    cfg: TrainConfig,
    model: Any,
    tokenizer: Any,
    train_data: Dataset,
    eval_data: Dataset | None,
    reward_fn: Callable[..., list[float]],
    callbacks: list[Any],
    device: str,
    bf16: bool,
) -> Any:
    from trl import GRPOConfig

    from hello_agents.rl.trainers.fast import fast_grpo_trainer_class

    keep = ["prompt", "ground_truth"]  # the reward reads ground_truth; nothing else is needed
    # TRL's GRPOTrainer with a lean sampler and shared-prompt forwards (docs/performance.md); same loss
    return fast_grpo_trainer_class()(
        model=model,
        reward_funcs=[reward_fn],  # already adapted: see rewards.to_trl_reward
        args=GRPOConfig(**trl_args(cfg, device, bf16)),
        train_dataset=train_data.select_columns(keep),
        eval_dataset=eval_data.select_columns(keep) if eval_data is not None else None,
        processing_class=tokenizer,
        peft_config=lora_for(cfg),
        callbacks=callbacks,
    )
