"""`action: evaluate` and `action: compare`, and how pipeline and search evaluate a model they trained."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from hello_agents_rl.config.base import Count, ModelSource, PathRole, WritableFile, nested
from hello_agents_rl.config.checks import check_tools
from hello_agents_rl.config.data import DataConfig
from hello_agents_rl.paths import local_path_problem


class EvalOptions(DataConfig):
    split: str = Field("test", description="Split to evaluate.")
    max_samples: Count | None = Field(200, ge=1, description="Questions to evaluate (seeded subset); None = all.")
    max_new_tokens: Count = Field(256, ge=1, description="Longest answer in tokens.")
    batch_size: Count = Field(32, ge=1, description="Questions generated together.")
    temperature: float = Field(0.0, ge=0, description="0 = greedy (accuracy); > 0 samples (needed for pass@k).")
    k: Count = Field(1, ge=1, description="Samples per question for pass@k (sampled at temperature, default 1.0).")
    trust_remote_code: bool = Field(False, description="Run the model repository's own Python code.")
    enable_thinking: bool = Field(False, description="Qwen3 thinking mode in the chat template.")
    tools: list[Any] = Field(default_factory=list, description="Evaluate with these tools (as in train): the same rollouts.")
    environment: Any = Field(None, description="Evaluate with this environment class (as in train).")
    max_tool_turns: Count = Field(4, ge=1, description="Most tool-calling rounds per question.")
    tool_timeout: float = Field(30.0, gt=0, description="Seconds a tool call may take before it fails as a timeout.")

    @model_validator(mode="after")
    def _agentic(self) -> EvalOptions:
        check_tools(self.tools, self.environment)
        return self


class EvaluateConfig(EvalOptions):
    """`action: evaluate` -- accuracy and friends of one model on a dataset split."""

    model_path: ModelSource = Field(..., description="Model folder (full model or LoRA adapter), run output_dir, hub id, or .gguf.")
    return_details: bool = Field(False, description="Include per-question details in the result.")
    details_path: WritableFile | None = Field(None, description="Write per-question details to this JSONL file.")


class CompareConfig(EvalOptions):
    """`action: compare` -- several models on the same questions, as one table."""

    models: dict[str, Annotated[str, PathRole("model")]] = Field(..., description="Name -> model, e.g. {base: Qwen/Qwen3-0.6B, sft: ./models/sft}.")
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


# The train keys an evaluation of the trained model inherits: its data and prompt, code trust, and tool use.
EVALUATION_KEYS = (set(DataConfig.model_fields) - {"action", "split", "max_samples"}) | {
    "trust_remote_code", "enable_thinking", "tools", "max_tool_turns", "tool_timeout",
}


def evaluation_of(train_keys: dict[str, Any], evaluation: dict[str, Any], model_path: str) -> EvaluateConfig:
    """How pipeline and search evaluate a model they trained: 200 held-out questions (the test split) with the
    training's data, prompt and tool keys, then the user's `evaluation` keys over them."""
    shared = {k: v for k, v in train_keys.items() if k in EVALUATION_KEYS}
    params = {"max_samples": 200, **shared, "action": "evaluate", "split": "test", **evaluation}
    return nested(EvaluateConfig, {**params, "model_path": model_path}, "evaluation")
