"""The one table of actions: name -> config model, handler and, for background jobs, the files they leave.
The tool, the CLI, the MCP server, the job store and the README read it.

Handlers are named as "module:function" and imported only when the action runs, so validation and
`--help` load no model code, and the config layer below stays free of engines.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from hello_agents_rl.config import (
    CompareConfig,
    CreateRewardConfig,
    EvaluateConfig,
    ExportConfig,
    LoadDatasetConfig,
    PipelineConfig,
    SearchConfig,
    TrainConfig,
    validate,
)
from hello_agents_rl.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class JobFiles:
    """What a background job of an action leaves under its output_dir, read instead of its console text."""

    result: str  # written atomically when the action ends: the job's result
    metrics: str  # glob of its training runs' metrics.jsonl; the newest is the run in progress


@dataclass(frozen=True)
class Action:
    config: type[BaseModel]
    handler: str  # "module:function" taking the validated config, returning the result dict
    job: JobFiles | None = None  # None: the action returns at once and never runs as a background job

    def run(self, cfg: BaseModel) -> dict[str, Any]:
        module, _, function = self.handler.partition(":")
        return getattr(importlib.import_module(module), function)(cfg)


ACTIONS: dict[str, Action] = {
    "train": Action(TrainConfig, "hello_agents_rl.trainers.run:train", JobFiles("results.json", "metrics.jsonl")),
    "evaluate": Action(EvaluateConfig, "hello_agents_rl.evaluation.run:run"),
    "compare": Action(CompareConfig, "hello_agents_rl.evaluation.run:compare"),
    "pipeline": Action(PipelineConfig, "hello_agents_rl.workflows.pipeline:run_pipeline",
                       JobFiles("training_results.json", "*/metrics.jsonl")),  # sft/, then grpo/
    "export": Action(ExportConfig, "hello_agents_rl.workflows.export:run"),
    "load_dataset": Action(LoadDatasetConfig, "hello_agents_rl.data.sources:describe"),
    "create_reward": Action(CreateRewardConfig, "hello_agents_rl.rewards:score_completions"),
    "search": Action(SearchConfig, "hello_agents_rl.workflows.search:run",
                     JobFiles("results.json", "trial-*/metrics.jsonl")),
}
JOB_ACTIONS = tuple(name for name, action in ACTIONS.items() if action.job is not None)


def parse(params: dict[str, Any]) -> Any:
    """Validate one action's parameters; raise ConfigError naming the key and the fix."""
    if not isinstance(params, dict):
        raise ConfigError(f"parameters must be a dict, got {type(params).__name__}")
    name = params.get("action", "train")
    if name not in ACTIONS:
        raise ConfigError(
            f"`action`: unknown action {name!r}{did_you_mean(str(name), list(ACTIONS))} Use one of: {', '.join(ACTIONS)}."
        )
    return validate(ACTIONS[name].config, params)


def run(params: dict[str, Any]) -> dict[str, Any]:
    cfg = parse(params)  # raises ConfigError before anything loads
    return ACTIONS[cfg.action].run(cfg)


def markdown_tables() -> str:
    """The README's parameter reference, one table per action (kept in sync by tests/test_readme.py)."""
    from hello_agents_rl.config import describe_fields

    parts = []
    for name, action in ACTIONS.items():
        rows = [f"| `{key}` | `{default}` | {text} |" for key, default, text in describe_fields(action.config) if key != "action"]
        parts.append(f"#### `{name}`\n\n| key | default | meaning |\n|---|---|---|\n" + "\n".join(rows))
    return "\n\n".join(parts) + "\n"
