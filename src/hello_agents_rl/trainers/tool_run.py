"""What a tool run adds to a training run: the preflight, TRL's tool kwargs, the reward, the result.

Everything is TRL's: `GRPOTrainer(tools=..., environment_factory=...)` runs the multi-turn rollouts,
masks tool-result tokens out of the loss (`tool_mask`) and stops after `max_tool_calling_iterations`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.rewards import build_reward, to_trl_reward
from hello_agents_rl.rollouts.tool_guard import ToolStats, guard, guarded_environment, reset_failure
from hello_agents_rl.rollouts.tool_registry import probe_environment, resolve_environment, resolve_tools
from hello_agents_rl.trajectory import called


def uses_tools(cfg: Any) -> bool:
    """A multi-turn tool run: tools, an environment, or a hello-agents agent."""
    return (bool(getattr(cfg, "tools", None)) or getattr(cfg, "environment", None) is not None
            or getattr(cfg, "agent", None) is not None)


def preflight(cfg: Any, model_key: str = "model_name") -> None:
    """Before the disk or the model: the model's chat template must express tool calls (ConfigError)."""
    from hello_agents_rl.models import load_tokenizer
    from hello_agents_rl.rollouts.template import check_tool_template

    name = getattr(cfg, model_key)
    check_tool_template(load_tokenizer(name, cfg.trust_remote_code), name)


def check_environment(cfg: Any, rows: Any) -> None:
    """Once the data is loaded, before the model: the environment's reset on the first rows (a ConfigError)."""
    if cfg.environment is not None:
        probe_environment(resolve_environment(cfg.environment), rows)


def trainer_kwargs(cfg: Any, spec: Any = None) -> dict[str, Any]:
    """GRPOTrainer keyword arguments: guarded tools and/or a guarded environment class (one per rollout); an agent's
    tools (`spec`, rollouts.agent_spec) as the schemas it sends, run its way."""
    stats = ToolStats(timeout=cfg.tool_timeout)  # shared by every guard of the run; found again by `stats_of`
    kwargs: dict[str, Any] = {}
    if spec is not None:
        spec.stats = stats  # a call whose ToolResponse failed is counted there too
        kwargs["tools"] = [guard(tool, stats) for tool in spec.tools()]
    if cfg.tools:
        kwargs["tools"] = [guard(tool, stats) for tool in resolve_tools(cfg.tools)]
    if cfg.environment is not None:
        kwargs["environment_factory"] = guarded_environment(resolve_environment(cfg.environment), stats)
    return kwargs


def stats_of(trainer: Any) -> ToolStats:
    for tool in getattr(trainer, "tools", None) or []:
        if isinstance(getattr(tool, "stats", None), ToolStats):
            return tool.stats
    return ToolStats()


def tool_schemas(cfg: Any, spec: Any = None) -> list[dict[str, Any]]:
    """The tools' JSON schemas as the prompts list them; an agent's (`spec`) are the schemas it sends, as they are."""
    from transformers.utils import get_json_schema

    tools = spec.tools() if spec is not None else resolve_tools(cfg.tools)
    return [dict(t) if isinstance(t, dict) else get_json_schema(t) for t in tools]


def with_tool_column(data: Any, cfg: Any, spec: Any = None) -> Any:
    """Add the tools' JSON schemas as a `tools` column (a string): TRL's SFT renders them into each prompt."""
    schemas = json.dumps(tool_schemas(cfg, spec), ensure_ascii=False)
    return data.map(lambda _: {"tools": schemas})


def check_transcript_calls(cfg: Any, rows: Any, spec: Any = None) -> None:
    """SFT with tools, before the model loads: every call in the transcripts names one of the run's tools, with
    arguments that tool takes and every one it requires (a misspelt name or argument would teach the model a call
    that always fails)."""
    if (cfg.algorithm != "sft" or cfg.environment is not None or not uses_tools(cfg)
            or "completion" not in rows.column_names):
        return
    functions = [schema.get("function") or schema for schema in tool_schemas(cfg, spec)]
    parameters = {f.get("name"): f.get("parameters") or {} for f in functions}
    for index, completion in enumerate(rows["completion"], start=1):
        for message in completion if isinstance(completion, list) else []:
            for call in message.get("tool_calls") or []:
                name, arguments = called(call)
                if name not in parameters:
                    raise ConfigError(f"`dataset`: row {index}'s transcript calls {name!r}, which is not one of the "
                                      f"run's tools ({', '.join(sorted(map(str, parameters)))}); correct the name in "
                                      "the transcript, or give that tool")
                if problem := _arguments_problem(arguments, parameters[name]):
                    raise ConfigError(f"`dataset`: row {index}'s transcript calls {name!r} {problem}; write the "
                                      "call with the tool's own parameters")


def _arguments_problem(arguments: dict[str, Any] | None, schema: dict[str, Any]) -> str | None:
    """What is wrong with a call's arguments against its tool's JSON schema: not an object, a parameter the tool
    lacks, or a required one left out; None when they fit. A key set to null is no argument: a datasets table gives
    every call the keys of every other call, set to null."""
    if arguments is None:
        return "with arguments that are not a JSON object"
    given = {key for key, value in arguments.items() if value is not None}
    known = set(schema.get("properties") or {})
    unknown = sorted(given - known) if schema.get("additionalProperties") is not True else []
    if unknown:
        takes = ", ".join(sorted(known)) or "nothing"
        return f"with {', '.join(map(repr, unknown))}, which it does not take (it takes: {takes})"
    if missing := sorted(set(schema.get("required") or []) - given):
        return f"without {', '.join(map(repr, missing))}, which it requires"
    return None


def trajectory_reward(cfg: Any, spec: Any = None) -> Callable[..., list[float | None]]:
    """The tool run's TRL reward: the answer after the last tool result, tool shaping, failures as in a plain run;
    an agent's trajectories read as its run reads them (`spec.as_run`: a Finish call's answer)."""
    reward = build_reward(cfg.reward_type, cfg.reward_config, cfg.tool_reward, cfg.max_tool_turns, cfg.answer_checker)
    adapter = to_trl_reward(reward, cfg.reward_failure_value)
    if spec is not None:
        return _as_agent_runs(adapter, spec)
    return adapter if cfg.environment is None else _failed_resets_as_failures(adapter, cfg.reward_failure_value)


def _as_agent_runs(adapter: Callable[..., list[float | None]], spec: Any) -> Callable[..., list[float | None]]:
    @functools.wraps(adapter)
    def reward(completions: Any = None, **kwargs: Any) -> list[float | None]:
        scores = adapter(completions=[spec.as_run(c) for c in completions or []], **kwargs)
        reward.failures, reward.first_failure = adapter.failures, adapter.first_failure  # type: ignore[attr-defined]
        return scores

    return reward


def _failed_resets_as_failures(adapter: Callable[..., list[float | None]], failure_value: float | None
                               ) -> Callable[..., list[float | None]]:
    """A rollout whose environment could not be reset for its row scores as a failed reward does: counted, and
    `failure_value` (None: left out of its group), whatever its answer."""
    failed_resets = {"count": 0, "first": None}

    @functools.wraps(adapter)
    def reward(**kwargs: Any) -> list[float | None]:
        scores = adapter(**kwargs)
        for i, environment in enumerate(kwargs.get("environments") or []):
            if (why := reset_failure(environment)) is not None:
                scores[i] = failure_value
                failed_resets["count"] += 1
                failed_resets["first"] = failed_resets["first"] or why
        reward.failures = adapter.failures + failed_resets["count"]  # type: ignore[attr-defined]
        reward.first_failure = adapter.first_failure or failed_resets["first"]  # type: ignore[attr-defined]
        return scores

    return reward


def tool_results(trainer: Any, history: list[dict[str, Any]]) -> dict[str, Any]:
    """result["tools"]: what the guards saw over the run (calls, failures and their rate: one count, so they agree),
    the last logged step's rates, and which rollout code ran. TRL's tools/failure_frequency is a step's failures
    per rollout (what the doctor reads), not a share of the run's calls, so the rate here is the guards' own."""
    logged = [e for e in history if "tools/call_frequency" in e or "tools/call_rate" in e]
    last = logged[-1] if logged else {}
    seen = stats_of(trainer).summary()
    return {
        **seen,
        "failed_call_rate": seen["failures"] / seen["calls"] if seen["calls"] else 0.0,
        "call_rate": last.get("tools/call_rate"),
        "calls_per_rollout": last.get("tools/call_frequency"),
        "turns_exhausted_rate": last.get("tools/turns_exhausted"),
        "budget_exhausted_rate": last.get("tools/budget_exhausted"),
        "rollouts": rollout_path(trainer),
    }


def rollout_path(trainer: Any) -> str:
    """Which code generated the tool rollouts: the fast sampler, or TRL's model.generate (and why)."""
    record = getattr(trainer, "fast_path", None)  # FastGRPOTrainer's record of what ran (trainers/fast/record.py)
    if not isinstance(record, dict):
        return "TRL's model.generate (plain GRPOTrainer)"
    fallbacks = [f["reason"] for f in record.get("fallbacks", []) if f.get("part") == "sampler"]
    if record.get("sampler") and not fallbacks:
        return "fast sampler (FastGRPOTrainer): every turn, tool results appended by TRL's loop"
    return f"TRL's model.generate ({'; '.join(fallbacks) or 'fast path off'})"
