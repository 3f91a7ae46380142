"""Calls that must end within a bound, in any thread: run in a worker process that is killed when one overruns.

A thread cannot be stopped, and a signal alarm works in the main thread only and waits for the GIL, so a
generator that never ends (reasoning-gym with extreme parameters) or math-verify on `9^{9^{9^{9}}}` would stall
the caller (the MCP server answers in worker threads) for good. Here such a call runs in a child interpreter:

* started with `subprocess` (fork and exec), never through multiprocessing: multiprocessing's spawn and fork
  server re-import the user's `__main__` in the child, so a plain script without a main guard would run twice;
* kept warm between calls with its modules preloaded (`preload`), so a bounded call costs a pipe round trip,
  not an interpreter start;
* with a fixed hash seed, so that hash-ordered generators draw the same entry i in every process;
* started through hello_agents_rl/children.py, so it dies with this process and never with the thread that
  asked for it; a warm worker found dead is replaced before the call is lost.

Written here because no maintained library bounds a call this way without multiprocessing's re-import (pebble
and loky both prepare the child from `__main__`).
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import json
import os
import subprocess
import sys
import threading
from collections.abc import Generator
from multiprocessing.connection import Connection
from typing import Any

from hello_agents_rl import children

START_SECONDS = 120.0  # a new worker importing its preload (reasoning-gym takes seconds on a busy laptop)
HASH_SEED = "0"
_KEPT_IDLE = 2  # idle workers kept per preload: a run's calls come one at a time, the MCP server's a few at once
_PATH_VARIABLE = "HELLO_AGENTS_RL_WORKER_PATH"
_BOOT = (f"import json, os, sys; sys.path[:0] = json.loads(os.environ.pop({_PATH_VARIABLE!r})); "
         "from hello_agents_rl.bounded import serve; serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])")


class Overran(Exception):
    """The call took longer than its bound; its worker was killed."""


class WorkerDied(Exception):
    """The worker ended during the call (a crash, or killed from outside)."""


class _Worker:
    def __init__(self, preload: tuple[str, ...]) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = {**os.environ, "PYTHONHASHSEED": HASH_SEED, _PATH_VARIABLE: json.dumps([p for p in sys.path if p])}
        self.process = children.start(
            [sys.executable, "-c", _BOOT, str(to_child_r), str(from_child_w), *preload],
            pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, env=env)
        os.close(to_child_r)
        os.close(from_child_w)
        self.send = Connection(to_child_w, readable=False)
        self.receive = Connection(from_child_r, writable=False)
        try:
            if not self.receive.poll(START_SECONDS):
                raise Overran(f"a worker did not start within {START_SECONDS:g} s (importing {', '.join(preload)})")
            self.receive.recv()
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.send.close()
        self.receive.close()


_idle: dict[tuple[str, ...], list[_Worker]] = {}
_live: set[_Worker] = set()
_lock = threading.Lock()


def _take(preload: tuple[str, ...]) -> tuple[_Worker, bool]:
    """A live worker for `preload`, and whether it was warm (an idle one, which may have died since)."""
    while True:
        with _lock:
            idle = _idle.setdefault(preload, [])
            worker = idle.pop() if idle else None
        if worker is None:
            break
        if worker.process.poll() is None:
            return worker, True
        _discard(worker)  # killed from outside while idle: never handed out
    worker = _Worker(preload)
    with _lock:
        _live.add(worker)
    return worker, False


def _give_back(worker: _Worker, preload: tuple[str, ...]) -> None:
    with _lock:
        idle = _idle.setdefault(preload, [])
        if len(idle) < _KEPT_IDLE:
            idle.append(worker)
            return
        _live.discard(worker)
    worker.kill()


def _exit_code(worker: _Worker) -> int | None:
    try:
        return worker.process.wait(5)
    except subprocess.TimeoutExpired:
        return None


def _discard(worker: _Worker) -> None:
    with _lock:
        _live.discard(worker)
    worker.kill()


def _forget_after_fork() -> None:
    """A forked child must not use its parent's workers (their pipes are shared): it starts its own."""
    global _lock
    _lock = threading.Lock()
    _idle.clear()
    _live.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _stop_all() -> None:
    with _lock:
        workers = list(_live)
        _live.clear()
        _idle.clear()
    for worker in workers:
        worker.kill()


def stream(target: str, *args: Any, bound: float, preload: tuple[str, ...] = ()) -> Generator[Any, None, None]:
    """The items `module:function`(*args) yields (or its one return value), each within `bound` seconds of the
    last; Overran (the worker killed) past it, WorkerDied if the worker ends during the call (a warm one that ended
    while idle, its pipe refusing the call, is replaced first: the call never runs twice). An exception raised there
    is raised here."""
    worker, warm = _take(preload)
    sent = finished = False
    try:
        while True:
            try:
                if not sent:
                    worker.send.send((target, args))
                    sent = True
                if not worker.receive.poll(bound):
                    raise Overran(f"{target} took longer than {bound:g} s")
                message = worker.receive.recv()
            except (EOFError, OSError):
                if warm and not sent:  # ended while idle (its pipe refused the call): a fresh worker takes it
                    _discard(worker)
                    worker, warm = _take(preload)
                    continue
                raise WorkerDied(f"{target}'s worker ended (exit code {_exit_code(worker)})") from None
            kind, value = message
            if kind == "item":
                yield value
            elif kind == "done":
                finished = True
                return
            else:
                finished = True
                raise value
    finally:
        if finished:
            _give_back(worker, preload)
        else:  # overran, died, or the caller stopped reading: the worker is mid-call
            _discard(worker)


def call(target: str, *args: Any, bound: float, preload: tuple[str, ...] = ()) -> Any:
    """`module:function`(*args)'s return value, within `bound` seconds (Overran past it)."""
    return list(stream(target, *args, bound=bound, preload=preload))[0]


def serve(read_fd: int, write_fd: int, preload: list[str]) -> None:
    """The worker's loop: import the preload, then run each request until the parent closes the pipe."""
    receive, send = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    os.dup2(2, 1)  # a print in a library goes to stderr, never into the frames
    for module in preload:
        importlib.import_module(module)
    send.send(("ready", None))
    while True:
        try:
            target, args = receive.recv()
        except EOFError:
            return
        module, name = target.split(":")
        try:
            result = getattr(importlib.import_module(module), name)(*args)
            if inspect.isgenerator(result):
                for item in result:
                    send.send(("item", item))
            else:
                send.send(("item", result))
            send.send(("done", None))
        except Exception as error:  # noqa: BLE001 - raised again in the caller
            send.send(("raised", _picklable(error)))


def _picklable(error: Exception) -> Exception:
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - an exception that cannot cross the pipe crosses as its text
        return RuntimeError(f"{type(error).__name__}: {error}")
