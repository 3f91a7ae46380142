"""The guard around every tool handed to TRL or to the rollout loop.

An exception (KeyboardInterrupt and SystemExit too, sync or async), a hang (past the run's `tool_timeout`) or a
result that is not plain data becomes a `ToolFailure`, which the tool loop turns into an `{'error': ...}` tool
message and counts as a failed call (TRL's `tools/failure_frequency`); training goes on. Long results are
truncated. A hung sync call's thread cannot be stopped, so at most `MAX_HUNG_CALLS` of one tool may still be
running: further calls of that tool fail at once instead of starting more threads. An environment whose `reset`
raises on a row is counted, and its tools fail for that rollout. `ToolStats` counts what the guards saw.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hello_agents_rl.rollouts.tool_registry import ToolFailure, public_methods

TOOL_TIMEOUT_S = 30.0  # the default of the tool_timeout key (kept here: the config layer may not be imported)
MAX_RESULT_CHARS = 2000  # longer results are cut: they would crowd out the completion budget anyway
MAX_HUNG_CALLS = 4  # calls of one tool still running past tool_timeout; beyond them its calls fail without a thread
RESET_FAILURE = "_hello_agents_reset_failure"  # set on an environment instance whose reset raised for its row


@dataclass
class ToolStats:
    """Calls seen by the guards of one run (they share it); TRL keeps its own per-step frequencies."""

    timeout: float = TOOL_TIMEOUT_S  # seconds a call may take: the run's tool_timeout
    calls: int = 0
    failures: int = 0
    timeouts: int = 0
    junk_results: int = 0
    refused: int = 0  # calls not made: that tool's hung calls were still running
    reset_failures: int = 0
    first_error: str | None = None
    hung: dict[str, int] = field(default_factory=dict)  # timed-out calls per tool name (the doctor reads it)
    calls_by_tool: dict[str, int] = field(default_factory=dict)  # an agent's Finish and Thought among them
    _running: dict[str, list[threading.Thread]] = field(default_factory=dict, repr=False)  # hung, still alive
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def called(self, name: str) -> None:
        with self._lock:
            self.calls += 1
            self.calls_by_tool[name] = self.calls_by_tool.get(name, 0) + 1

    def failed(self, message: str, kind: str | None = None) -> ToolFailure:
        with self._lock:
            self.failures += 1
            if kind == "timeout":
                self.timeouts += 1
            elif kind == "junk":
                self.junk_results += 1
            elif kind == "refused":
                self.refused += 1
            self.first_error = self.first_error or message
        return ToolFailure(message)

    def timed_out(self, name: str, worker: threading.Thread | None = None) -> ToolFailure:
        with self._lock:
            self.hung[name] = self.hung.get(name, 0) + 1
            if worker is not None:
                self._running.setdefault(name, []).append(worker)
        return self.failed(f"{name}: no answer after {self.timeout:g} s (tool_timeout)", "timeout")

    def still_running(self, name: str) -> int:
        """How many of `name`'s timed-out calls have not returned yet."""
        with self._lock:
            alive = [worker for worker in self._running.get(name, []) if worker.is_alive()]
            self._running[name] = alive
            return len(alive)

    def reset_failed(self, message: str) -> None:
        with self._lock:
            self.reset_failures += 1
            self.first_error = self.first_error or message

    def summary(self) -> dict[str, Any]:
        return {"calls": self.calls, "calls_by_tool": dict(sorted(self.calls_by_tool.items())),
                "failures": self.failures, "timeouts": self.timeouts,
                "junk_results": self.junk_results, "refused": self.refused, "reset_failures": self.reset_failures,
                "hung_by_tool": dict(self.hung), "tool_timeout_s": self.timeout, "first_error": self.first_error}


def _plain_result(name: str, value: Any) -> str | None:
    """The tool message text, or None for junk (not plain data, NaN, nothing)."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool) or isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            return None
        text = repr(value)
    elif isinstance(value, (dict, list)):
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            return None
    else:
        return None
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"... [truncated {len(text) - MAX_RESULT_CHARS} characters]"
    return text


def _call_with_timeout(fn: Callable[..., Any], args: tuple, kwargs: dict, timeout: float
                       ) -> tuple[str, Any, threading.Thread]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - reported to the caller as a failed call
            box["error"] = error

    worker = threading.Thread(target=target, daemon=True, name=f"tool-{getattr(fn, '__name__', 'fn')}")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return "timeout", None, worker
    return ("error", box["error"], worker) if "error" in box else ("ok", box.get("value"), worker)


def _text_or_failure(name: str, value: Any, stats: ToolStats) -> str:
    text = _plain_result(name, value)
    if text is None:
        raise stats.failed(f"{name}: returned {type(value).__name__} {str(value)[:60]!r}, not text or JSON data", "junk")
    return text


def _error(name: str, error: BaseException, stats: ToolStats) -> ToolFailure:
    return stats.failed(f"{name}: {type(error).__name__}: {error}"[:500])


def guard(fn: Callable[..., Any], stats: ToolStats) -> Callable[..., Any]:
    """`fn` with the same name, docstring and signature (TRL's schema), every failure a ToolFailure."""
    name = getattr(fn, "__name__", "tool")
    if isinstance(fn, dict) and hasattr(fn, "with_call"):  # a schema given as is (an agent's tool): guard its call
        guarded_tool = fn.with_call(guard(fn.call, stats))
        guarded_tool.stats = stats
        return guarded_tool
    if inspect.iscoroutinefunction(fn):  # TRL awaits async tools on its event loop: guard them there
        return _guard_async(fn, stats)

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> str:
        stats.called(name)
        running = stats.still_running(name)
        if running >= MAX_HUNG_CALLS:  # a thread per call would pile up without bound
            raise stats.failed(f"{name}: hung {stats.hung[name]} times, {running} calls still running past "
                               f"tool_timeout {stats.timeout:g} s; not called again until one returns", "refused")
        status, value, worker = _call_with_timeout(fn, args, kwargs, stats.timeout)
        if status == "timeout":
            raise stats.timed_out(name, worker)
        if status == "error":
            raise _error(name, value, stats)
        return _text_or_failure(name, value, stats)

    guarded.stats = stats  # type: ignore[attr-defined]  # how a run finds its counts again
    return guarded


def _guard_async(fn: Callable[..., Any], stats: ToolStats) -> Callable[..., Any]:
    import asyncio

    name = getattr(fn, "__name__", "tool")

    async def contained(*args: Any, **kwargs: Any) -> tuple[str, Any]:
        # Caught inside the coroutine: before Python 3.12 wait_for runs it as its own task, and a KeyboardInterrupt
        # or SystemExit leaving a task's step is re-raised by the event loop itself (TRL's loop thread would die).
        try:
            return "ok", await fn(*args, **kwargs)
        except asyncio.CancelledError:
            raise  # the timeout (or the loop shutting down) cancelling the call
        except BaseException as error:  # noqa: BLE001 - a failed call, as in a sync tool
            return "error", error

    @functools.wraps(fn)
    async def guarded(*args: Any, **kwargs: Any) -> str:
        stats.called(name)
        try:
            status, value = await asyncio.wait_for(contained(*args, **kwargs), stats.timeout)
        except asyncio.TimeoutError:
            raise stats.timed_out(name) from None  # cancelled: no thread lives on
        if status == "error":
            raise _error(name, value, stats) from None
        return _text_or_failure(name, value, stats)

    guarded.stats = stats  # type: ignore[attr-defined]
    return guarded


def guarded_environment(cls: type, stats: ToolStats) -> type:
    """A subclass of `cls` whose tool methods and reset are guarded; same name, so TRL's reward column keeps it."""
    methods = {name: _guard_method(fn, stats) for name, fn in public_methods(cls).items()}
    return type(cls.__name__, (cls,), {**methods, "reset": _guard_reset(cls, stats), "__module__": cls.__module__,
                                       "__doc__": cls.__doc__, "__qualname__": cls.__qualname__})


def reset_failure(environment: Any) -> str | None:
    """Why this rollout's environment could not be reset for its row, or None."""
    return getattr(environment, RESET_FAILURE, None)


def _guard_reset(cls: type, stats: ToolStats) -> Callable[..., Any]:
    """A reset that raises on one row fails that rollout (counted; its tools fail), not the run."""

    @functools.wraps(cls.reset)
    def reset(self: Any, **row: Any) -> Any:
        setattr(self, RESET_FAILURE, None)  # instances are reused across rows (TRL pools them)
        try:
            return cls.reset(self, **row)
        except Exception as error:  # noqa: BLE001 - reset runs in the trainer's thread: Ctrl-C must still stop it
            message = f"{cls.__name__}.reset failed on this row: {type(error).__name__}: {error}"[:500]
            setattr(self, RESET_FAILURE, message)
            stats.reset_failed(message)
            return None  # the prompt goes unchanged

    return reset


def _guard_method(fn: Callable[..., Any], stats: ToolStats) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_method(self: Any, *args: Any, **kwargs: Any) -> str:
            _refuse_after_failed_reset(self, fn.__name__, stats)
            bound = functools.wraps(fn)(functools.partial(fn, self))
            return await _guard_async(bound, stats)(*args, **kwargs)

        async_method.stats = stats  # type: ignore[attr-defined]
        return async_method

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        _refuse_after_failed_reset(self, fn.__name__, stats)
        bound = functools.wraps(fn)(functools.partial(fn, self))
        return guard(bound, stats)(*args, **kwargs)

    method.stats = stats  # type: ignore[attr-defined]
    return method


def _refuse_after_failed_reset(environment: Any, name: str, stats: ToolStats) -> None:
    if failure := reset_failure(environment):
        stats.called(name)
        raise stats.failed(f"{name}: {failure}")
