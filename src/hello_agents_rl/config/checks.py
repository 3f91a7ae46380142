"""Checks the config asks of the layers that own the keys: the reward and the tools validate their own
parameters. Imported lazily, inside each check: those layers sit above the config and read none of it."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any


def check_reward(reward_type: Any, reward_config: dict[str, Any]) -> None:
    from hello_agents_rl.rewards import build_reward  # the reward layer validates its own parameters

    build_reward(reward_type, reward_config)


def check_tools(tools: list[Any], environment: Any, algorithm: str | None = None, tool_reward: dict | None = None,
                max_tool_turns: int = 1, reward_type: Any = None, reward_config: dict | None = None) -> None:
    if not tools and environment is None and not tool_reward:
        return
    from hello_agents_rl.rewards import build_reward
    from hello_agents_rl.rollouts.checks import check_agentic  # resolves and checks tools without loading a model

    reward = build_reward(reward_type, reward_config) if reward_type is not None else None
    check_agentic(tools, environment, algorithm, tool_reward, max_tool_turns, reward)


def check_task(dataset: str, params: dict[str, Any]) -> None:
    from hello_agents_rl.data.reasoning_tasks import check  # an unknown task or a refused parameter, named

    check(dataset, params)


def check_vllm_installed() -> None:
    """Whether a GPU is visible needs torch: trainers/preflight.py checks that, still before the model loads."""
    if find_spec("vllm") is None:
        raise ValueError("`use_vllm`: vLLM is not installed; pip install 'hello-agents-rl[vllm]' or set use_vllm: false")
