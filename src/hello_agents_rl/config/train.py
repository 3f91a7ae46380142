"""`action: train`: the model to start from, and every key of an SFT or GRPO run."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from hello_agents_rl.config.base import Base, Count, LocalPath, ModelSource, WritableFolder, require
from hello_agents_rl.config.checks import check_agent_keys, check_reward, check_tools, check_vllm_installed
from hello_agents_rl.config.data import ANSWER_CHECKER_HELP, AnswerChecker, DataConfig, split_problem
from hello_agents_rl.config.doctor import thresholds_problem
from hello_agents_rl.config.loss import LossType, loss_problem
from hello_agents_rl.errors import did_you_mean
from hello_agents_rl.paths import overlap_problem

# transformers' SchedulerType values, kept here so validation imports no transformers
# (tests/test_config.py checks they still match).
SCHEDULERS = (
    "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup", "inverse_sqrt",
    "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay", "greedy",
)


class ModelConfig(Base):
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


class GrpoKeys(Base):
    """The keys only GRPO reads: sampling, the loss, generation engines, rewards and the tool loop. A key defined
    here is GRPO's by construction: SFT refuses it (ONLY_FOR is derived from these two classes)."""

    num_generations: Count = Field(4, ge=2, description="Completions per prompt: the group (the book: 4-8).")
    max_new_tokens: Count = Field(256, ge=1, description="Longest completion in tokens (the book: 256-512).")
    temperature: float = Field(0.8, gt=0, description="Sampling temperature while training (the book: 0.7-1.0).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling while training.")
    kl_coef: float = Field(0.05, ge=0, description="KL penalty beta against the reference model (the book: 0.05-0.1).")
    clip_range: float = Field(0.2, gt=0, lt=1, description="PPO-style ratio clip epsilon (the book: 0.2).")
    scale_rewards: Literal["none", "group", "batch"] = Field(
        "none", description="Advantage = r - group mean (none, as the book defines it) or divided by the std."
    )
    loss_type: LossType = Field(
        "dapo",
        description="TRL's GRPO loss: dapo (token sum / the batch's tokens), grpo (mean per completion), dr_grpo "
        "(/ max_new_tokens), bnpo (/ the micro-batch's tokens), cispo (clipped IS weights; needs clip_range_high), "
        "sapo (soft gate), luspo (length-scaled sequence loss), vespo (gamma-weighted sequence IS). README: Loss variants.",
    )
    importance_sampling_level: Literal["token", "sequence"] = Field(
        "token", description="Ratio per token, or one per completion (sequence: GSPO; luspo needs it, vespo refuses it)."
    )
    clip_range_high: float | None = Field(
        None, gt=0, description="Upper clip epsilon (DAPO's clip-higher: 0.28); None = clip_range. cispo: the IS-weight cap (5.0)."
    )
    mask_truncated_completions: bool = Field(
        False, description="Leave completions cut at max_new_tokens out of the loss (DAPO)."
    )
    top_entropy_quantile: float = Field(
        1.0, ge=0, le=1, description="Train on this top fraction of tokens by entropy (0.2: the 80/20 paper); 1 = all."
    )
    sapo_temperature_pos: float = Field(1.0, gt=0, description="sapo: gate temperature for positive advantages.")
    sapo_temperature_neg: float = Field(1.05, gt=0, description="sapo: gate temperature for other advantages.")
    vespo_k_pos: float = Field(2.0, ge=0, description="vespo: power k of the gamma weight, positive advantages.")
    vespo_lambda_pos: float = Field(3.0, gt=0, description="vespo: decay lambda of the gamma weight, positive advantages.")
    vespo_k_neg: float = Field(3.0, ge=0, description="vespo: power k of the gamma weight, negative advantages.")
    vespo_lambda_neg: float = Field(2.0, gt=0, description="vespo: decay lambda of the gamma weight, negative advantages.")
    dynamic_sampling: Literal["off", "skip", "resample"] = Field(
        "off",
        description="Groups whose completions all score the same teach nothing: skip leaves them out of the update "
        "and its forwards; resample refills the batch with new prompts (DAPO), at most dynamic_sampling_rounds rounds.",
    )
    dynamic_sampling_rounds: Count = Field(
        4, ge=1, le=64, description="resample: most generation rounds per step (the first included); then it trains on what it has."
    )
    step_credit: float = Field(
        0.0, ge=0, le=10, description="Tool runs: weight of a per-step advantage (GiGPO): each step of a rollout is also "
        "compared with the steps of its group that followed the same tool results (docs/agentic.md); 0 = off.",
    )
    steps_per_generation: Count | None = Field(
        None, ge=1, description="Optimizer steps per generation round; None = gradient_accumulation_steps."
    )
    use_vllm: bool = Field(False, description="Generate with vLLM (GPU only; pip install 'hello-agents-rl[vllm]').")
    vllm_mode: Literal["colocate", "server"] = Field(
        "colocate", description="colocate: vLLM shares the training GPUs; server: a separate `trl vllm-serve`."
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="Fraction of GPU memory vLLM may take in colocate mode."
    )
    vllm_max_model_length: Count | None = Field(
        None, ge=1, description="Colocate: vLLM's context window in tokens; None = the longest prompt + max_new_tokens."
    )
    vllm_server_host: str = Field("0.0.0.0", description="Host of the `trl vllm-serve` server (server mode).")
    vllm_server_port: int = Field(8000, ge=1, le=65535, description="Port of the `trl vllm-serve` server.")
    log_completions_steps: Count = Field(
        0, ge=0, description="Every N steps write sampled completions to completions.jsonl (0 = off)."
    )
    kl_target: tuple[float, float] | None = Field(
        None, description="Adaptive KL: adjust kl_coef during training to keep KL in [low, high], e.g. [0.01, 0.1]."
    )
    reward_type: Any = Field(
        "accuracy", description="accuracy, length_penalty, step, combined, or a Python callable."
    )
    reward_config: dict[str, Any] = Field(
        default_factory=dict, description="Reward parameters, e.g. target_length, step_bonus, components."
    )
    environment: Any = Field(
        None, description="GRPO: a stateful class or 'pkg.module:Class' (reset(**row); public methods are its tools)."
    )
    max_tool_turns: Count = Field(4, ge=1, description="Most tool-calling rounds per rollout (TRL's max_tool_calling_iterations).")
    tool_timeout: float = Field(
        30.0, gt=0,  # rollouts/tool_guard.py: TOOL_TIMEOUT_S (tests/test_tools_guard.py checks they match)
        description="Seconds a tool call may take before it fails as a timeout; a tool that keeps hanging is reported.",
    )
    tool_reward: dict[str, float] = Field(
        default_factory=dict,
        description="Tool shaping: failed_call_penalty, call_bonus; bounded so a wrong answer never outscores a right one.",
    )
    reward_failure_value: float | None = Field(
        None,
        description="Reward for a completion whose custom reward raised or returned None/NaN; None = left out of its "
        "group's mean and std with advantage 0 (as TRL does with None).",
    )
    answer_checker: AnswerChecker = Field("number", description=ANSWER_CHECKER_HELP)  # training: the reward's


class SftKeys(Base):
    """The keys only SFT reads."""

    max_length: Count = Field(1024, ge=8, description="SFT: longest tokenized example.")


# (algorithm, use_lora) -> learning_rate when none is given. Full GRPO keeps the book's range; LoRA trains a few
# million weights and wants ~10x more: on SmolLM2, 1e-5 left the KL under 0.001 ("not learning") and 1e-4 learnt
# (benchmarks/lora_lr_search.py measures it and fails when this default stops learning).
DEFAULT_LEARNING_RATES = {("grpo", False): 1e-5, ("grpo", True): 1e-4, ("sft", False): 2e-5, ("sft", True): 2e-4}
# Keys only one algorithm reads, derived from the class that defines them: given to the other they would be ignored
# without a word, so they are refused.
ONLY_FOR = {key: algorithm for algorithm, keys in (("grpo", GrpoKeys), ("sft", SftKeys))
            for key in keys.model_fields if key not in Base.model_fields}


def misplaced_keys(algorithm: str, keys: set[str]) -> list[str]:
    """The given keys that only the other algorithm reads."""
    return sorted(key for key in keys if ONLY_FOR.get(key, algorithm) != algorithm)


def keys_read_by(params: dict[str, Any]) -> dict[str, Any]:
    """Keys shared by runs of either algorithm (a search's base and space, a pipeline's top level), less those this
    run's algorithm never reads."""
    algorithm = params.get("algorithm", "grpo")
    return {key: value for key, value in params.items() if ONLY_FOR.get(key, algorithm) == algorithm}


class TrainConfig(GrpoKeys, SftKeys, DataConfig, ModelConfig):
    """`action: train` -- SFT or GRPO. Defaults follow section 11.4's recommendations."""

    one_algorithm: ClassVar[bool] = True  # every key given is for `algorithm` (a pipeline's go to the stages)
    algorithm: Literal["sft", "grpo"] = Field("grpo", description="sft (imitation) or grpo (reinforcement learning).")
    output_dir: WritableFolder | None = Field(None, description="Where the model, checkpoints and logs go; None = ./models/<algorithm>_model.")
    overwrite_output_dir: bool = Field(False, description="Allow training into a folder that holds a finished run.")

    # training
    num_epochs: float = Field(3, gt=0, description="Passes over the training prompts.")
    max_steps: Count = Field(-1, description="If > 0, stop after this many optimizer steps (overrides num_epochs).")
    batch_size: Count = Field(
        4, ge=1, description="Prompts (questions) per device per step; each gets num_generations completions."
    )
    gradient_accumulation_steps: Count = Field(1, ge=1, description="Micro-batches accumulated per optimizer step.")
    learning_rate: float | None = Field(
        None,
        gt=0,
        description="Peak learning rate; None = GRPO 1e-5 (the book: 1e-6..1e-5), 1e-4 with LoRA (measured: "
        "docs/real_model.md); SFT 2e-5, 2e-4 with LoRA.",
    )
    warmup_ratio: float = Field(0.1, ge=0, lt=1, description="Fraction of steps spent warming the learning rate up.")
    lr_scheduler_type: str = Field("linear", description="transformers scheduler name (linear, cosine, constant...).")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory (the book's OOM advice).")

    # GRPO


    # rewards

    # agentic RL: multi-turn tool use on TRL's tool loop (docs/agentic.md)
    tools: list[Any] = Field(
        default_factory=list,
        description="Tools the model may call: built-in names (calculator, python), 'pkg.module:function' or callables.",
    )
    agent: Any = Field(
        None, description="Python only: a hello-agents SimpleAgent or ReActAgent; training uses its system prompt, tool "
        "schemas, tool messages and tool-turn limit, its tools run through its own registry (docs/agentic.md).",
    )

    # LoRA
    use_lora: bool = Field(True, description="Train a LoRA adapter instead of all weights.")
    lora_rank: Count = Field(16, ge=1, description="LoRA rank r.")
    lora_alpha: Count = Field(32, ge=1, description="LoRA scaling alpha.")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the LoRA branch.")
    lora_target_modules: str | list[str] = Field("all-linear", description="Modules LoRA wraps.")
    merge_lora: bool = Field(
        True,
        description="Save the LoRA adapter merged into its base as a full model in output_dir/model "
        "(loadable by plain transformers); the adapter itself always goes to output_dir/adapter.",
    )

    # SFT

    # checkpoints and monitoring
    save_steps: Count = Field(500, ge=1, description="Save a checkpoint every N optimizer steps.")
    save_total_limit: Count | None = Field(None, ge=1, description="Keep at most this many checkpoints.")
    logging_steps: Count = Field(10, ge=1, description="Log a line, metrics.jsonl and TensorBoard every N steps.")
    report_to: list[str] = Field(
        default_factory=lambda: ["tensorboard"],
        description="tensorboard, wandb, trackio (a local dashboard: pip install 'hello-agents-rl[trackio]'), or none; "
        "wandb is added when WANDB_PROJECT is set.",
    )
    resume_from_checkpoint: bool | LocalPath | None = Field(
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
    eval_steps: Count | None = Field(None, ge=1, description="Evaluate eval_samples from eval_split every N steps.")
    eval_split: str = Field("test", description="Split used by eval_steps.")
    eval_samples: Count = Field(64, ge=1, description="Questions in the periodic evaluation.")

    @field_validator("report_to", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("report_to")
    @classmethod
    def _known_reporters(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - {"tensorboard", "wandb", "trackio", "none"})
        if unknown:
            raise ValueError(f"unknown reporter {unknown}; use tensorboard, wandb, trackio or none")
        if "trackio" in value and find_spec("trackio") is None:
            raise ValueError("trackio is not installed; pip install 'hello-agents-rl[trackio]', or leave it out")
        return value

    @field_validator("lr_scheduler_type")
    @classmethod
    def _known_scheduler(cls, value: str) -> str:
        if value not in SCHEDULERS:
            raise ValueError(f"unknown scheduler{did_you_mean(value, SCHEDULERS)} (known: {', '.join(SCHEDULERS)})")
        return value

    @model_validator(mode="after")
    def _resolve(self) -> TrainConfig:
        given = {key for key in self.model_fields_set  # a key written back with its default value changes nothing
                 if getattr(self, key) != type(self).model_fields[key].get_default(call_default_factory=True)}
        misplaced = misplaced_keys(self.algorithm, given) if self.one_algorithm else []
        if misplaced:
            other, this = ONLY_FOR[misplaced[0]], self.algorithm
            also = f" (and {', '.join(f'`{key}`' for key in misplaced[1:])})" if misplaced[1:] else ""
            raise ValueError(f"`{misplaced[0]}`: read only by {other.upper()} (algorithm: {other}), and this run is "
                             f"{this.upper()}; it would be ignored. Fix: remove it{also}, or set algorithm: {other}")
        if self.learning_rate is None:
            default = DEFAULT_LEARNING_RATES[(self.algorithm, self.use_lora)]
            object.__setattr__(self, "learning_rate", default)
        if self.output_dir is None:
            object.__setattr__(self, "output_dir", f"./models/{self.algorithm}_model")
        require(overlap_problem(self.model_name, self.output_dir))
        if self.eval_steps:
            require(split_problem(self.dataset, self.eval_split, "eval_split"))
        check_reward(self.reward_type, self.reward_config)
        for key, value in check_agent_keys(self.agent, self.tools, self.environment, self.max_tool_turns,
                                           "max_tool_turns" in self.model_fields_set).items():
            object.__setattr__(self, key, value)  # hello-agents tools train as the agent that sends them
        check_tools(self.tools, self.environment, self.algorithm, self.tool_reward, self.max_tool_turns,
                    self.reward_type, self.reward_config)
        if self.step_credit and not (self.tools or self.environment is not None or self.agent is not None):
            raise ValueError("`step_credit`: credits the steps of tool-using rollouts, and this run has no tools; give "
                             "`tools`, `environment` or `agent` (or a task that brings them), or drop step_credit")
        if self.step_credit and self.dynamic_sampling != "off":
            raise ValueError("`step_credit`: not with dynamic_sampling yet (its rounds join batches of episode "
                             "advantages); set one of them off")
        if self.use_vllm:
            check_vllm_installed()
        require(thresholds_problem(self.doctor_thresholds))
        require(loss_problem(self, self.model_fields_set))
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
