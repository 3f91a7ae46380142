"""An OpenEnv environment (`pip install openenv-core`) as a task: one in-process `Environment` per rollout, its
Action classes as tools (one tool an Action, its fields the arguments), each call an `env.step`, and its own rubric's
rewards, summed over the episode, as the reward (TRL's `get_reward`). Nothing is served: no Docker, no HTTP.

    from hello_agents_rl.tasks.openenv_task import from_openenv
    task = from_openenv(GuessNumberEnvironment, [GuessAction, HintAction], "Find the secret number.",
                        resets=[{"seed": s} for s in range(100)])
    RLTrainingTool().run({"action": "train", "algorithm": "grpo", "dataset": task, ...})

Each row is one episode: the prompt, and the keyword arguments `reset` takes (`resets`). TRL's environment_factory
has the same shape: `reset(**row)` starts an episode, its public methods are the tools.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.tasks.base import HELD_OUT_EVERY, Task, in_split, subsample
from hello_agents_rl.tasks.formatting import build_messages


def _tool_name(action: Any) -> str:
    """GuessAction -> guess: the class's name in snake case, without the Action suffix."""
    name = action.__name__.removesuffix("Action") or action.__name__
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def observation_text(observation: Any) -> str:
    """What the model reads of an observation: its `message` field, else its own fields as JSON."""
    text = getattr(observation, "message", None)
    if not isinstance(text, str):
        text = json.dumps(observation.model_dump(exclude={"done", "reward", "metadata"}), default=str)
    return text + ("\n(the episode is over)" if observation.done else "")


def _action_tool(action: Any) -> Callable[..., str]:
    """A method that builds `action` from its arguments and steps the environment: the schema TRL reads comes from
    the Action's fields (their types and descriptions) and its docstring."""
    from openenv.core.env_server.types import Action

    fields = {name: field for name, field in action.model_fields.items() if name not in Action.model_fields}

    def tool(self: Any, **arguments: Any) -> str:
        return self._step(action(**arguments))  # the environment's step, on the Action these arguments make

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=field.annotation,
                          **({} if field.is_required() else {"default": field.default}))
        for name, field in fields.items()]
    tool.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = {**{name: field.annotation for name, field in fields.items()}, "return": str}
    summary = (inspect.getdoc(action) or f"Take the action {action.__name__}.").splitlines()[0]
    args = "".join(f"\n    {name}: {field.description or name.replace('_', ' ')}" for name, field in fields.items())
    tool.__doc__ = summary + (f"\n\nArgs:{args}" if args else "")
    tool.__name__ = tool.__qualname__ = _tool_name(action)
    return tool


def openenv_environment(environment: Callable[[], Any], actions: list[type]) -> type:
    """A class in TRL's environment_factory shape over an OpenEnv Environment: one per rollout, `reset(**row)` with
    the keywords the environment's reset takes, a tool per Action, and `get_reward()`: the episode's summed reward."""
    if not actions:
        raise ConfigError("`dataset`: give the OpenEnv environment's Action classes: each becomes a tool")
    takes = inspect.signature(environment().reset).parameters  # one built here: a broken factory fails now

    def __init__(self: Any) -> None:
        self.env, self.reward, self.done = environment(), 0.0, False

    def reset(self: Any, **row: Any) -> str:
        keywords = {key: value for key, value in row.items() if key in takes and key != "prompt" and value is not None}
        observation = self.env.reset(**keywords)
        self.reward, self.done = 0.0, observation.done
        return observation_text(observation)

    def _step(self: Any, action: Any) -> str:
        if self.done:
            return "The episode is over: no more actions."
        observation = self.env.step(action)
        self.reward += float(observation.reward or 0.0)
        self.done = observation.done
        return observation_text(observation)

    def get_reward(self: Any) -> float:
        return self.reward

    members: dict[str, Any] = {"__init__": __init__, "reset": reset, "_step": _step, "get_reward": get_reward}
    tools = {tool.__name__: tool for tool in map(_action_tool, actions)}
    if clash := sorted(set(tools) & set(members)):
        raise ConfigError(f"`dataset`: the Action {clash[0]!r} would be a tool named like the adapter's own method; "
                          "rename the Action class")
    return type(getattr(environment, "__name__", "Environment"), (), {**members, **tools})


class OpenEnvTask(Task):
    """Episodes of an OpenEnv environment, as training and evaluation read a task (docs/tasks.md)."""

    name = "openenv"
    max_tool_turns = 8

    def __init__(self, environment: Callable[[], Any], actions: list[type], prompt: str,
                 resets: list[dict[str, Any]], system_prompt: str | None = None,
                 held_out_every: int = HELD_OUT_EVERY) -> None:
        super().__init__()
        if not resets or not all(isinstance(r, dict) for r in resets):
            raise ConfigError("`dataset`: `resets` is a list of the keyword arguments of reset, one per episode")
        self._environment = openenv_environment(environment, actions)
        self.prompt, self.resets, self.system_prompt = prompt, resets, system_prompt
        self.row_columns = tuple(sorted({key for reset in resets for key in reset}))  # what reset(**row) takes
        self.held_out_every = held_out_every

    def environment(self) -> type:
        return self._environment

    def rows(self, split: str, count: int | None = None, seed: int = 42, system_prompt: str | None = None) -> Any:
        from datasets import Dataset

        chosen = [r for i, r in enumerate(self.resets) if in_split(i, split, self.held_out_every)]
        keys = self.row_columns
        rows: dict[str, list[Any]] = {
            "prompt": [build_messages(self.prompt, system_prompt or self.system_prompt) for _ in chosen],
            "completion": [[] for _ in chosen], "ground_truth": ["" for _ in chosen],
            "question": [self.prompt for _ in chosen], **{key: [r.get(key) for r in chosen] for key in keys}}
        return subsample(Dataset.from_dict(rows), count, seed)

    @staticmethod
    def reward(completion: str, ground_truth: str) -> float:
        """Nothing beyond the environment's own: its rubric's rewards are the reward (get_reward, weight 1)."""
        return 0.0


def from_openenv(environment: Callable[[], Any], actions: list[type], prompt: str, resets: list[dict[str, Any]],
                 system_prompt: str | None = None, held_out_every: int = HELD_OUT_EVERY) -> OpenEnvTask:
    """An OpenEnv Environment class (or factory) and its Action classes as `dataset`."""
    return OpenEnvTask(environment, actions, prompt, resets, system_prompt, held_out_every)
