"""The guard around every tool handed to TRL or to the rollout loop.

An exception, a hang (past `TOOL_TIMEOUT_S`) or a result that is not plain data becomes a `ToolFailure`, which
the tool loop turns into an `{'error': ...}` tool message and counts as a failed call (TRL's
`tools/failure_frequency`); training goes on. Long results are truncated. `ToolStats` counts what the guards saw.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from hello_agents_rl.rollouts.tools import ToolFailure, public_methods

TOOL_TIMEOUT_S = 30.0  # a user tool that has not answered by then is a failed call (its thread is abandoned)
MAX_RESULT_CHARS = 2000  # longer results are cut: they would crowd out the completion budget anyway


@dataclass
class ToolStats:
    """Calls seen by the guards; TRL keeps its own per-step frequencies (tools/call_frequency)."""

    calls: int = 0
    failures: int = 0
    timeouts: int = 0
    junk_results: int = 0
    first_error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def failed(self, message: str, kind: str | None = None) -> ToolFailure:
        with self._lock:
            self.failures += 1
            if kind == "timeout":
                self.timeouts += 1
            elif kind == "junk":
                self.junk_results += 1
            self.first_error = self.first_error or message
        return ToolFailure(message)

    def summary(self) -> dict[str, Any]:
        return {"calls": self.calls, "failures": self.failures, "timeouts": self.timeouts,
                "junk_results": self.junk_results, "first_error": self.first_error}


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


def _call_with_timeout(fn: Callable[..., Any], args: tuple, kwargs: dict, timeout: float) -> tuple[str, Any]:
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
        return "timeout", None
    return ("error", box["error"]) if "error" in box else ("ok", box.get("value"))


def guard(fn: Callable[..., Any], stats: ToolStats, timeout: float = TOOL_TIMEOUT_S) -> Callable[..., Any]:
    """`fn` with the same name, docstring and signature (TRL's schema), every failure a ToolFailure."""
    name = getattr(fn, "__name__", "tool")
    if inspect.iscoroutinefunction(fn):  # TRL awaits async tools on its event loop: guard them there
        return _guard_async(fn, stats, timeout)

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> str:
        with stats._lock:
            stats.calls += 1
        status, value = _call_with_timeout(fn, args, kwargs, timeout)
        if status == "timeout":
            raise stats.failed(f"{name}: no answer after {timeout:g} s", "timeout")
        if status == "error":
            raise stats.failed(f"{name}: {type(value).__name__}: {value}"[:500])
        text = _plain_result(name, value)
        if text is None:
            raise stats.failed(f"{name}: returned {type(value).__name__} {str(value)[:60]!r}, not text or JSON data", "junk")
        return text

    guarded.stats = stats  # type: ignore[attr-defined]  # how a run finds its counts again
    return guarded


def _guard_async(fn: Callable[..., Any], stats: ToolStats, timeout: float) -> Callable[..., Any]:
    import asyncio

    name = getattr(fn, "__name__", "tool")

    @functools.wraps(fn)
    async def guarded(*args: Any, **kwargs: Any) -> str:
        with stats._lock:
            stats.calls += 1
        try:
            value = await asyncio.wait_for(fn(*args, **kwargs), timeout)
        except asyncio.TimeoutError:
            raise stats.failed(f"{name}: no answer after {timeout:g} s", "timeout") from None
        except Exception as error:  # noqa: BLE001 - a failed call
            raise stats.failed(f"{name}: {type(error).__name__}: {error}"[:500]) from None
        text = _plain_result(name, value)
        if text is None:
            raise stats.failed(f"{name}: returned {type(value).__name__} {str(value)[:60]!r}, not text or JSON data", "junk")
        return text

    guarded.stats = stats  # type: ignore[attr-defined]
    return guarded


def guarded_environment(cls: type, stats: ToolStats, timeout: float = TOOL_TIMEOUT_S) -> type:
    """A subclass of `cls` whose tool methods are guarded; same name, so TRL's reward column keeps it."""
    methods = {}
    for name, fn in public_methods(cls).items():
        methods[name] = _guard_method(fn, stats, timeout)
    return type(cls.__name__, (cls,), {**methods, "__module__": cls.__module__, "__doc__": cls.__doc__})


def _guard_method(fn: Callable[..., Any], stats: ToolStats, timeout: float) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_method(self: Any, *args: Any, **kwargs: Any) -> str:
            bound = functools.wraps(fn)(functools.partial(fn, self))
            return await _guard_async(bound, stats, timeout)(*args, **kwargs)

        async_method.stats = stats  # type: ignore[attr-defined]
        return async_method

    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        bound = functools.wraps(fn)(functools.partial(fn, self))
        return guard(bound, stats, timeout)(*args, **kwargs)

    method.stats = stats  # type: ignore[attr-defined]
    return method
