"""Validation of the agentic keys, called by the config layer: no model, no torch, no disk.

`tools` and `environment` are resolved and checked here (`tool_reward` by the reward layer) so that a bad spec is a
ConfigError naming the key and the fix before anything loads. The chat-template check needs the
tokenizer and runs at the start of the action (`runtime.preflight`), still before the model loads.
"""

from __future__ import annotations

from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.rewards import build_reward, with_tool_shaping
from hello_agents_rl.rollouts.tool_registry import public_methods, resolve_environment, resolve_tools


def check_agentic(
    tools: list[Any],
    environment: Any,
    algorithm: str | None = None,
    tool_reward: dict[str, Any] | None = None,
    max_tool_turns: int = 1,
    reward: Any = None,
) -> None:
    resolved = resolve_tools(tools)
    if environment is not None:
        if algorithm == "sft":
            raise ConfigError(
                "`environment`: SFT does not run rollouts, so an environment has nothing to do there. Fix: drop "
                "`environment` for SFT (give `tools` so the prompts list them) and use it for GRPO."
            )
        methods = public_methods(resolve_environment(environment))
        both = sorted(set(methods) & {getattr(tool, "__name__", "") for tool in resolved})
        if both:  # TRL joins the two lists, and the model would see two tools of one name
            raise ConfigError(f"`tools` and `environment`: both have a tool named {both[0]!r} (the tool "
                              f"{both[0]!r} and the environment's method {both[0]}). Fix: rename one of them, or "
                              "drop the tool and keep the environment's method")
    if tool_reward:  # the reward layer checks the shaping within its one bound
        with_tool_shaping(reward or build_reward(), tool_reward, max_tool_turns)
    if tool_reward and not tools and environment is None:
        raise ConfigError("`tool_reward`: set only with `tools` or `environment` (it shapes tool calls).")
