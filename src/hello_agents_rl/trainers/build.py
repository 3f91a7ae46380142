"""Config -> a TRL trainer: SFTTrainer on prompt/completion pairs, or GRPOTrainer with our reward.

The group, the KL penalty, the clip and the loss are TRL's own; GRPO runs on FastGRPOTrainer, which is
TRL's trainer with leaner rollouts and forwards (docs/performance.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from datasets import Dataset

from hello_agents_rl.config import TrainConfig
from hello_agents_rl.trainers.args import lora_for, trl_args


def build_trainer(
    cfg: TrainConfig,
    model: Any,
    tokenizer: Any,
    train_data: Dataset,
    eval_data: Dataset | None,
    reward_fn: Callable[..., list[float]] | None,
    callbacks: list[Any],
    device: str,
    bf16: bool,
) -> Any:
    from hello_agents_rl.trainers.fast import fast_grpo_trainer_class, use_fast_dropout

    if cfg.algorithm == "grpo":
        from trl import GRPOConfig

        keep = ["prompt", "ground_truth"]  # the reward reads ground_truth; nothing else is needed
        trainer_class, args = fast_grpo_trainer_class(), GRPOConfig(**trl_args(cfg, device, bf16))
        extra = {"reward_funcs": [reward_fn]}  # already adapted: see rewards.to_trl_reward
        if cfg.tools or cfg.environment is not None:  # TRL's multi-turn tool loop, guarded tools (agentic/)
            from hello_agents_rl.trainers.tools import trainer_kwargs

            extra |= trainer_kwargs(cfg)
    else:
        from trl import SFTConfig, SFTTrainer

        keep = ["prompt", "completion"]  # loss on the completion only
        if cfg.tools:  # prompts list the tools as GRPO's do; transcripts' tool results get no loss
            from hello_agents_rl.trainers.tools import with_tool_column

            keep.append("tools")
            train_data, eval_data = (with_tool_column(d, cfg) if d is not None else None for d in (train_data, eval_data))
        trainer_class, args, extra = SFTTrainer, SFTConfig(**trl_args(cfg, device, bf16)), {}
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=train_data.select_columns(keep),
        eval_dataset=eval_data.select_columns(keep) if eval_data is not None else None,
        processing_class=tokenizer,
        peft_config=lora_for(cfg),
        callbacks=callbacks,
        **extra,
    )
    if cfg.algorithm == "sft":
        use_fast_dropout(trainer.model)  # GRPO's trainer does this itself
    keep_user_readme(trainer)
    return trainer


TRL_CARD_MARK = "It has been trained using [TRL]"  # a line of TRL's own model card template


def keep_user_readme(trainer: Any) -> None:
    """TRL writes a model card to output_dir/README.md at every checkpoint: never over a file of the user's."""
    readme = Path(trainer.args.output_dir) / "README.md"
    if readme.is_file() and TRL_CARD_MARK not in readme.read_text(encoding="utf-8", errors="replace"):
        trainer.create_model_card = lambda *args, **kwargs: None
