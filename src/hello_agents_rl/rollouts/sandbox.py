"""Where the `python` tool's snippet runs: bubblewrap where the machine has a working `bwrap`, else a fallback.

Both modes start the snippet under rollouts/snippet_runner.py, which kills every descendant when the snippet ends
or times out and limits processes (RLIMIT_NPROC; a pids cgroup where it may make one). The snippet gets an empty
environment and an empty scratch folder as its working directory. What each mode stops, and what it does not,
is in docs/agents.md ("Security"); tests/test_python_sandbox.py checks each claim.

- bubblewrap: new user, PID, network, IPC, UTS and cgroup namespaces (a private /proc showing only the
  sandbox, loopback-only networking), no capabilities, a read-only view of the system folders and the Python
  installation only (the rest of the filesystem, home folders included, is absent), a private /tmp, the scratch
  folder as the only writable place that outlives the sandbox, and --die-with-parent.
- fallback: the same user and filesystem as the trainer, in a fresh session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

Mode = Literal["bubblewrap", "fallback"]
MAX_PROCESSES = 32  # tasks a snippet may add (threads count); a fork bomb stops there
_RUNNER = str(Path(__file__).with_name("snippet_runner.py"))
_CLEANUP_MARGIN_S = 30  # the runner kills at the time limit; this long more and the runner itself is killed
_SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


class SandboxError(RuntimeError):
    """The runner itself failed: the snippet's outcome is unknown."""


@lru_cache(maxsize=1)
def sandbox_mode() -> Mode:
    """bubblewrap when `bwrap` is installed and may create its namespaces here (containers often forbid it)."""
    if shutil.which("bwrap") is None:
        return "fallback"
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                           capture_output=True, timeout=30, check=False)
    return "bubblewrap" if probe.returncode == 0 else "fallback"


def run_sandboxed(command: list[str], time_limit: float, mode: Mode | None = None,
                  folder: str | None = None) -> Finished:
    """Run `command` (its first item the Python executable, so the sandbox can show it) in `folder` (default: a
    fresh temporary folder, removed afterwards), killed with all its descendants after `time_limit` seconds."""
    mode = mode or sandbox_mode()
    with nullcontext(folder) if folder else tempfile.TemporaryDirectory(prefix="hello-agents-python-") as scratch:
        inner = _bubblewrap(command, scratch) if mode == "bubblewrap" else command
        status_read, status_write = os.pipe()
        config = {"command": inner, "time_limit": time_limit, "max_processes": MAX_PROCESSES,
                  "status_fd": status_write, "parent": os.getpid()}
        try:
            runner = subprocess.Popen([sys.executable, "-I", _RUNNER, json.dumps(config)], cwd=scratch, env={},
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      pass_fds=(status_write,), start_new_session=True)
        finally:
            os.close(status_write)
        with os.fdopen(status_read, "rb") as status_pipe:
            try:
                out, err = runner.communicate(timeout=time_limit + _CLEANUP_MARGIN_S)
            except subprocess.TimeoutExpired:
                runner.kill()
                runner.communicate()
                raise SandboxError("the sandbox runner did not finish cleaning up") from None
            status = status_pipe.read()
    stdout, stderr = (b.decode("utf-8", errors="replace") for b in (out, err))
    if not status:
        raise SandboxError(f"the sandbox runner failed: {stderr.strip()[-300:] or f'exit {runner.returncode}'}")
    report = json.loads(status)
    return Finished(report["returncode"], stdout, stderr, report["timed_out"])


def _bubblewrap(command: list[str], scratch: str) -> list[str]:
    args = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for top in _SYSTEM_FOLDERS:
        if os.path.islink(top):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    python_home = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(command[0]))}
    for folder in sorted(python_home):
        if not folder.startswith(tuple(f"{top}/" for top in _SYSTEM_FOLDERS)):
            args += ["--ro-bind", folder, folder]
    return [*args, "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
            "--bind", scratch, scratch, "--chdir", scratch, "--", *command]
