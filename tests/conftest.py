"""Shared fixtures: the project's own tiny model, the shared GSM8K copy, fresh virtual environments."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Callable, Iterator

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
        Path(purelib, "zz_borrowed.pth").write_text(f"{borrowed}\n")  # after the environment's own packages
        self.cwd = path  # run from outside the checkout, so ./src is never on the path

    def pip(self, *args: str | Path) -> None:
        run_command(self.python, "-m", "pip", "-q", "--disable-pip-version-check", *args, cwd=self.cwd)

    def run(self, *args: str | Path, timeout: int = 600, env: dict | None = None) -> str:
        return run_command(self.python, *args, cwd=self.cwd, timeout=timeout, env=env)


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
