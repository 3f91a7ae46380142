"""Validation of the agentic keys, called by the config layer: no model, no torch, no disk.

`tools`, `environment` and `tool_reward` are resolved and checked here so that a bad spec is a
ConfigError naming the key and the fix before anything loads. The chat-template check needs the
tokenizer and runs at the start of the action (`runtime.preflight`), still before the model loads.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hello_agents_rl.rollouts.tools import resolve_environment, resolve_tools
from hello_agents_rl.errors import ConfigError, did_you_mean

TOOL_REWARD_KEYS = {"failed_call_penalty": 0.0, "call_bonus": 0.0}


def check_agentic(
    tools: list[Any],
    environment: Any,
    algorithm: str | None = None,
    tool_reward: dict[str, Any] | None = None,
    max_tool_turns: int = 1,
    reward: Any = None,
) -> None:
    resolve_tools(tools)
    if environment is not None:
        if algorithm == "sft":
            raise ConfigError(
                "`environment`: SFT does not run rollouts, so an environment has nothing to do there. Fix: drop "
                "`environment` for SFT (give `tools` so the prompts list them) and use it for GRPO."
            )
        resolve_environment(environment)
    check_tool_reward(tool_reward or {}, max_tool_turns, reward)
    if (tool_reward or {}) and not tools and environment is None:
        raise ConfigError("`tool_reward`: set only with `tools` or `environment` (it shapes tool calls).")


def check_tool_reward(tool_reward: dict[str, Any], max_tool_turns: int, reward: Any = None) -> dict[str, float]:
    """Shaping that can never let a wrong answer outscore a right one (as `reward_config`'s shaping).

    A wrong answer scores at most `call_bonus` (paid once per rollout with a well-formed call); a right one
    at least `accuracy weight - length-penalty weight - failed_call_penalty * max_tool_turns` (the penalty
    is counted for at most max_tool_turns calls). So the sum of the three must not exceed the accuracy weight.
    """
    unknown = sorted(set(tool_reward) - set(TOOL_REWARD_KEYS))
    if unknown:

        raise ConfigError(
            f"`tool_reward.{unknown[0]}`: unknown key{did_you_mean(unknown[0], list(TOOL_REWARD_KEYS))} "
            f"(known: {', '.join(TOOL_REWARD_KEYS)})"
        )
    values = {**TOOL_REWARD_KEYS, **tool_reward}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
            raise ConfigError(f"`tool_reward.{key}`: must be a number >= 0 (got {value!r}), e.g. 0.1")
    accuracy, penalty = Fraction(1), Fraction(0)
    if reward is not None:
        from hello_agents_rl.rewards import accuracy_score, length_penalty_score

        accuracy = sum((Fraction(c.weight) for c in reward.components if c.fn is accuracy_score), Fraction(0))
        penalty = sum((Fraction(c.weight) for c in reward.components if c.fn is length_penalty_score), Fraction(0))
        custom = any(c.fn not in (accuracy_score, length_penalty_score) and c.name not in ("step",) for c in reward.components)
        if accuracy == 0 and custom:
            return {k: float(v) for k, v in values.items()}  # a custom reward carries correctness: outside the guarantee
    worst = Fraction(values["call_bonus"]) + Fraction(values["failed_call_penalty"]) * max_tool_turns + penalty
    if worst > accuracy:
        raise ConfigError(
            f"`tool_reward`: call_bonus {values['call_bonus']} + failed_call_penalty {values['failed_call_penalty']} x "
            f"max_tool_turns {max_tool_turns} (+ length penalty weight {float(penalty)}) exceeds the accuracy weight "
            f"{float(accuracy)}: a wrong answer could outscore a right one. Fix: lower them so the sum is at most "
            f"{float(accuracy)}, e.g. call_bonus 0.1, failed_call_penalty {float((accuracy - penalty) / 2 / max_tool_turns):.3g}."
        )
    return {k: float(v) for k, v in values.items()}
