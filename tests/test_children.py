"""No child outlives the process that needs it, and none dies while that process still does: a bounded worker
started from a thread that has since exited still answers, a worker killed while idle is replaced before use, and
a child of any kind ends when its parent is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hello_agents_rl import bounded


def _in_a_thread_that_exits(fn):  # the MCP server runs each call in a pool thread that exits when idle
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(value=fn()))
    thread.start()
    thread.join()
    return out["value"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] if sys.platform.startswith("linux") else "R"
    return state != "Z"


def test_a_worker_started_from_a_thread_that_exits_still_answers() -> None:
    assert _in_a_thread_that_exits(lambda: bounded.call("os:getpid", bound=30)) > 0
    time.sleep(0.5)  # on the old code, the kernel's parent-death signal killed the idle worker here
    workers = [w for ws in bounded._idle.values() for w in ws]
    assert workers and all(w.process.poll() is None for w in workers)
    assert bounded.call("os:getpid", bound=30) in {w.process.pid for w in workers}  # the warm worker answers


def test_a_worker_killed_while_idle_is_replaced_before_the_call_is_lost() -> None:
    first = bounded.call("os:getpid", bound=30)
    os.kill(first, signal.SIGKILL)
    for worker in [w for ws in bounded._idle.values() for w in ws if w.process.pid == first]:
        worker.process.wait(5)
    second = bounded.call("os:getpid", bound=30)  # no WorkerDied, no BrokenPipeError
    assert second != first


def test_a_warm_worker_that_dies_between_the_liveness_check_and_the_call_is_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first = bounded.call("os:getpid", bound=30)
    real_take = bounded._take

    def take_then_kill(preload):  # the race: alive when taken, dead when the call is sent
        worker, warm = real_take(preload)
        if warm:
            os.kill(worker.process.pid, signal.SIGKILL)
            worker.process.wait(5)
        return worker, warm

    monkeypatch.setattr(bounded, "_take", take_then_kill)
    assert bounded.call("os:getpid", bound=30) != first


def test_math_verify_scores_after_its_worker_threads_exit() -> None:
    """The MCP server's case: checks in short-lived threads, an idle pause, then more checks: always a score."""
    pytest.importorskip("math_verify")
    from hello_agents_rl.rewards.checkers import math_verify_equal

    assert _in_a_thread_that_exits(lambda: math_verify_equal("\\boxed{\\frac{1}{2}}", "0.5")) is True
    time.sleep(0.5)
    assert _in_a_thread_that_exits(lambda: math_verify_equal("\\boxed{\\frac{1}{2}}", "0.5")) is True
    assert math_verify_equal("\\boxed{3}", "0.5") is False


PARENT = """
import sys, time
from hello_agents_rl import bounded, children
bounded.call("os:getpid", bound=60)
child = children.start([sys.executable, "-c", "import time; time.sleep(120)"])
print(*[w.process.pid for ws in bounded._idle.values() for w in ws], child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_children_end_when_their_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


SLEEPY_TESTS = '''
import subprocess, sys, time

def test_a_test_with_a_child_of_its_own():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(300)"])

def test_a_test_that_computes():
    end = time.monotonic() + 300
    while time.monotonic() < end:
        pass
'''


def _with_marker(marker: str) -> list[int]:
    """The processes whose environment carries `marker` (what make, pytest, its workers and their children inherit)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker.encode() in environ.read_bytes() and _alive(int(environ.parent.name)):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_stopped_make_test_leaves_no_process_behind(tmp_path: Path) -> None:
    """The Makefile's `test` recipe and tests/conftest.py, on two tests that would run for minutes: SIGTERM to make
    ends pytest, its xdist workers and the tests' own children."""
    import shutil
    import uuid

    root = Path(__file__).resolve().parents[1]
    lines = (root / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("test: install"))
    exports = [line for line in lines if line.startswith("test: export")]
    recipe = [line for line in lines[start + 1:] if line.startswith("\t")][:1]
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(root / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_sleepy.py").write_text(SLEEPY_TESTS)
    (tmp_path / "Makefile").write_text("\n".join([
        f"BIN := {Path(sys.executable).parent}", "XDIST := -n 2 --dist loadfile --no-loadscope-reorder", *exports,
        "test:", recipe[0].replace(" tests", f" {suite}")]) + "\n")
    marker = f"HELLO_AGENTS_RL_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1], "PYTHONPATH": str(root / "tests")}
    make = subprocess.Popen(["make", "-s", "test"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(_with_marker(marker)) < 5 and time.monotonic() < deadline:  # make, pytest, 2 workers, 1 child
        time.sleep(0.5)
    assert len(_with_marker(marker)) >= 5, "the suite did not start"
    make.send_signal(signal.SIGTERM)
    make.wait(30)
    deadline = time.monotonic() + 30
    while _with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = _with_marker(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []


def _count_then_crash(path: str) -> None:
    with open(path, "a") as runs:
        runs.write("ran\n")
    os._exit(3)


def test_a_call_that_kills_its_worker_runs_once_and_says_how_it_ended(tmp_path: Path) -> None:
    for _ in range(2):  # two warm workers, as the pool keeps
        bounded.call("os:getpid", bound=30)
    runs = tmp_path / "runs"
    with pytest.raises(bounded.WorkerDied, match="exit code 3"):
        bounded.call("test_children:_count_then_crash", str(runs), bound=30)
    assert runs.read_text() == "ran\n", "a call is never sent twice: it may have done its work"
