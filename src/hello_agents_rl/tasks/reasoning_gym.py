"""Third-party tasks from reasoning-gym: `dataset: "reasoning_gym:<task>"`, `dataset_config: {...}`.

reasoning-gym (an optional extra: `pip install 'hello-agents-rl[tasks]'`) has 100+ procedural generators, each
with its own answer checker (`score_answer`); we use both as they are. Entry i of a generator comes from
`Random(seed + i)`, so train and test take disjoint seed ranges ([seed, seed + size) and [TEST_SEED, TEST_SEED +
size)) and, because two seeds can still draw the same question, every train question whose text is in the test
split is dropped (checked, not assumed). A row carries `task_ref` (task, parameters, seed, index): the checker
(rewards/correctness.py) regenerates that entry and scores the answer against it, so no metadata has to survive a JSON
round trip.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hello_agents_rl.errors import ConfigError, did_you_mean
from hello_agents_rl.rewards.task_library import draw, library, task_ref
from hello_agents_rl.tasks.base import Task, subsample
from hello_agents_rl.tasks.formatting import build_messages

TASK_PREFIX = "reasoning_gym:"  # `dataset: "reasoning_gym:<task>"`: a reasoning-gym generator
TEST_SEED = 1_000_000_000  # fixed: the held-out split never moves with the run's seed
OWN_KEYS = ("seed",)  # set by the split, never by the user
SYSTEM_PROMPT = "Solve the task. End your reply with a last line 'Final Answer: <answer>', the answer alone."


def is_task_name(dataset: object) -> bool:
    return isinstance(dataset, str) and dataset.startswith(TASK_PREFIX)


def check(dataset: str, params: dict[str, Any]) -> None:
    """ConfigError for an unknown task (with a did-you-mean) or a parameter its generator refuses; loads no model."""
    name = dataset.removeprefix(TASK_PREFIX)
    registry = library().DATASETS
    if name not in registry:
        raise ConfigError(f"`dataset`: unknown reasoning-gym task {name!r}{did_you_mean(name, registry)} "
                          f"(tasks: {', '.join(sorted(registry))})")
    config_cls = registry[name][1]
    fields = [f.name for f in dataclasses.fields(config_cls)]
    for key in _nested_keys(params):  # composite's sub-task configs too
        if key.rsplit(".", 1)[-1] in OWN_KEYS:
            raise ConfigError(f"`dataset_config.{key}`: set by the split (train and test take disjoint seeds); "
                              "remove it")
    for key in params:
        if key in OWN_KEYS:
            raise ConfigError(f"`dataset_config.{key}`: set by the split (train and test take disjoint seeds); "
                              "use the top-level `seed` to draw other training questions")
        if key not in fields:
            known = [f for f in fields if f not in OWN_KEYS]
            raise ConfigError(f"`dataset_config.{key}`: {name!r} has no parameter {key!r}{did_you_mean(key, known)} "
                              f"(it has: {', '.join(known)})")
    size = params.get("size", 500)
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= 100_000:
        raise ConfigError(f"`dataset_config.size`: questions per split, an integer in 1..100000 (got {size!r})")
    try:
        draw(name, params, TEST_SEED, 0, 1)  # one question, within the bound: a generator that hangs is found here
    except ConfigError as error:
        raise ConfigError(f"{error}; see its parameters: {', '.join(f for f in fields if f not in OWN_KEYS)}") from None


def check_ref(ref: Any, key: str = "task_ref") -> None:
    """A row's task_ref as load_dataset writes it: the task and parameters checked as `check` does, the row inside."""
    try:
        parsed = json.loads(ref) if isinstance(ref, str) else None
    except ValueError:
        parsed = None
    fields = {"task": str, "params": dict, "seed": int, "index": int}
    if not isinstance(parsed, dict) or set(parsed) != set(fields) or not all(
            isinstance(parsed[name], kind) and not isinstance(parsed[name], bool) for name, kind in fields.items()):
        raise ConfigError(f"`{key}`: not a task_ref; copy a row's `task_ref` from load_dataset (JSON with task, "
                          f"params, seed and index; got {str(ref)[:80]!r})")
    check(TASK_PREFIX + parsed["task"], parsed["params"])
    if not 0 <= parsed["index"] < parsed["params"].get("size", 500) or not 0 <= parsed["seed"] <= TEST_SEED:
        raise ConfigError(f"`{key}`: index {parsed['index']} or seed {parsed['seed']} names no row of this task; "
                          "copy a row's `task_ref` from load_dataset")


def _nested_keys(value: Any, where: str = "") -> list[str]:
    """The dotted keys of every dict below `value`'s top level (composite's sub-task configs)."""
    found: list[str] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        name = f"{where}.{key}" if where else str(key)
        if where and isinstance(value, dict):
            found.append(name)
        found += _nested_keys(item, name)
    return found


def split_seed(split: str, seed: int, size: int) -> int:
    if split == "test":
        return TEST_SEED
    if not 0 <= seed <= TEST_SEED - size:  # [seed, seed + size) must stay below the test range
        raise ConfigError(f"`seed`: {seed} + {size} training questions would reach the test seeds ({TEST_SEED}); "
                          "use a smaller seed")
    return seed


def entries(dataset: str, params: dict[str, Any], split: str, seed: int) -> list[tuple[str, str, Any]]:
    """(task_ref, question, answer) of one split; train questions that are in the test split are left out."""
    name = dataset.removeprefix(TASK_PREFIX)
    size = params.get("size", 500)
    start = split_seed(split, seed, size)
    drawn = draw(name, params, start, 0, size)
    held_out = {e["question"] for e in draw(name, params, TEST_SEED, 0, size)} if split != "test" else set()
    out = [(task_ref(name, params, start, index), e["question"], e["answer"])
           for index, e in enumerate(drawn) if e["question"] not in held_out]
    if not out:
        removed = f", and all {len(drawn)} are in the test split" if drawn else ""
        raise ConfigError(f"`dataset_config`: {name!r} gave no {split} questions: {len(drawn)} drawn{removed} "
                          f"(with {params or 'its default parameters'}). The task has few distinct questions: give a "
                          "smaller `size` (the test split takes that many) or widen the parameters that make them "
                          "vary (more digits, terms or words)")
    return out


class ReasoningGym(Task):
    """`dataset: reasoning_gym:<task>`: one reasoning-gym generator, its parameters as `dataset_config`, judged by its
    own checker (rows carry `task_ref`)."""

    name = TASK_PREFIX.rstrip(":")
    system_prompt = SYSTEM_PROMPT
    own_checker = True

    def __init__(self, dataset: str, dataset_config: dict[str, Any] | None = None,
                 dataset_path: str | None = None) -> None:
        params = {} if dataset_config is None else dataset_config
        if not isinstance(params, dict):
            raise ConfigError(f"`dataset_config`: a mapping of the task's parameters (got {params!r})")
        check(dataset, params)  # the generator's own parameters: reasoning-gym's dataclasses, not a schema of ours
        self.dataset, self.config, self.dataset_path = dataset, dict(params), dataset_path

    def rows(self, split: str, count: int | None = None, seed: int = 42,
             system_prompt: str | None = SYSTEM_PROMPT) -> Any:
        from datasets import Dataset

        rows: dict[str, list[Any]] = {"prompt": [], "completion": [], "ground_truth": [], "question": [],
                                      "task_ref": []}
        for ref, question, answer in entries(self.dataset, self.config, split, seed):
            rows["question"].append(question)
            rows["prompt"].append(build_messages(question, system_prompt))
            # a task whose checker verifies any valid solution (graph_color, rush_hour...) has no answer to imitate
            rows["completion"].append([] if answer is None else [{"role": "assistant",
                                                                   "content": f"Final Answer: {answer}"}])
            rows["ground_truth"].append("" if answer is None else str(answer))
            rows["task_ref"].append(ref)
        return subsample(Dataset.from_dict(rows), count, seed)
