"""Correctness by a task's own checker: a row whose `task_ref` names a reasoning-gym entry is scored by that
task's `score_answer`, never by a rewrite of it. The entry is regenerated from (task, parameters, seed, index).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hello_agents_rl.errors import ConfigError

INSTALL = "pip install 'hello-agents-rl[tasks]'"


def library() -> Any:
    """reasoning_gym.factory, or a ConfigError that says how to install it."""
    try:
        import reasoning_gym.factory
    except ImportError as error:
        raise ConfigError(f"`dataset`: reasoning-gym tasks need the reasoning-gym package ({error}); {INSTALL}") from None
    return reasoning_gym.factory


@functools.lru_cache(maxsize=32)
def generator(name: str, params_json: str, seed: int) -> Any:
    return library().create_dataset(name, seed=seed, **json.loads(params_json))


@functools.lru_cache(maxsize=4096)
def _entry(name: str, params_json: str, seed: int, index: int) -> dict[str, Any]:
    return generator(name, params_json, seed)[index]  # regenerating an entry is not free


def task_ref(name: str, params: dict[str, Any], seed: int, index: int) -> str:
    return json.dumps({"task": name, "params": params, "seed": seed, "index": index}, sort_keys=True)


def task_score(ref: str, answer: str | None) -> float:
    """The task's own checker on `answer` (text, possibly a list or a grid written out): 0..1."""
    parsed = json.loads(ref)
    key = (parsed["task"], json.dumps(parsed["params"], sort_keys=True), parsed["seed"])
    return float(generator(*key).score_answer(answer, _entry(*key, parsed["index"])))
