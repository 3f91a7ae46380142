"""Child processes that never outlive the process that started them, however it ends (SIGKILL included).

Linux's PR_SET_PDEATHSIG signals a child when the *thread* that forked it exits, not the process: a child started
from a short-lived thread (the MCP server answers in pool threads that exit after ~10 s idle) would be killed while
its parent still needs it. So every child is forked from one thread kept for the life of the process, and asks
the kernel, between fork and exec, for `signal` when that thread (and so the process) ends. Elsewhere than Linux
the child is started plainly: the pipes it reads close when the parent dies.

Written here because subprocess has no parent-death option and no maintained library sets one from a thread that
lives as long as the process.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

_LINUX = sys.platform.startswith("linux")
_PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the parent: the child between fork and exec must not load a library."""
    if not _LINUX:
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


class _Spawner:
    """One daemon thread that runs every fork of this process, started again in a forked child."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[tuple[Callable[[], Any], queue.Queue[tuple[bool, Any]]]] = queue.Queue()
        self.pid = os.getpid()
        threading.Thread(target=self._serve, name="hello-agents-rl-children", daemon=True).start()

    def _serve(self) -> None:
        while True:
            job, answer = self.jobs.get()
            try:
                answer.put((True, job()))
            except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
                answer.put((False, error))

    def run(self, job: Callable[[], Any]) -> Any:
        answer: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
        self.jobs.put((job, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value


_spawner: _Spawner | None = None
_spawner_lock = threading.Lock()


def _forget_after_fork() -> None:
    global _spawner_lock
    _spawner_lock = threading.Lock()  # a fork while another thread held it would leave it held forever


os.register_at_fork(after_in_child=_forget_after_fork)


def _the_spawner() -> _Spawner:
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner.pid != os.getpid():  # a forked child has no copy of the parent's thread
            _spawner = _Spawner()
        return _spawner


def start(args: list[str], die_with: int = signal.SIGKILL, **popen: Any) -> subprocess.Popen[Any]:
    """subprocess.Popen(args, **popen), the child sent `die_with` when this process ends (Linux)."""
    if _PRCTL is None:
        return subprocess.Popen(args, **popen)
    parent = os.getpid()
    return _the_spawner().run(lambda: subprocess.Popen(
        args, preexec_fn=lambda: die_with_parent(parent, die_with), **popen))  # between fork and exec: no imports


def die_with_parent(parent: int, die_with: int = signal.SIGTERM) -> None:
    """Ask for `die_with` when this process's parent (`parent`, its pid) ends: in a child `start` forks, and in a
    process this package did not start itself (a test worker) whose parent forked it from a thread that lives as
    long as the parent."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(die_with))
        if os.getppid() != parent:  # the parent died before the request: nobody will signal
            os.kill(os.getpid(), int(die_with))
