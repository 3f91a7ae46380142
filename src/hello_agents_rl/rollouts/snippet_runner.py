"""The process between the trainer and a `python` tool snippet (run as a script: `python -I snippet_runner.py CONFIG`).

It is the snippet's child subreaper (Linux prctl), so every descendant the snippet leaves behind, even one that
called setsid() and closed its output, becomes this process's child; when the snippet ends or its time runs out,
all of them are killed before this process reports and exits. It limits processes with RLIMIT_NPROC (which the
kernel does not apply to root) and, where it may create one, a pids cgroup (which holds for root too). If the
trainer dies, the kernel sends this process SIGTERM and it cleans up the same way. Standard library only.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_POLL_S = 0.01
_stop = False


def _on_signal(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (AttributeError, OSError):  # not Linux: no subreaper; the snippet's process group is still killed
        return False


def _tasks_of(uid: int) -> int:
    """Threads of every process whose real uid is `uid`: what RLIMIT_NPROC counts against."""
    total = 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue  # gone meanwhile
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            total += int(fields.get("Threads", "1"))
    return total


def _pids_cgroup(limit: int) -> str | None:
    """A fresh pids cgroup below this process's own, with pids.max = limit; None where none may be made."""
    try:
        with open("/proc/self/cgroup") as lines:
            memberships = [line.rstrip("\n").split(":", 2) for line in lines]
    except OSError:
        return None
    candidates = [f"/sys/fs/cgroup/pids{path}" for _, controllers, path in memberships if "pids" in controllers.split(",")]
    candidates += [f"/sys/fs/cgroup{path}" for number, _, path in memberships if number == "0"]  # cgroup v2
    for parent in candidates:
        folder = os.path.join(parent, f"hello-agents-python-{os.getpid()}")
        try:
            os.mkdir(folder)
        except OSError:
            continue
        try:
            with open(os.path.join(folder, "pids.max"), "w") as limit_file:
                limit_file.write(str(limit))
            return folder
        except OSError:
            os.rmdir(folder)
    return None


def _members(cgroup: str | None) -> set[int]:
    if cgroup is None:
        return set()
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as procs:
            return {int(line) for line in procs if line.strip()}
    except OSError:
        return set()


def _children() -> set[int]:
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])  # the name in () may hold spaces
            except (OSError, IndexError, ValueError):
                continue
            if parent == me:
                found.add(int(entry))
    return found


def _reap() -> tuple[bool, list[tuple[int, int]]]:
    """Collect exited children: (whether any child is left, [(pid, status)])."""
    done = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False, done
        if pid == 0:
            return True, done
        done.append((pid, status))


def _kill_everything(snippet: int, cgroup: str | None) -> None:
    try:
        os.killpg(snippet, signal.SIGKILL)  # its process group: most of it at once
    except OSError:
        pass
    while True:  # each round kills what is left; orphans of the killed come to this subreaper for the next
        victims = (_members(cgroup) | _children()) - {os.getpid()}
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        left, _ = _reap()
        if not victims and not left and not _members(cgroup):
            break
        time.sleep(_POLL_S / 10)
    if cgroup is not None:
        try:
            os.rmdir(cgroup)
        except OSError:
            pass  # the kernel still counts an exiting task; an empty cgroup left behind holds nothing


def main() -> None:
    config = json.loads(sys.argv[1])
    status_fd = config["status_fd"]
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _on_signal)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the trainer died: clean up all the same
    if os.getppid() != config["parent"]:
        return  # it died before the line above
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    cgroup = _pids_cgroup(config["max_processes"])
    allowed_tasks = _tasks_of(os.getuid()) + config["max_processes"]
    snippet = os.fork()
    if snippet == 0:
        try:
            if cgroup is not None:
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as procs:
                    procs.write(str(os.getpid()))
            os.setsid()
            resource.setrlimit(resource.RLIMIT_NPROC, (allowed_tasks, allowed_tasks))
            os.close(status_fd)
            os.execv(config["command"][0], config["command"])
        except BaseException as error:  # noqa: BLE001 - the child must never return into the runner's loop
            os.write(2, f"sandbox: cannot start the snippet ({error})\n".encode())
        os._exit(127)
    deadline = time.monotonic() + config["time_limit"]
    status, timed_out = None, False
    while status is None and not _stop:
        status = next((s for pid, s in _reap()[1] if pid == snippet), None)
        if status is None and time.monotonic() > deadline:
            timed_out = True
            break
        time.sleep(_POLL_S)
    _kill_everything(snippet, cgroup)
    returncode = -1 if status is None else os.waitstatus_to_exitcode(status)
    os.write(status_fd, json.dumps({"returncode": returncode, "timed_out": timed_out}).encode())


if __name__ == "__main__":
    main()
