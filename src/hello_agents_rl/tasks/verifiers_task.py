"""A verifiers taskset as a task (`pip install verifiers`, 0.4's `verifiers.v1`): its tasks' prompts as rows, its
toolsets' tools as tools, and its own `@vf.reward` functions as the reward, scored offline on a trace built from
the prompt and the rollout (no model server, no sandbox).

    import verifiers.v1 as vf
    from hello_agents_rl.tasks.verifiers_task import from_verifiers
    RLTrainingTool().run({"action": "train", "algorithm": "grpo", "dataset": from_verifiers(MyTaskset(MyConfig())), ...})

What does not fit, and says so: a reward that needs verifiers' runtime (a sandbox, an LLM judge) is not scored
offline; async tools are refused. A toolset is set up once for the run (verifiers sets one up per rollout).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.tasks.base import HELD_OUT_EVERY, Task, in_split, subsample


class VerifiersTask(Task):
    """A verifiers v1 Taskset, as training and evaluation read a task (docs/tasks.md)."""

    name = "verifiers"
    row_columns = ("task_index",)  # which task's rewards score a rollout

    def __init__(self, taskset: Any, held_out_every: int = HELD_OUT_EVERY) -> None:
        super().__init__()
        self.taskset, self.held_out_every = taskset, held_out_every
        self.tasks = list(taskset)  # iterating stamps each task's index
        if not self.tasks:
            raise ConfigError(f"`dataset`: the verifiers taskset {type(taskset).__name__} loads no tasks")
        self._tools: list[Any] | None = None
        needs_runtime = [hook.__name__ for hook in self.tasks[0].hooks("reward")
                         if (p := inspect.signature(hook).parameters.get("runtime")) is not None
                         and p.default is inspect.Parameter.empty]
        if needs_runtime:  # verifiers skips these without its runtime: refused before any model loads
            raise ConfigError(f"`dataset`: the verifiers rewards {', '.join(needs_runtime)} need verifiers' runtime (a "
                              "sandbox or a judge model) and cannot be scored offline; give them a default runtime "
                              "of None, or train with rewards that read the trace alone")

    def rows(self, split: str, count: int | None = None, seed: int = 42, system_prompt: str | None = None) -> Any:
        """Each task once (the test split every `held_out_every`-th task, training the rest); `count` by a seeded
        shuffle. `task_index` tells the reward which task a row is."""
        from datasets import Dataset

        chosen = [i for i in range(len(self.tasks)) if in_split(i, split, self.held_out_every)]
        rows: dict[str, list[Any]] = {"prompt": [], "completion": [], "ground_truth": [], "question": [],
                                      "task_index": []}
        for index in chosen:
            messages = prompt_messages(self.tasks[index].data, system_prompt)
            answer = getattr(self.tasks[index].data, "answer", None)
            rows["prompt"].append(messages)
            rows["completion"].append([] if answer is None else [{"role": "assistant", "content": str(answer)}])
            rows["ground_truth"].append("" if answer is None else str(answer))
            rows["question"].append(next((m["content"] for m in reversed(messages) if m["role"] == "user"), ""))
            rows["task_index"].append(index)
        return subsample(Dataset.from_dict(rows), count, seed)

    def tools(self) -> list[Any]:
        """The @vf.tool methods of the taskset's and its tasks' toolsets, bound to toolsets set up once."""
        if self._tools is None:
            task = self.tasks[0]
            toolsets = [*type(self.taskset).toolsets(self.taskset.config), *type(task).toolsets(task.config)]
            self._tools = []
            for toolset in toolsets:
                asyncio.run(toolset.setup())
                asyncio.run(toolset.setup_task(task))
                for method in tool_methods(toolset):
                    if inspect.iscoroutinefunction(method):
                        raise ConfigError(f"`dataset`: the verifiers tool {method.__name__} is async; TRL's tool loop "
                                          "calls plain functions: write it with `def`")
                    self._tools.append(method)
        return self._tools

    def reward(self, completion: str, ground_truth: str, task_index: int = 0, trajectory: Any = None) -> float:
        """The task's own @vf.reward functions on a trace of its prompt and this rollout (weighted sum)."""
        task = self.tasks[int(task_index)]
        trace = _trace(task, trajectory if isinstance(trajectory, list) else
                       [{"role": "assistant", "content": completion}])
        asyncio.run(task.score(trace, runtime=None))
        unscored = sorted(name for name, value in trace.rewards.items() if value is None)
        expected = {hook.__name__ for hook in task.hooks("reward")} - set(trace.rewards)
        if unscored or expected:
            raise ConfigError(f"`dataset`: the verifiers rewards {', '.join(unscored or sorted(expected))} need "
                              "verifiers' runtime (a sandbox or a judge model) and cannot be scored offline")
        return float(trace.reward)


def from_verifiers(taskset: Any, held_out_every: int = HELD_OUT_EVERY) -> VerifiersTask:
    """A verifiers v1 Taskset as `dataset`."""
    return VerifiersTask(taskset, held_out_every)


def prompt_messages(data: Any, system_prompt: str | None = None) -> list[dict[str, Any]]:
    """The task's prompt as chat messages, its own system prompt first (the run's `system_prompt` replaces it)."""
    system = system_prompt or getattr(data, "system_prompt", None)
    messages = [{"role": "system", "content": system}] if system else []
    if isinstance(data.prompt, str):
        return [*messages, {"role": "user", "content": data.prompt}]
    return [*messages, *(m.model_dump(exclude_none=True) for m in data.prompt or [])]


def tool_methods(toolset: Any) -> list[Any]:
    """The methods @vf.tool marks (verifiers' own discovery: the `tool` attribute it sets)."""
    names = {name for klass in type(toolset).__mro__ for name, value in vars(klass).items()
             if callable(value) and getattr(value, "tool", False) is True}
    return [getattr(toolset, name) for name in sorted(names)]


def _message(message: dict[str, Any]) -> Any:
    """A TRL chat message as verifiers' Message (its tool calls flat: id, name, arguments as JSON text)."""
    import verifiers.v1 as vf
    from pydantic import TypeAdapter

    message = {k: v for k, v in message.items() if v is not None}
    if message.get("tool_calls"):
        message["tool_calls"] = [
            {"id": call.get("id", f"call_{i}"), "name": call["function"]["name"],
             "arguments": call["function"]["arguments"] if isinstance(call["function"]["arguments"], str)
             else json.dumps(call["function"]["arguments"])}
            for i, call in enumerate(message["tool_calls"])]
    if message.get("role") == "tool":
        message.setdefault("tool_call_id", "call_0")
    return TypeAdapter(vf.Message).validate_python(message)


def _trace(task: Any, completion: list[dict[str, Any]]) -> Any:
    """The trace verifiers scores: the task's prompt, then the rollout's messages (the assistant's as sampled)."""
    import verifiers.v1 as vf

    prompt = prompt_messages(task.data)
    nodes: list[Any] = []
    for index, message in enumerate([*prompt, *completion]):
        parsed = _message(message)
        nodes.append(vf.MessageNode(parent=index - 1 if index else None, message=parsed,
                                    sampled=index >= len(prompt) and parsed.role == "assistant"))
    return vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                    agent=vf.AgentInfo(config=vf.AgentConfig(), name="hello-agents-rl", trainable=True),
                    nodes=nodes, is_completed=True, ok=True)
