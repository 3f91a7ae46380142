"""reasoning-gym's entries, drawn in a child process: each within a bound, and the same in every process.

A generator is pure Python that may never end for some parameters (basic_arithmetic with max_digits 20 loops
over ~10^10 divisors). A thread cannot be stopped, so entries are drawn in a child process that is killed when
one takes longer than `DRAW_SECONDS`; that becomes a ConfigError naming the parameters.

The child is a warm worker (hello_agents_rl/bounded.py) with the library loaded (importing it takes seconds), which
never imports the user's `__main__` (a script without a main guard would run again there), and with a fixed hash
seed: some tasks (polynomial_multiplication, word_ladder, ...) order sets by hash, so their entry i would differ
from one process to the next, and a row's task_ref would name another question when the reward or a later
`create_reward` regenerates it. The drawn entries are kept here, for the checker to score against the very entry the row was made from.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from hello_agents_rl import bounded
from hello_agents_rl.errors import ConfigError

INSTALL = "pip install 'hello-agents-rl[tasks]'"
DRAW_SECONDS = 30.0  # one entry, the generator's set-up included: far above any installed task's own
SIZE_KEYS = ("size",)  # how many questions, not how hard one is to draw
_PRELOAD = ("hello_agents_rl.rewards.task_library", "reasoning_gym.factory")
_KEPT_DRAWS = 8  # (task, parameters, seed) whose entries are kept: a run's train and test splits, with room
_drawn: OrderedDict[tuple[str, str, int], dict[int, dict[str, Any]]] = OrderedDict()
_lock = threading.Lock()


def library() -> Any:
    """reasoning_gym.factory, or a ConfigError that says how to install it."""
    try:
        import reasoning_gym.factory
    except ImportError as error:
        raise ConfigError(f"`dataset`: reasoning-gym tasks need the reasoning-gym package ({error}); {INSTALL}") from None
    return reasoning_gym.factory


@functools.lru_cache(maxsize=32)
def generator(name: str, params_json: str, seed: int) -> Any:
    """The task's dataset object, built in this process (its checker runs here)."""
    params = json.loads(params_json)
    if name == "composite" and isinstance(params.get("datasets"), list):  # sub-tasks as JSON: the library's specs
        from reasoning_gym.composite import DatasetSpec

        params["datasets"] = [DatasetSpec(**spec) if isinstance(spec, dict) else spec for spec in params["datasets"]]
    return library().create_dataset(name, seed=seed, **params)


def task_ref(name: str, params: dict[str, Any], seed: int, index: int) -> str:
    return json.dumps({"task": name, "params": params, "seed": seed, "index": index}, sort_keys=True)


def entry(ref: str) -> dict[str, Any]:
    """The entry a task_ref names: the one drawn for its row, or drawn now (bounded, as in any process)."""
    parsed = json.loads(ref)
    key = (parsed["task"], json.dumps(parsed["params"], sort_keys=True), parsed["seed"])
    with _lock:
        found = _drawn.get(key, {}).get(parsed["index"])
    if found is None:
        found = draw(parsed["task"], parsed["params"], parsed["seed"], parsed["index"], parsed["index"] + 1)[0]
    return found


def _draw_entries(name: str, params_json: str, seed: int, start: int, stop: int) -> Iterator[tuple[str, Any]]:
    """In the worker: build the generator and yield each entry, or the error that stopped it."""
    built = False
    try:
        drawn = generator(name, params_json, seed)
        built = True
        for index in range(start, min(stop, len(drawn))):
            yield "entry", drawn[index]
    except Exception as error:  # noqa: BLE001 - the parent turns it into a ConfigError
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        yield ("error" if built else "refused"), text


def draw(name: str, params: dict[str, Any], seed: int, start: int, stop: int,
         bound: float | None = None) -> list[dict[str, Any]]:
    """Entries [start, stop) of the generator at `seed`, kept for the checker; a ConfigError when the generator
    refuses the parameters, fails while drawing, or takes longer than `bound` seconds for one entry."""
    bound = DRAW_SECONDS if bound is None else bound
    params_json = json.dumps(params, sort_keys=True)
    entries: list[dict[str, Any]] = []
    failure: ConfigError | None = None
    items = bounded.stream(f"{__name__}:_draw_entries", name, params_json, seed, start, stop, bound=bound,
                           preload=_PRELOAD)
    try:
        for kind, value in items:  # read to the end, even past a failure, so that the worker goes back warm
            if kind == "refused":
                failure = ConfigError(f"`dataset_config`: {name!r} refuses {params}: {value}")
            elif kind == "error":
                failure = ConfigError(_failed(name, params, len(entries), value))
            else:
                entries.append(value)
    except bounded.Overran:
        raise ConfigError(_too_slow(name, params, start + len(entries), bound)) from None
    except bounded.WorkerDied as died:
        raise ConfigError(f"`dataset_config`: drawing {name!r} questions with {params} ended the process that drew "
                          f"them ({died}); try other parameters") from None
    finally:
        items.close()
    if failure is not None:
        raise failure
    _keep((name, params_json, seed), dict(zip(range(start, stop), entries)))
    return entries


def _keep(key: tuple[str, str, int], entries: dict[int, dict[str, Any]]) -> None:
    with _lock:
        _drawn.setdefault(key, {}).update(entries)
        _drawn.move_to_end(key)
        while len(_drawn) > _KEPT_DRAWS:
            _drawn.popitem(last=False)


def _too_slow(name: str, params: dict[str, Any], index: int, bound: float) -> str:
    """Names the parameters that set how hard a question is: the one given, or all of them."""
    hard = {key: value for key, value in params.items() if key not in SIZE_KEYS}
    key = f"dataset_config.{next(iter(hard))}" if len(hard) == 1 else "dataset_config" if hard else "dataset"
    given = ", ".join(f"{k}={v!r}" for k, v in hard.items()) or "its default parameters"
    return (f"`{key}`: drawing question {index} of {name!r} took longer than {bound:g} s with {given}, and the "
            "generator may never finish; give smaller values (fewer digits, terms or cells)")


def _failed(name: str, params: dict[str, Any], drawn: int, error: str) -> str:
    """A generator that took its parameters but broke while drawing: often a file it reads has nothing usable."""
    files = [f"{key}={value!r}" for key, value in params.items() if isinstance(value, str) and value]
    hint = (f"check what {' and '.join(files)} holds (the words or rows the task draws from)" if files
            else "try other parameters")
    return f"`dataset_config`: {name!r} drew {drawn} questions with {params}, then failed ({error}); {hint}"
