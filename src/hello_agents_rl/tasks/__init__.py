"""Tasks: each one object that owns its rows, tools, prompt, stopping rule, reward and metrics (`base.Task`).

`task_for(dataset, dataset_config)` finds the task a run names: a built-in (`BUILT_IN`), a reasoning-gym generator
(`reasoning_gym:<task>`), or the user's own Task class by import string (`my_tasks:Sorting`) or as the object itself.
A file or a datasets.Dataset names no task: its rows are the user's own (`custom`). Pure Python above the rewards,
so that the config layer validates `dataset_config` here without torch.
"""

from __future__ import annotations

import inspect
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.imports import IMPORT_STRING, import_named
from hello_agents_rl.paths import looks_like_local_path
from hello_agents_rl.tasks.arithmetic import Arithmetic
from hello_agents_rl.tasks.base import Task, TaskConfig
from hello_agents_rl.tasks.formatting import build_messages
from hello_agents_rl.tasks.gsm8k import Gsm8k
from hello_agents_rl.tasks.lookups import Lookups
from hello_agents_rl.tasks.multiplication import Multiplication
from hello_agents_rl.tasks.reasoning_gym import TASK_PREFIX, ReasoningGym

BUILT_IN: dict[str, type[Task]] = {task.name: task for task in (Gsm8k, Arithmetic, Multiplication, Lookups)}


def is_task_object(dataset: Any) -> bool:
    """A Task class or object, given in Python."""
    return isinstance(dataset, Task) or (inspect.isclass(dataset) and issubclass(dataset, Task))


def imports_a_task(dataset: str) -> bool:
    """A `dataset` string that imports the user's own Task class ('my_module:MyTask'): code, as tools are."""
    return (IMPORT_STRING.fullmatch(dataset) is not None and not dataset.startswith(TASK_PREFIX)
            and not looks_like_local_path(dataset))


def names_a_task(dataset: Any) -> bool:
    """Whether `dataset` names a task (as opposed to a file of rows or a datasets.Dataset)."""
    if not isinstance(dataset, str):
        return is_task_object(dataset)
    return dataset in BUILT_IN or dataset.startswith(TASK_PREFIX) or imports_a_task(dataset)


def task_class(dataset: Any) -> type[Task] | None:
    """The class of the task `dataset` names, nothing constructed (its splits and checker are the class's); None for
    rows of the user's own."""
    if isinstance(dataset, Task):
        return type(dataset)
    if not names_a_task(dataset):
        return None
    if isinstance(dataset, str) and dataset.startswith(TASK_PREFIX):
        return ReasoningGym
    if isinstance(dataset, str) and dataset in BUILT_IN:
        return BUILT_IN[dataset]
    found = import_named(dataset, "dataset") if isinstance(dataset, str) else dataset
    if not (inspect.isclass(found) and issubclass(found, Task)):
        raise ConfigError(f"`dataset`: {dataset!r} is {type(found).__name__} {found!r}, not a Task class. Fix: name a "
                          "subclass of hello_agents_rl.tasks.Task ('my_module:MyTask'), or a .jsonl/.csv file")
    return found


def task_for(dataset: Any, dataset_config: dict[str, Any] | None = None, dataset_path: str | None = None
             ) -> Task | None:
    """The task `dataset` names, its `dataset_config` validated (ConfigError naming the key); None for rows of the
    user's own (a file, a datasets.Dataset)."""
    if isinstance(dataset, Task):
        if dataset_config:
            raise ConfigError("`dataset_config`: the task is given as an object, already configured; remove "
                              "dataset_config or give the task's class")
        return dataset
    cls = task_class(dataset)
    if cls is None:
        return None
    if cls is ReasoningGym:
        return ReasoningGym(dataset, dataset_config, dataset_path)
    return cls(dataset_config, dataset_path)


__all__ = ["BUILT_IN", "Task", "TaskConfig", "build_messages", "imports_a_task", "is_task_object", "names_a_task",
           "task_class", "task_for"]
