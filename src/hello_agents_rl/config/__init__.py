"""Every action's parameters: validated, typed, with one documented default each.

The pydantic models below are the single source of truth: the tool's parameter schema, the
CLI help and the README table are generated from them (`describe_fields`).
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hello_agents_rl.errors import ConfigError, did_you_mean

def local_path_problem(name: str) -> str | None:
    """Why a model path that looks local cannot be used (it does not exist), or None."""
    if looks_like_local_path(name) and not os.path.exists(os.path.expanduser(name)):
        return f"local path {name!r} does not exist; check the path (a run's output_dir, its model/ folder or a .gguf file)"
    return None


def writable_problem(value: str, kind: str = "folder") -> str | None:
    """Why `value` cannot be written as a folder or a file, or None; touches nothing that stays."""
    if not value.strip():
        return "is empty; give a path"
    path = Path(value).expanduser().resolve()
    if kind == "file" and path.is_dir():
        return f"{value} is a folder; give a file path such as {Path(value) / 'details.jsonl'}"
    if kind == "folder" and path.exists() and not path.is_dir():
        return f"{value} is a file; give a folder path"
    existing = next(p for p in [path if kind == "folder" else path.parent, *path.parents] if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, so nothing can be created below it"
    try:  # a real probe: os.access says yes to root even on read-only mounts like /proc
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError:
        return f"{existing} is not a writable folder; choose a path you can write to"
    return None


def _require(problem: str | None) -> None:
    if problem:
        raise ValueError(problem)


def _checked(problem: Callable[[str], str | None]) -> AfterValidator:
    """A field validator from a `value -> what is wrong, or None` check."""

    def check(value: str) -> str:
        _require(problem(value))
        return value

    return AfterValidator(check)


ModelSource = Annotated[str, _checked(local_path_problem)]  # a hub id, or a path that exists
WritableFolder = Annotated[str, _checked(writable_problem)]
WritableFile = Annotated[str, _checked(lambda value: writable_problem(value, "file"))]


# Splits of the named datasets; a single file or datasets.Dataset is the whole data under either name.
SPLITS: dict[str, tuple[str, ...]] = {"gsm8k": ("train", "test"), "arithmetic": ("train", "test")}
SINGLE_SOURCE_SPLITS = ("train", "test")


def split_problem(dataset: Any, split: str, key: str = "split") -> str | None:
    """Why `split` is not a split of `dataset`, listing the ones it has; None when it is."""
    if isinstance(dataset, dict):  # a datasets.DatasetDict: its own splits
        known = tuple(dataset)
    else:
        known = SPLITS.get(dataset, SINGLE_SOURCE_SPLITS) if isinstance(dataset, str) else SINGLE_SOURCE_SPLITS
    if split in known:
        return None
    return f"`{key}`: {split!r} is not a split of this dataset{did_you_mean(split, list(known))} (it has: {', '.join(known)})"


def looks_like_local_path(name: str) -> bool:
    """A hub id is `org/name` (one slash, no leading dot); anything else is a path on disk."""
    return (
        name.startswith((".", "/", "~"))
        or "\\" in name
        or name.count("/") > 1
        or name.endswith(".gguf")
        or os.path.exists(name)
    )


@dataclass
class Thresholds:
    """The training doctor's thresholds (`doctor_thresholds`); defaults from the book's section 11.4.3."""

    kl_high: float = 0.5  # the book: above 0.5 the policy drifts
    kl_low: float = 0.001  # the book: below 0.001 the policy barely moves
    patience: int = 3  # consecutive logs a condition must hold
    warmup_logs: int = 2  # KL is 0 at the start by construction; judge "too low" only after this
    flat_window: int = 8
    flat_tolerance: float = 0.01
    collapse_drop: float = 0.2
    slide_window: int = 6  # logs the reward's trend is fitted over (a slow slide, not one bad log)
    slide_drop: float = 0.1  # the fitted fall across that window that counts as a slide
    truncation_rate: float = 0.5
    format_drop: float = 0.2
    tool_failure_rate: float = 0.3  # tools: above this share of failed calls for `patience` logs
    turns_exhausted_rate: float = 0.3  # tools: above this share of rollouts ending on an unanswered call


class _Base(BaseModel):
    # allow_inf_nan=False: "inf"/"nan" (numbers or strings) are refused for every float key
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, validate_assignment=True, allow_inf_nan=False)

    action: str = Field("train", description="What to do: one of the actions in hello_agents_rl.workflows.actions.ACTIONS.")


class DataConfig(_Base):
    dataset: Any = Field(
        "gsm8k",
        description="`gsm8k`, `arithmetic` (the embedded synthetic task), a .jsonl/.csv file, or a datasets.Dataset.",
    )
    dataset_path: str | None = Field(
        None,
        description="Folder holding GSM8K's train.jsonl/test.jsonl (offline); else $HELLO_AGENTS_GSM8K, else the hub.",
    )
    split: str = Field("train", description="Dataset split to train on (GSM8K: train/test).")
    question_column: str = Field("question", description="Column holding the question in a custom dataset.")
    answer_column: str = Field("answer", description="Column holding the answer in a custom dataset.")
    max_samples: int | None = Field(
        None, ge=1, description="Use at most this many examples (a seeded shuffle, not the first N); None = all."
    )
    system_prompt: str | None = Field(
        None, description="System message for every prompt; None = the dataset's default, '' = none."
    )
    seed: int = Field(42, ge=0, description="Seed for data shuffling, sampling and initialisation.")

    @model_validator(mode="after")
    def _split_exists(self) -> "DataConfig":
        _require(split_problem(self.dataset, self.split))
        return self


class ModelConfig(_Base):
    model_name: ModelSource = Field(
        "Qwen/Qwen3-0.6B",
        description="Hub id, local model folder (a full model or a LoRA adapter), or a .gguf file.",
    )
    trust_remote_code: bool = Field(
        False, description="Run the model repository's own Python code. Off unless you trust the source."
    )
    enable_thinking: bool = Field(
        False,
        description="Qwen3 thinking mode in the chat template. Off: long <think> blocks would be cut by max_new_tokens.",
    )



class TrainConfig(DataConfig, ModelConfig):
    """`action: train` -- SFT or GRPO. Defaults follow section 11.4's recommendations."""

    algorithm: Literal["sft", "grpo"] = Field("grpo", description="sft (imitation) or grpo (reinforcement learning).")
    output_dir: WritableFolder | None = Field(None, description="Where the model, checkpoints and logs go; None = ./models/<algorithm>_model.")
    overwrite_output_dir: bool = Field(False, description="Allow training into a folder that holds a finished run.")

    # training
    num_epochs: float = Field(3, gt=0, description="Passes over the training prompts.")
    max_steps: int = Field(-1, description="If > 0, stop after this many optimizer steps (overrides num_epochs).")
    batch_size: int = Field(
        4, ge=1, description="Prompts (questions) per device per step; each gets num_generations completions."
    )
    gradient_accumulation_steps: int = Field(1, ge=1, description="Micro-batches accumulated per optimizer step.")
    learning_rate: float | None = Field(
        None,
        gt=0,
        description="Peak learning rate; None = 1e-5 for GRPO (the book: 1e-6..1e-5), 2e-4 for SFT with LoRA, 2e-5 without.",
    )
    warmup_ratio: float = Field(0.1, ge=0, lt=1, description="Fraction of steps spent warming the learning rate up.")
    lr_scheduler_type: str = Field("linear", description="transformers scheduler name (linear, cosine, constant...).")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory (the book's OOM advice).")

    # GRPO
    num_generations: int = Field(4, ge=2, description="Completions per prompt: the group (the book: 4-8).")
    max_new_tokens: int = Field(256, ge=1, description="Longest completion in tokens (the book: 256-512).")
    temperature: float = Field(0.8, gt=0, description="Sampling temperature while training (the book: 0.7-1.0).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling while training.")
    kl_coef: float = Field(0.05, ge=0, description="KL penalty beta against the reference model (the book: 0.05-0.1).")
    clip_range: float = Field(0.2, gt=0, lt=1, description="PPO-style ratio clip epsilon (the book: 0.2).")
    scale_rewards: Literal["none", "group", "batch"] = Field(
        "none", description="Advantage = r - group mean (none, as the book defines it) or divided by the std."
    )
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = Field(
        "dapo", description="How token losses are averaged (TRL's loss_type)."
    )
    steps_per_generation: int | None = Field(
        None, ge=1, description="Optimizer steps per generation round; None = gradient_accumulation_steps."
    )
    use_vllm: bool = Field(False, description="Generate with vLLM (GPU only; pip install 'hello-agents-rl[vllm]').")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate", description="colocate: vLLM shares the training GPUs; server: a separate `trl vllm-serve`."
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="Fraction of GPU memory vLLM may take in colocate mode."
    )
    vllm_server_host: str = Field("0.0.0.0", description="Host of the `trl vllm-serve` server (server mode).")
    vllm_server_port: int = Field(8000, ge=1, le=65535, description="Port of the `trl vllm-serve` server.")
    log_completions_steps: int = Field(
        0, ge=0, description="Every N steps write sampled completions to completions.jsonl (0 = off)."
    )

    kl_target: tuple[float, float] | None = Field(
        None, description="Adaptive KL: adjust kl_coef during training to keep KL in [low, high], e.g. [0.01, 0.1]."
    )

    # rewards
    reward_type: Any = Field(
        "accuracy", description="accuracy, length_penalty, step, combined, or a Python callable."
    )
    reward_config: dict[str, Any] = Field(
        default_factory=dict, description="Reward parameters, e.g. target_length, step_bonus, components."
    )

    # agentic RL: multi-turn tool use on TRL's tool loop (docs/agentic.md)
    tools: list[Any] = Field(
        default_factory=list,
        description="Tools the model may call: built-in names (calculator, python), 'pkg.module:function' or callables.",
    )
    environment: Any = Field(
        None, description="GRPO: a stateful class or 'pkg.module:Class' (reset(**row); public methods are its tools)."
    )
    max_tool_turns: int = Field(4, ge=1, description="Most tool-calling rounds per rollout (TRL's max_tool_calling_iterations).")
    tool_reward: dict[str, float] = Field(
        default_factory=dict,
        description="Tool shaping: failed_call_penalty, call_bonus; bounded so a wrong answer never outscores a right one.",
    )

    # LoRA
    use_lora: bool = Field(True, description="Train a LoRA adapter instead of all weights.")
    lora_rank: int = Field(16, ge=1, description="LoRA rank r.")
    lora_alpha: int = Field(32, ge=1, description="LoRA scaling alpha.")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the LoRA branch.")
    lora_target_modules: str | list[str] = Field("all-linear", description="Modules LoRA wraps.")
    merge_lora: bool = Field(
        True,
        description="Save the LoRA adapter merged into its base as a full model in output_dir/model "
        "(loadable by plain transformers); the adapter itself always goes to output_dir/adapter.",
    )

    # SFT
    max_length: int = Field(1024, ge=8, description="SFT: longest tokenized example.")

    # checkpoints and monitoring
    save_steps: int = Field(500, ge=1, description="Save a checkpoint every N optimizer steps.")
    save_total_limit: int | None = Field(None, ge=1, description="Keep at most this many checkpoints.")
    logging_steps: int = Field(10, ge=1, description="Log a line, metrics.jsonl and TensorBoard every N steps.")
    report_to: list[str] = Field(
        default_factory=lambda: ["tensorboard"],
        description="tensorboard, wandb, or none; wandb is added when WANDB_PROJECT is set.",
    )
    resume_from_checkpoint: bool | str | None = Field(
        None, description="true = the latest checkpoint in output_dir, or a checkpoint path."
    )
    doctor_thresholds: dict[str, int | float] = Field(
        default_factory=dict,
        description="Override the training doctor's thresholds, e.g. {kl_high: 0.3, patience: 5}; defaults are the book's.",
    )
    oom_backoff: bool = Field(
        True, description="On CUDA out-of-memory: shrink as the book advises, resume from the last checkpoint."
    )
    skip_nonfinite_steps: bool = Field(False, description="Skip an update with a NaN/inf gradient instead of stopping.")
    reward_failure_value: float | None = Field(
        None,
        description="Reward for a completion whose custom reward raised or returned None/NaN; None = left out of its "
        "group's mean and std with advantage 0 (as TRL does with None).",
    )
    eval_steps: int | None = Field(None, ge=1, description="Evaluate eval_samples from eval_split every N steps.")
    eval_split: str = Field("test", description="Split used by eval_steps.")
    eval_samples: int = Field(64, ge=1, description="Questions in the periodic evaluation.")

    @field_validator("report_to", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("report_to")
    @classmethod
    def _known_reporters(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - {"tensorboard", "wandb", "none"})
        if unknown:
            raise ValueError(f"unknown reporter {unknown}; use tensorboard, wandb or none")
        return value


    @field_validator("lr_scheduler_type")
    @classmethod
    def _known_scheduler(cls, value: str) -> str:
        from transformers.trainer_utils import SchedulerType  # an enum; importing it loads no model code

        known = [kind.value for kind in SchedulerType]
        if value not in known:
            raise ValueError(f"unknown scheduler{did_you_mean(value, known)} (known: {', '.join(known)})")
        return value

    @model_validator(mode="after")
    def _resolve(self) -> "TrainConfig":
        if self.learning_rate is None:
            default = 1e-5 if self.algorithm == "grpo" else (2e-4 if self.use_lora else 2e-5)
            object.__setattr__(self, "learning_rate", default)
        if self.output_dir is None:
            object.__setattr__(self, "output_dir", f"./models/{self.algorithm}_model")
        _require(_overlap_problem(self.model_name, self.output_dir))
        if self.eval_steps:
            _require(split_problem(self.dataset, self.eval_split, "eval_split"))
        _check_reward(self.reward_type, self.reward_config)
        _check_agentic(self.tools, self.environment, self.algorithm, self.tool_reward, self.max_tool_turns,
                       self.reward_type, self.reward_config)
        if self.use_vllm:
            _check_vllm()
        unknown = sorted(set(self.doctor_thresholds) - set(Thresholds.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"`doctor_thresholds.{unknown[0]}`: unknown threshold"
                f"{did_you_mean(unknown[0], list(Thresholds.__dataclass_fields__))} "
                f"(known: {', '.join(Thresholds.__dataclass_fields__)})"
            )
        if self.kl_target is not None:
            low, high = self.kl_target
            if not 0 <= low < high:
                raise ValueError(f"`kl_target`: need 0 <= low < high, got {list(self.kl_target)}; e.g. [0.01, 0.1]")
            if self.kl_coef == 0:
                raise ValueError("`kl_target`: adaptive KL needs a starting kl_coef > 0 (e.g. 0.05)")
        return self

    @property
    def effective_steps_per_generation(self) -> int:
        return self.steps_per_generation or self.gradient_accumulation_steps


def _overlap_problem(model_name: str, output_dir: str) -> str | None:
    """A run replaces files in output_dir: it must not hold (or sit inside) the model being trained."""
    if not looks_like_local_path(model_name):
        return None
    source, out = Path(model_name).expanduser().resolve(), Path(output_dir).expanduser().resolve()
    if source == out or source in out.parents:
        return f"`output_dir`: {output_dir} is inside model_name {model_name}; write the new run to a folder of its own"
    if out in source.parents:
        return (f"`model_name`: {model_name} lies inside output_dir {output_dir}, whose files the run replaces; "
                "write the new run to another output_dir")
    return None


class _EvalOptions(DataConfig):
    split: str = Field("test", description="Split to evaluate.")
    max_samples: int | None = Field(200, ge=1, description="Questions to evaluate (seeded subset); None = all.")
    max_new_tokens: int = Field(256, ge=1, description="Longest answer in tokens.")
    batch_size: int = Field(32, ge=1, description="Questions generated together.")
    temperature: float = Field(0.0, ge=0, description="0 = greedy (accuracy); > 0 samples (needed for pass@k).")
    k: int = Field(1, ge=1, description="Samples per question for pass@k (sampled at temperature, default 1.0).")
    trust_remote_code: bool = Field(False, description="Run the model repository's own Python code.")
    enable_thinking: bool = Field(False, description="Qwen3 thinking mode in the chat template.")
    tools: list[Any] = Field(default_factory=list, description="Evaluate with these tools (as in train): the same rollouts.")
    environment: Any = Field(None, description="Evaluate with this environment class (as in train).")
    max_tool_turns: int = Field(4, ge=1, description="Most tool-calling rounds per question.")

    @model_validator(mode="after")
    def _agentic(self) -> "_EvalOptions":
        _check_agentic(self.tools, self.environment)
        return self


class EvaluateConfig(_EvalOptions):
    """`action: evaluate` -- accuracy and friends of one model on a dataset split."""

    model_path: ModelSource = Field(..., description="Model folder (full model or LoRA adapter), run output_dir, hub id, or .gguf.")
    return_details: bool = Field(False, description="Include per-question details in the result.")
    details_path: WritableFile | None = Field(None, description="Write per-question details to this JSONL file.")



class CompareConfig(_EvalOptions):
    """`action: compare` -- several models on the same questions, as one table."""

    models: dict[str, str] = Field(..., description="Name -> model, e.g. {base: Qwen/Qwen3-0.6B, sft: ./models/sft}.")
    report_path: WritableFile | None = Field(None, description="Also write the comparison as markdown to this file.")

    @field_validator("models")
    @classmethod
    def _every_model_exists(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("no models given; e.g. {base: Qwen/Qwen3-0.6B, grpo: ./models/grpo_model}")
        for name, path in value.items():
            if problem := local_path_problem(path):
                raise ValueError(f"model {name!r}: {problem}")
        return value



class ExportConfig(_Base):
    """`action: export` -- merge a LoRA adapter into its base and save a plain transformers model with a card."""

    model_path: ModelSource = Field(..., description="A run's output_dir, its adapter/ folder, or any adapter folder.")
    output_dir: WritableFolder = Field(..., description="A new or empty folder for the merged model (safetensors) and its README.md.")
    overwrite_output_dir: bool = Field(
        False, description="Replace an earlier export in output_dir (only the files that export wrote; nothing else)."
    )
    trust_remote_code: bool = Field(False, description="Run the model repository's own Python code.")



class PipelineConfig(TrainConfig):
    """`action: pipeline` -- evaluate the base, SFT, evaluate, GRPO from the SFT model, evaluate, report.

    Any train key at the top level applies to both stages; `sft` and `grpo` override it per stage.
    """

    output_dir: WritableFolder | None = Field("./models/pipeline", description="Root folder: sft/, grpo/, training_results.json, report.")
    sft: dict[str, Any] = Field(default_factory=dict, description="SFT parameters (any train key), over the shared ones.")
    grpo: dict[str, Any] = Field(default_factory=dict, description="GRPO parameters (any train key), over the shared ones.")
    evaluation: dict[str, Any] = Field(
        default_factory=dict, description="Evaluation parameters (split, max_samples, max_new_tokens, batch_size...)."
    )

    def stage(self, algorithm: str, model_name: str | None = None) -> "TrainConfig":
        """One stage's full, validated TrainConfig: the keys the user set at the top, then the stage's own."""
        shared = self.model_dump(exclude_unset=True, exclude={"action", "algorithm", "sft", "grpo", "evaluation"})
        overrides = self.sft if algorithm == "sft" else self.grpo
        params = {**shared, "output_dir": str(Path(self.output_dir) / algorithm), **overrides, "algorithm": algorithm}
        if model_name is not None:
            params["model_name"] = model_name
        return _nested(TrainConfig, params, algorithm)

    def evaluation_config(self, model_path: str) -> "EvaluateConfig":
        return evaluation_of(self.model_dump(exclude_unset=True), self.evaluation, model_path)

    @model_validator(mode="after")
    def _stages_are_valid(self) -> "PipelineConfig":
        self.stage("sft")
        self.stage("grpo", model_name=self.model_name)  # the SFT model does not exist yet: check the rest
        self.evaluation_config(self.model_name)
        return self


# The train keys an evaluation of the trained model inherits: its data and prompt, code trust, and tool use.
EVALUATION_KEYS = (set(DataConfig.model_fields) - {"action", "split", "max_samples"}) | {
    "trust_remote_code", "enable_thinking", "tools", "max_tool_turns",
}


def evaluation_of(train_keys: dict[str, Any], evaluation: dict[str, Any], model_path: str) -> "EvaluateConfig":
    """How pipeline and search evaluate a model they trained: 200 held-out questions (the test split) with the
    training's data, prompt and tool keys, then the user's `evaluation` keys over them."""
    shared = {k: v for k, v in train_keys.items() if k in EVALUATION_KEYS}
    params = {"max_samples": 200, **shared, "action": "evaluate", "split": "test", **evaluation}
    return _nested(EvaluateConfig, {**params, "model_path": model_path}, "evaluation")


def _nested(model: type[BaseModel], params: dict[str, Any], section: str) -> Any:
    unknown = [key for key in params if key not in model.model_fields]
    if unknown:
        raise ValueError(f"`{section}.{unknown[0]}`: unknown parameter{did_you_mean(unknown[0], list(model.model_fields))}")
    try:
        return model(**params)
    except ValidationError as error:
        raise ValueError(f"`{section}`: " + _first_error(error, model)) from None


class LoadDatasetConfig(DataConfig):
    """`action: load_dataset` -- size, columns and a formatted sample."""


def _check_reward(reward_type: Any, reward_config: dict[str, Any]) -> None:
    from hello_agents_rl.rewards import build_reward  # the reward layer validates its own parameters

    build_reward(reward_type, reward_config)


def _check_agentic(tools: list[Any], environment: Any, algorithm: str | None = None, tool_reward: dict | None = None,
                   max_tool_turns: int = 1, reward_type: Any = None, reward_config: dict | None = None) -> None:
    if not tools and environment is None and not tool_reward:
        return
    from hello_agents_rl.rollouts.checks import check_agentic  # resolves and checks tools without loading a model
    from hello_agents_rl.rewards import build_reward

    reward = build_reward(reward_type, reward_config) if reward_type is not None else None
    check_agentic(tools, environment, algorithm, tool_reward, max_tool_turns, reward)


def _check_vllm() -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ValueError("`use_vllm`: vLLM is not installed; pip install 'hello-agents-rl[vllm]' or set use_vllm: false")
    import torch

    if not torch.cuda.is_available():
        raise ValueError("`use_vllm`: vLLM needs a CUDA GPU and none is visible; set use_vllm: false to generate with transformers")


class CreateRewardConfig(_Base):
    """`action: create_reward` -- build a reward and score completions with it."""

    reward_type: Any = Field("accuracy", description="accuracy, length_penalty, step, combined, or a callable.")
    reward_config: dict[str, Any] = Field(default_factory=dict, description="Reward parameters.")
    completions: list[str] = Field(default_factory=list, description="Completions to score.")
    ground_truth: Any = Field(None, description="One value for all completions, or a list with one per completion.")
    num_generations: int | None = Field(None, ge=1, description="If given, also return group advantages.")
    reward_failure_value: float | None = Field(
        None, description="Score of a completion whose custom reward failed, as in training; None = no score (left out)."
    )

    @model_validator(mode="after")
    def _reward_is_valid(self) -> "CreateRewardConfig":
        _check_reward(self.reward_type, self.reward_config)
        n = len(self.completions)
        if isinstance(self.ground_truth, list) and len(self.ground_truth) != n:
            raise ValueError(f"`ground_truth`: {len(self.ground_truth)} values for {n} completions; "
                             "give one value, or one per completion")
        if self.num_generations and n % self.num_generations:
            raise ValueError(f"`num_generations`: {n} completions do not split into groups of {self.num_generations}; "
                             "give a multiple of num_generations completions")
        return self


def _first_error(error: ValidationError, model: type[BaseModel]) -> str:
    details = error.errors()[0]
    message = details["msg"].removeprefix("Value error, ")
    if not details["loc"]:  # a whole-model check (the reward) already names its key
        return message
    key = ".".join(str(part) for part in details["loc"])
    given = details.get("input")
    shown = "" if isinstance(given, dict) else f" (got {given!r})"
    field = model.model_fields.get(str(details["loc"][0]))
    hint = f". {details['loc'][0]}: {field.description}" if field is not None and field.description else ""
    return f"`{key}`: {message}{shown}{hint}"


class SearchConfig(_Base):
    """`action: search` -- the book's section 11.6 on Optuna: every trial is a full training run in its own folder."""

    base: dict[str, Any] = Field(default_factory=dict, description="Train keys every trial shares (any train key).")
    space: dict[str, Any] = Field(
        default_factory=lambda: {
            "learning_rate": {"low": 1e-6, "high": 1e-4, "log": True},
            "kl_coef": [0.01, 0.05, 0.1],
            "lora_rank": [8, 16, 32],
        },
        description="Train key -> a list of choices, or {low, high, log, step} for a number; the default is the book's section 11.6 space.",
    )
    sampler: Literal["tpe", "random", "grid"] = Field("tpe", description="Optuna sampler; grid needs lists only.")
    pruner: Literal["median", "hyperband", "none"] = Field(
        "median", description="Stop hopeless trials early on the periodic eval reward (eval_steps) or the train reward."
    )
    pruner_startup_trials: int = Field(3, ge=0, description="Median pruner: trials that run in full before any is pruned.")
    pruner_warmup_steps: int = Field(0, ge=0, description="Median pruner: steps a trial runs before it can be pruned.")
    n_trials: int = Field(20, ge=1, description="Finished trials (complete, pruned or failed) the study ends with.")
    objective: Literal["accuracy", "reward"] = Field(
        "accuracy",
        description="accuracy: greedy accuracy on the evaluation split after training; reward: the last "
        "periodic eval reward (or train reward without eval_steps). Maximised.",
    )
    evaluation: dict[str, Any] = Field(
        default_factory=dict,
        description="Evaluate keys for the accuracy objective; default: the base's dataset, split test, 200 questions.",
    )
    enqueue: list[dict[str, Any]] = Field(
        default_factory=list, description="Configurations (space keys -> values) to try first, e.g. the hand-picked one."
    )
    storage: str | None = Field(
        None, description="Optuna RDB URL holding the study; None = sqlite:///<output_dir>/study.db."
    )
    study_name: str = Field("search", min_length=1, description="Study name in the storage; workers with the same one share it.")
    output_dir: str = Field("./runs/search", description="trial-NNNN/ folders, report.md, plots and best_config.yaml.")
    seed: int | None = Field(
        None, description="Sampler seed, plus the number of trials already in the study (a rerun draws anew); None = fresh per worker."
    )
    heartbeat_interval: int = Field(
        30, ge=1, description="Seconds between a running trial's heartbeats; a killed trial is retried after grace_period."
    )
    grace_period: int | None = Field(None, ge=1, description="Seconds without a heartbeat before a trial counts as killed; None = 2 x heartbeat_interval.")
    max_retry: int = Field(2, ge=0, description="Times a killed or interrupted trial is retried with the same parameters.")

    @field_validator("storage")
    @classmethod
    def _rdb_url(cls, value: str | None) -> str | None:
        if value is not None and "://" not in value:
            raise ValueError(f"not a database URL: {value!r}; e.g. sqlite:///runs/search.db or postgresql://user@host/db")
        return value

    @model_validator(mode="after")
    def _search_is_valid(self) -> "SearchConfig":
        owned = sorted(set(self.base) & _SEARCH_OWNS)
        if owned:
            raise ValueError(
                f"`base.{owned[0]}`: the search sets it for each trial (<output_dir>/trial-NNNN, never overwriting); "
                "remove it from base (set the search's output_dir instead)"
            )
        for key, value in _numbers(self.base, "base"):  # NaN slips through pydantic's gt/ge checks
            if not math.isfinite(value):
                raise ValueError(f"`{key}`: must be a finite number (got {value})")
        base = self.trial_config({}, 0)  # validates every base key, and that output_dir is writable
        if not self.space:
            raise ValueError("`space`: empty; give at least one train key, e.g. {kl_coef: [0.01, 0.05, 0.1]}")
        for key, value in _numbers(self.space, "space"):
            if not math.isfinite(value):
                raise ValueError(f"`{key}`: must be a finite number (got {value})")
        for key, spec in self.space.items():
            _check_dimension(key, spec, self.base, self.sampler)
        if self.objective == "reward" and base.algorithm != "grpo":
            raise ValueError("`objective`: reward needs algorithm grpo in base (SFT has no reward); use accuracy")
        for i, row in enumerate(self.enqueue):
            unknown = [key for key in row if key not in self.space]
            if unknown:
                raise ValueError(f"`enqueue.{i}.{unknown[0]}`: not a key of space{did_you_mean(unknown[0], list(self.space))}")
            _nested(TrainConfig, {**self.base, **row}, f"enqueue.{i}")
        if self.objective == "accuracy":
            if not isinstance(base.dataset, str) and "dataset" not in self.evaluation:
                raise ValueError(
                    "`evaluation.dataset`: the base's dataset is a Python object, so its held-out split cannot be "
                    "chosen; give the evaluation a dataset (e.g. arithmetic, or a .jsonl file)"
                )
            self.evaluation_config("<model>")
        return self

    def trial_config(self, params: dict[str, Any], number: int) -> TrainConfig:
        """One trial's full, validated train config: base, then the trial's parameters, in its own folder."""
        folder = str(Path(self.output_dir) / f"trial-{number:04d}")
        return _nested(TrainConfig, {**self.base, **params, "action": "train", "output_dir": folder}, "base")

    def evaluation_config(self, model_path: str) -> EvaluateConfig:
        answer_length = {"max_new_tokens": self.base["max_new_tokens"]} if "max_new_tokens" in self.base else {}
        return evaluation_of(self.base, {**answer_length, **self.evaluation}, model_path)


_SEARCH_OWNS = {"output_dir", "overwrite_output_dir", "resume_from_checkpoint"}
_RANGE_KEYS = ("low", "high", "log", "step")


def _check_dimension(key: str, spec: Any, base: dict[str, Any], sampler: str) -> None:
    """One space entry: a train key, with choices or a range the key's type and bounds accept."""
    where = f"`space.{key}`"
    if key not in TrainConfig.model_fields or key == "action":
        raise ValueError(f"{where}: not a train key{did_you_mean(key, list(TrainConfig.model_fields))}")
    if key in _SEARCH_OWNS:
        raise ValueError(f"{where}: the search sets it for each trial; it cannot be searched")
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ValueError(f"{where}: empty list of choices; give at least one value")
        for value in spec:
            if value is not None and not isinstance(value, (bool, int, float, str)):
                raise ValueError(f"{where}: choices must be numbers, strings, booleans or null (got {value!r})")
            _nested(TrainConfig, {**base, key: value}, f"space.{key}")
        return
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: give a list of choices or a range {{low, high, log, step}} (got {spec!r})")
    if sampler == "grid":
        raise ValueError(f"{where}: the grid sampler needs a finite list of values, e.g. [1e-5, 1e-4]; or use sampler tpe/random")
    for name in spec:
        if name not in _RANGE_KEYS:
            raise ValueError(f"`space.{key}.{name}`: unknown range key{did_you_mean(str(name), list(_RANGE_KEYS))} (use low, high, log, step)")
    if "low" not in spec or "high" not in spec:
        raise ValueError(f"{where}: a range needs low and high, e.g. {{low: 1e-6, high: 1e-4, log: true}}")
    kinds = set(numeric_kinds(TrainConfig.model_fields[key].annotation))
    if not kinds:
        raise ValueError(f"{where}: {key} is not a number; give a list of choices instead of a range")
    low, high, log, step = spec["low"], spec["high"], spec.get("log", False), spec.get("step")
    integer = kinds == {int}
    for name, value in (("low", low), ("high", high), ("step", step)):
        number_ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if (value is not None or name != "step") and (isinstance(value, bool) or not number_ok or not math.isfinite(value)):
            kind = "an integer" if integer else "a finite number"
            raise ValueError(f"`space.{key}.{name}`: {key} takes {kind} (got {value!r})")
    if not isinstance(log, bool):
        raise ValueError(f"`space.{key}.log`: true or false (got {log!r})")
    if not low < high:
        raise ValueError(f"{where}: need low < high (got low {low}, high {high})")
    if log and low <= 0:
        raise ValueError(f"{where}: a log range needs low > 0 (got {low})")
    if step is not None and (step <= 0 or log):
        raise ValueError(f"`space.{key}.step`: must be > 0 and cannot go with log: true (got {step})")
    for value in (low, high):  # the key's own bounds, e.g. lora_rank >= 1, kl_coef >= 0
        _nested(TrainConfig, {**base, key: value}, f"space.{key}")


def _numbers(value: Any, where: str) -> list[tuple[str, float]]:
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _numbers(item, f"{where}.{key}")]
    if isinstance(value, (list, tuple)):
        return [found for i, item in enumerate(value) for found in _numbers(item, f"{where}.{i}")]
    return [(where, value)] if isinstance(value, float) else []


def numeric_kinds(annotation: Any) -> list[type]:
    import typing

    args = typing.get_args(annotation) or (annotation,)
    return [kind for kind in (int, float) if kind in args]


def validate(model: type[BaseModel], params: dict[str, Any]) -> Any:
    """Validate parameters against one action's model; raise ConfigError naming the key and the fix."""
    action = params.get("action", "train")
    known = list(model.model_fields)
    for key in params:
        if key not in known:
            raise ConfigError(
                f"`{key}`: unknown parameter for action {action!r}{did_you_mean(key, known)} "
                f"(run `hello-agents-rl {action} --help` for the list)"
            )
    for key, value in params.items():  # NaN slips through pydantic's gt/ge checks
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"`{key}`: must be a finite number (got {value})")
    try:
        return model(**params)
    except ValidationError as error:
        raise ConfigError(_first_error(error, model)) from None


def describe_fields(model: type[BaseModel]) -> list[tuple[str, str, str]]:
    """(name, default, description) rows: for the README table, CLI help and tool schema."""
    rows = []
    for name, field in model.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default
        rows.append((name, "required" if field.is_required() else repr(default), field.description or ""))
    return rows

