"""Config -> a TRL trainer: SFTTrainer on prompt/completion pairs, or GRPOTrainer with our reward.

The group, the KL penalty, the clip and the loss are TRL's own; GRPO runs on FastGRPOTrainer, which is
TRL's trainer with leaner rollouts and forwards (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets import Dataset

from hello_agents_rl.config import TrainConfig
from hello_agents_rl.outputs import final_model_dir
from hello_agents_rl.trainers.args import lora_for, trl_args
from hello_agents_rl.trainers.tool_run import trainer_kwargs, uses_tools, with_tool_column


def training_arguments(cfg: TrainConfig, device: str = "cpu", bf16: bool = False) -> Any:
    """trl.GRPOConfig or trl.SFTConfig. Built before the model loads: creating them sets up the process group and
    DeepSpeed's config, which transformers reads while loading (ZeRO-3's partitioned init, FSDP's rank-0 loading)."""
    from trl import GRPOConfig, SFTConfig

    return (GRPOConfig if cfg.algorithm == "grpo" else SFTConfig)(**trl_args(cfg, device, bf16))


def grpo_columns(rows: Dataset, task: Any = None) -> list[str]:
    """What GRPO's reward and environment read from a row: its ground truth, a reasoning-gym row's task_ref (its own
    checker), and the columns the run's task names (`Task.row_columns`: a verifiers task's index, OpenEnv's resets)."""
    wanted = ("task_ref", *(task.row_columns if task is not None else ()))
    return ["prompt", "ground_truth"] + [c for c in dict.fromkeys(wanted) if c in rows.column_names]


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
    args: Any = None,
    spec: Any = None,
) -> Any:
    """`args`: training_arguments(cfg, device, bf16), built before the model loaded (None: built here); `spec`:
    the hello-agents agent being trained (trainers/agent_run.py), if any."""
    from hello_agents_rl.trainers import fast

    args = args if args is not None else training_arguments(cfg, device, bf16)
    if cfg.algorithm == "grpo":
        keep = grpo_columns(train_data, cfg.task)
        trainer_class = grpo_trainer_class(cfg, spec)
        extra = {"reward_funcs": [reward_fn]}  # already adapted: see rewards.to_trl_reward
        if cfg.dynamic_sampling != "off":
            extra |= {"dynamic_sampling": cfg.dynamic_sampling, "dynamic_sampling_rounds": cfg.dynamic_sampling_rounds}
        if uses_tools(cfg):  # TRL's multi-turn tool loop, guarded tools (agentic/)
            extra |= trainer_kwargs(cfg, spec)
    else:
        from trl import SFTTrainer

        keep = ["prompt", "completion"]  # loss on the completion only
        if uses_tools(cfg):  # prompts list the tools as GRPO's do; transcripts' tool results get no loss
            keep.append("tools")
            train_data, eval_data = (with_tool_column(d, cfg, spec) if d is not None else None
                                     for d in (train_data, eval_data))
        trainer_class, extra = SFTTrainer, {}
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
        fast.use_fast_dropout(trainer.model)  # GRPO's trainer does this itself
    keep_user_readme(trainer)
    name_local_base(trainer, str(cfg.model_name), final_model_dir(str(cfg.output_dir), cfg.use_lora, cfg.merge_lora))
    return trainer


TRL_CARD_MARK = "It has been trained using [TRL]"  # a line of TRL's own model card template


def grpo_trainer_class(cfg: TrainConfig, spec: Any = None) -> type:
    """The run's GRPO trainer, composed here and nowhere else. Each part is a GRPOTrainer subclass that adds one
    thing, and the class is named for its parts (tracebacks show what ran):

        FinishEndsTheRollout  a ReActAgent's Finish ends the rollout          (trainers/agent_run.py)
        StepCredit            each step also credited against its state's     (trainers/step_credit.py)
        DynamicSampling       groups whose rewards are all equal left out     (trainers/dynamic_sampling.py)
        FastGRPOTrainer       the fast path where verified, else TRL's code   (trainers/fast/trainer.py)
    """
    from hello_agents_rl.trainers import fast
    from hello_agents_rl.trainers.agent_run import FinishEndsTheRollout

    parts: list[type] = []
    attributes: dict[str, Any] = {}
    if spec is not None and spec.finish_tool:
        parts.append(FinishEndsTheRollout)
        attributes["finish_tool"] = spec.finish_tool
    if cfg.step_credit:
        from hello_agents_rl.trainers.step_credit import StepCredit

        parts.append(StepCredit)
        attributes["step_credit"] = cfg.step_credit
    if cfg.dynamic_sampling != "off":
        from hello_agents_rl.trainers.dynamic_sampling import DynamicSampling

        parts.append(DynamicSampling)
    if not parts:
        return fast.FastGRPOTrainer
    base = fast.FastGRPOTrainer
    name = "".join(part.__name__ for part in parts) + base.__name__
    return type(name, (*parts, base), {"__module__": __name__, **attributes})


def keep_user_readme(trainer: Any) -> None:
    """TRL writes a model card to output_dir/README.md at every checkpoint: never over a file of the user's."""
    readme = Path(trainer.args.output_dir) / "README.md"
    if readme.is_file() and TRL_CARD_MARK not in readme.read_text(encoding="utf-8", errors="replace"):
        trainer.create_model_card = lambda *args, **kwargs: None


def name_local_base(trainer: Any, model_name: str, saved: Path) -> None:
    """TRL's card names a hub id only, and a local starting model as "[None](https://huggingface.co/None)", with a
    quick start that loads model="None": the card names the folder the run started from, and the model it saves."""
    create = trainer.create_model_card

    def create_model_card(*args: Any, **kwargs: Any) -> None:
        create(*args, **kwargs)
        readme = Path(trainer.args.output_dir) / "README.md"
        if not trainer.is_world_process_zero() or not readme.is_file():
            return
        text = readme.read_text(encoding="utf-8")
        mended = text.replace("[None](https://huggingface.co/None)", f"the local model `{model_name}`").replace(
            'model="None"', f'model="{saved}"')
        if mended != text:
            readme.write_text(mended, encoding="utf-8")

    trainer.create_model_card = create_model_card
