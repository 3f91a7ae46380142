"""Checks the config asks of the layers that own the keys: the reward and the tools validate their own
parameters. Imported lazily, inside each check: those layers sit above the config and read none of it."""

from __future__ import annotations

import functools
import json
from importlib.util import find_spec
from typing import Any


def check_reward(reward_type: Any, reward_config: dict[str, Any]) -> None:
    from hello_agents_rl.rewards import build_reward  # the reward layer validates its own parameters

    build_reward(reward_type, reward_config)


def nested_key_home(key: str) -> tuple[str, str] | None:
    """(section, reward term) of an unknown top-level key that is a reward or tool-shaping parameter, else None."""
    from hello_agents_rl.rewards.terms import TERMS, TOOL_REWARD_KEYS

    if key in TOOL_REWARD_KEYS:
        return "tool_reward", key
    term = next((name for name, term in TERMS.items() if key in term.params or key == term.weight_key), None)
    return ("reward_config", term) if term else None


def check_tools(tools: list[Any], environment: Any, algorithm: str | None = None, tool_reward: dict | None = None,
                max_tool_turns: int = 1, reward_type: Any = None, reward_config: dict | None = None) -> None:
    if not tools and environment is None and not tool_reward:
        return
    from hello_agents_rl.rewards import build_reward
    from hello_agents_rl.rollouts.checks import check_agentic  # resolves and checks tools without loading a model

    reward = build_reward(reward_type, reward_config) if reward_type is not None else None
    check_agentic(tools, environment, algorithm, tool_reward, max_tool_turns, reward)


def task_named(dataset: Any, params: dict[str, Any] | None = None, dataset_path: str | None = None) -> Any:
    """The task `dataset` names, its parameters checked by the task's own schema; None for rows of the user's own."""
    from hello_agents_rl.tasks import names_a_task, task_for  # an unknown task or a refused parameter, named

    if not names_a_task(dataset):
        return None
    if not isinstance(dataset, str):
        return task_for(dataset, params, dataset_path)
    try:
        key = json.dumps(params or {}, sort_keys=True)
    except (TypeError, ValueError):  # parameters JSON cannot hold: the task's schema says what is wrong
        return task_for(dataset, params, dataset_path)
    return _cached_task(dataset, key, dataset_path)


@functools.lru_cache(maxsize=64)
def _cached_task(dataset: str, params: str, dataset_path: str | None) -> Any:
    """One validation per task and parameters: a reasoning-gym task's check draws a question in a child process."""
    from hello_agents_rl.tasks import task_for

    return task_for(dataset, json.loads(params), dataset_path)


def task_defaults(task: Any, fields: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """What a run that names `task` takes from it where it gives none of its own: the task's tools (or its
    environment) and its tool-turn limit, unless the run brings its own tools, environment or agent; its reward,
    unless the run sets reward_type. `fields`: the config's keys; `given`: those the user set."""
    if task is None:
        return {}
    found: dict[str, Any] = {}
    if not given & {"tools", "environment", "agent"}:
        tools, environment = task.tools(), task.environment()
        if tools and "tools" in fields:
            found["tools"] = tools
        if environment is not None and "environment" in fields:
            found["environment"] = environment
    if task.max_tool_turns and "max_tool_turns" in fields and not given & {"max_tool_turns", "agent"}:
        found["max_tool_turns"] = task.max_tool_turns
    if task.reward is not None and "reward_type" in fields and "reward_type" not in given:
        found["reward_type"] = task.reward
    return found


def task_class_of(dataset: Any) -> Any:
    """The class of the task `dataset` names (its splits, its checker), nothing constructed; None for the user's rows."""
    from hello_agents_rl.tasks import task_class

    return task_class(dataset)


def is_task_object(value: Any) -> bool:
    """A Task class or object given in Python as `dataset`."""
    from hello_agents_rl.tasks import is_task_object as task_object

    return task_object(value)


def check_task_ref(ref: str, key: str) -> None:
    from hello_agents_rl.tasks.reasoning_gym import check_ref  # the task, its parameters and the row named

    check_ref(ref, key)


def check_vllm_installed() -> None:
    """Whether a GPU is visible needs torch: trainers/preflight.py checks that, still before the model loads."""
    if find_spec("vllm") is None:
        raise ValueError("`use_vllm`: vLLM is not installed; pip install 'hello-agents-rl[vllm]' or set use_vllm: false")


def check_agent_keys(agent: Any, tools: list[Any], environment: Any, max_tool_turns: int, turns_given: bool
                     ) -> dict[str, Any]:
    """The agent keys checked, and the values they imply: hello-agents Tools given as `tools` train as the SimpleAgent
    that would send them (`agent`), and an agent's tool-turn limit is `max_tool_turns`."""
    from hello_agents_rl.rollouts.agent_spec import agent_spec, implicit_agent, is_hello_agents_tool

    if isinstance(agent, str):  # the CLI, YAML or MCP: an agent is an object, made in Python
        raise ValueError(f"`agent`: {agent!r} is text, and an agent is a Python object: give it in Python, "
                         "RLTrainingTool().run({..., \"agent\": agent}); on the CLI, in YAML or over MCP give its "
                         "tools as `tools` (module:function names) instead")
    theirs = [t for t in tools or [] if is_hello_agents_tool(t)]
    if theirs and len(theirs) < len(tools):
        raise ValueError("`tools`: hello-agents Tools mixed with other tools; give either hello-agents Tools (or one "
                         "ToolRegistry), which train as the agent sends them, or functions and built-in names")
    if (theirs or agent is not None) and environment is not None:
        raise ValueError("`environment`: an agent's tools are its registry's; drop `environment` or the agent")
    if tools and agent is not None:
        raise ValueError("`tools`: the agent's tools are its tool_registry's, and training uses those alone; drop "
                         "`tools`, or register them with the agent (hello-agents Tools)")
    if not theirs and agent is None:
        return {}
    agent = agent if agent is not None else implicit_agent(theirs)
    limit = agent_spec(agent).max_tool_turns
    if turns_given and max_tool_turns != limit:
        raise ValueError(f"`max_tool_turns`: {max_tool_turns}, but the agent allows {limit} tool rounds, which "
                         "training uses; drop max_tool_turns or change the agent's max_tool_iterations/max_steps")
    return {"agent": agent, "tools": [], "max_tool_turns": limit}
