"""The python tool's sandbox: one test per claim docs/agents.md ("Security") makes for each mode.

The bubblewrap tests skip where `bwrap` is missing or cannot create its namespaces; the fallback runs everywhere.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hello_agents_rl.rollouts import snippet_runner
from hello_agents_rl.rollouts.sandbox import MAX_PROCESSES, run_sandboxed, sandbox_mode
from hello_agents_rl.rollouts.tool_registry import _PYTHON_BOOTSTRAP, PYTHON_MEMORY_LIMIT_BYTES

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox's guarantees are Linux's")
BWRAP = pytest.param("bubblewrap", marks=pytest.mark.skipif(sandbox_mode() != "bubblewrap",
                                                            reason="bubblewrap missing or not usable here"))
BOTH = ["fallback", BWRAP]
SECRET = "s3cr3t-token-value"


def _run(code: str, mode: str, folder: Path | None = None, time_limit: float = 4.0):
    command = [sys.executable, "-I", "-c", _PYTHON_BOOTSTRAP, code, str(PYTHON_MEMORY_LIMIT_BYTES), "10"]
    return run_sandboxed(command, time_limit, mode=mode, folder=str(folder) if folder else None)


def _pids_with(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (the snippet is in its interpreter's argv)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"):
                if "State:\tZ" not in Path(f"/proc/{entry}/status").read_text():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _cgroup_possible() -> bool:
    folder = snippet_runner._pids_cgroup(1)
    if folder is not None:
        os.rmdir(folder)
    return folder is not None


@pytest.mark.parametrize("mode", BOTH)
def test_the_snippet_gets_an_empty_environment(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECRET_TOKEN", SECRET)
    done = _run("import os, json; print(json.dumps(dict(os.environ)))", mode)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout and "SECRET_TOKEN" not in json.loads(done.stdout)


_READ_EVERY_ENVIRON = """
import os
found = []
for entry in os.listdir('/proc'):
    try:
        if entry.isdigit() and b'SECRET_TOKEN' in open(f'/proc/{entry}/environ', 'rb').read():
            found.append(entry)
    except OSError:
        pass
print('found' if found else 'hidden', os.getppid())
"""


def _from_a_trainer_with_a_secret(mode: str) -> str:
    """The issue's reproduction: a trainer process with SECRET_TOKEN in its environment runs the snippet."""
    driver = (f"from hello_agents_rl.rollouts.sandbox import run_sandboxed; import sys; "
              f"from hello_agents_rl.rollouts.tool_registry import _PYTHON_BOOTSTRAP as B; "
              f"print(run_sandboxed([sys.executable, '-I', '-c', B, {_READ_EVERY_ENVIRON!r}, str(2**29), '9'], 5, "
              f"mode={mode!r}).stdout)")
    env = {**os.environ, "SECRET_TOKEN": SECRET, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    done = subprocess.run([sys.executable, "-c", driver], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_bubblewrap_hides_every_other_process_environment() -> None:
    if sandbox_mode() != "bubblewrap":
        pytest.skip("bubblewrap missing or not usable here")
    assert _from_a_trainer_with_a_secret("bubblewrap").startswith("hidden")


def test_the_fallback_does_not_hide_the_trainers_proc_entries() -> None:
    """Documented limit: the fallback runs as the trainer's user, so /proc/<trainer>/environ stays readable."""
    assert _from_a_trainer_with_a_secret("fallback").startswith("found")


_ESCAPE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 3)
        open('started', 'w').close()
        time.sleep(3)  # past the snippet's end and its 2 s limit
        open('late', 'w').close()
    os._exit(0)
while not os.path.exists('started'):
    time.sleep(0.05)
print('left a grandchild behind')
"""


@pytest.mark.parametrize("mode", BOTH)
@pytest.mark.parametrize("ending", ["returns", "times out"])
def test_no_descendant_outlives_the_snippet(mode: str, ending: str, tmp_path: Path) -> None:
    """The issue's reproduction: a forked, setsid() grandchild with its output closed wrote a file 120 s later."""
    code = _ESCAPE + ("while True: pass\n" if ending == "times out" else "")
    started = time.monotonic()
    done = _run(code, mode, folder=tmp_path, time_limit=2)
    assert done.timed_out == (ending == "times out") and time.monotonic() - started < 10
    time.sleep(max(0.0, started + 4 - time.monotonic()))  # past the grandchild's write
    assert (tmp_path / "started").exists() and not (tmp_path / "late").exists()


@pytest.mark.parametrize("mode", BOTH)
def test_a_fork_bomb_is_bounded_and_cleaned_up(mode: str) -> None:
    if os.geteuid() == 0 and not _cgroup_possible():
        pytest.skip("root ignores RLIMIT_NPROC and no pids cgroup can be made here (the documented gap)")
    marker = f"fork-bomb-{os.getpid()}-{mode}"
    code = f"""
import os, time
# {marker}
made = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
print(made)
"""
    done = _run(code, mode)
    assert done.returncode == 0, done.stderr
    assert 0 < int(done.stdout) <= MAX_PROCESSES
    assert _pids_with(marker) == []  # every sleeping child killed when the snippet ended


def _listening() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


@pytest.mark.parametrize("mode,reachable", [("fallback", True), pytest.param("bubblewrap", False, marks=BWRAP.marks)])
def test_network_is_cut_only_by_bubblewrap(mode: str, reachable: bool) -> None:
    with _listening() as server:
        port = server.getsockname()[1]
        done = _run(f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), timeout=2); print('reached')\n"
                    "except OSError as e:\n print('refused', e)", mode)
    assert done.stdout.startswith("reached" if reachable else "refused"), done.stdout + done.stderr


@pytest.mark.parametrize("mode,visible", [("fallback", True), pytest.param("bubblewrap", False, marks=BWRAP.marks)])
def test_files_outside_the_scratch_folder_are_hidden_only_by_bubblewrap(mode: str, visible: bool, tmp_path: Path) -> None:
    private = tmp_path / "private.txt"
    private.write_text("model weights and keys")
    done = _run(f"import os\nprint(os.path.exists({str(private)!r}), os.path.exists({str(Path.home())!r} + '/.bashrc'))\n"
                f"try:\n open('/usr/owned', 'w'); print('wrote /usr')\nexcept OSError:\n print('read-only')", mode)
    exists, _ = done.stdout.split("\n")[0].split()
    assert exists == str(visible), done.stdout + done.stderr
    if mode == "bubblewrap":  # read-only system folders (the fallback, as root, could write there: not tried)
        assert done.stdout.split("\n")[1] == "read-only"


@pytest.mark.parametrize("mode", BOTH)
def test_the_snippet_starts_in_an_empty_scratch_folder_that_is_removed(mode: str) -> None:
    done = _run("import os; print(os.getcwd(), os.listdir('.')); open('left.txt', 'w').write('x')", mode)
    folder, listing = done.stdout.split(" ", 1)
    assert listing.strip() == "[]" and not Path(folder).exists()


@pytest.mark.parametrize("mode", BOTH)
def test_descendants_die_with_a_killed_trainer(mode: str, tmp_path: Path) -> None:
    """kill -9 of the trainer mid-snippet: the runner is told (parent-death signal) and kills the rest."""
    escape = _ESCAPE + "while True: pass\n"
    driver = (f"from hello_agents_rl.rollouts.sandbox import run_sandboxed; import sys; "
              f"from hello_agents_rl.rollouts.tool_registry import _PYTHON_BOOTSTRAP as B; "
              f"run_sandboxed([sys.executable, '-I', '-c', B, {escape!r}, str(2**29), '30'], 20, mode={mode!r}, "
              f"folder={str(tmp_path)!r})")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    trainer = subprocess.Popen([sys.executable, "-c", driver], env=env)
    deadline = time.monotonic() + 30
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and trainer.poll() is None
        time.sleep(0.05)
    trainer.kill()
    trainer.wait()
    time.sleep(4)  # past the grandchild's write
    assert not (tmp_path / "late").exists()


def test_bubblewrap_drops_every_capability() -> None:
    if sandbox_mode() != "bubblewrap":
        pytest.skip("bubblewrap missing or not usable here")
    done = _run("print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])", "bubblewrap")
    assert done.stdout.strip() == "0000000000000000"
