"""`action: search` on PostgreSQL, what the RDB storage is for: a server this test starts, two workers sharing
one study, one killed inside a trial and its trial retried by the other. And without the driver, a clear error."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_search import search_params, tiny_base

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.workflows.actions import parse

SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")


@pytest.mark.parametrize("url,driver,package", [
    ("postgresql://hello@db.example/search", "psycopg", "pip install 'psycopg[binary]'"),  # SQLAlchemy 2.1's default
    ("postgresql+psycopg2://hello@db.example/search", "psycopg2", "pip install 'psycopg2-binary'"),
    ("mysql://hello@db.example/search", "mysqldb", "pip install 'mysqlclient'"),
])
def test_a_database_url_without_its_driver_names_the_package_at_validation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, driver: str, package: str) -> None:
    for module in ("psycopg", "psycopg2", "MySQLdb"):  # as on a machine without them, whatever this one has
        monkeypatch.setitem(sys.modules, module, None)
    params = {"action": "search", "output_dir": str(tmp_path / "s"), "base": {"dataset": "arithmetic"},
              "space": {"kl_coef": [0.01, 0.1]}, "storage": url}
    with pytest.raises(ConfigError, match=f"`storage`: .*needs the database driver {driver}, which is not installed: "
                                          f"{package.replace('[', '.').replace(']', '.')}"):
        parse(params)
    assert not (tmp_path / "s").exists()


def test_an_unknown_database_is_refused_at_validation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="`storage`: postgress:// is not a database SQLAlchemy knows"):
        parse({"action": "search", "output_dir": str(tmp_path / "s"), "base": {"dataset": "arithmetic"},
               "space": {"kl_coef": [0.01, 0.1]}, "storage": "postgress://hello@db/search"})


def _server_binaries() -> Path | None:
    """The folder of PostgreSQL's server programs: on PATH, or where Debian's postgresql package puts them."""
    on_path = shutil.which("initdb")
    candidates = ([Path(on_path).resolve().parent] if on_path else []) + sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    return next((c for c in candidates if all((c / name).is_file() for name in SERVER_BINARIES)), None)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server of this test's own, in a temporary folder, on a free port of 127.0.0.1."""
    binaries = _server_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; .ci/run installs Debian's "
                    "postgresql package")
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("driver not installed: pip install 'psycopg[binary]' (requirements.lock pins it)")
    # PostgreSQL refuses to run as root: then the server runs as an unprivileged user, in a folder it owns
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="hello-agents-rl-pg-"))  # not under pytest's 0700 tmp root
    if os.geteuid() == 0:
        user = next((u for u in ("postgres", "nobody") if _user_exists(u)), None)
        if user is None or shutil.which("runuser") is None:
            pytest.skip("running as root, with neither a postgres nor a nobody user and runuser to run the server as")
        shutil.chown(folder, user)
        as_user = ["runuser", "-u", user, "--"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data, log = folder / "data", folder / "server.log"
    try:
        subprocess.run([*as_user, binaries / "initdb", "-D", data, "-U", "hello", "--auth=trust", "--no-sync"],
                       check=True, capture_output=True, timeout=120)
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {folder} -c fsync=off"
        started = subprocess.run([*as_user, binaries / "pg_ctl", "-D", data, "-l", log, "-o", options, "-w", "-t", "120",
                                  "start"], capture_output=True, text=True, timeout=180)
        assert started.returncode == 0, started.stderr + (log.read_text() if log.is_file() else "")
        yield f"postgresql+psycopg://hello@127.0.0.1:{port}/postgres"  # the driver named: any SQLAlchemy 2
    finally:
        if data.is_dir():
            subprocess.run([*as_user, binaries / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
                           capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# Each worker holds its first trial at the gate (a file per worker says it is there) until `release` appears:
# inside the trial, its parameters drawn, where training starts. The test kills one worker while it is held,
# so it dies inside a trial whatever the machine's speed.
HELD_WORKER = """
import os, pathlib, sys, time
from hello_agents_rl.trainers import run
from hello_agents_rl.interfaces.cli import main

gate, role = pathlib.Path(os.environ["GATE"]), os.environ["ROLE"]
train = run.train

def held(cfg, *args, **kwargs):
    if not (gate / role).exists():
        (gate / role).write_text(cfg.output_dir)
        deadline = time.monotonic() + 300  # then go on: the test fails on its assertions, it does not hang
        while not (gate / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    return train(cfg, *args, **kwargs)

run.train = held
main(sys.argv[1:])
"""


def _wait_for(condition, what: str, worker: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    while not condition():
        assert worker.poll() is None, f"the worker exited before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_two_workers_share_a_postgresql_study_and_a_killed_workers_trial_is_retried(
        postgres_url: str, tmp_path: Path, tiny_model: str) -> None:
    import optuna

    out, gate = tmp_path / "search", tmp_path / "gate"
    gate.mkdir()
    config = tmp_path / "search.yaml"
    params = search_params(out, tiny_model, base=tiny_base(tiny_model), n_trials=2, seed=None, objective="reward",
                           space={"learning_rate": [1e-4, 3e-4, 1e-3]}, storage=postgres_url,
                           heartbeat_interval=1, grace_period=2)
    config.write_text(yaml.safe_dump({k: v for k, v in params.items() if k != "action"}))
    command = [sys.executable, "-c", HELD_WORKER, "search", "--config", str(config)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "GATE": str(gate)}
    logs = {role: tmp_path / f"{role}.log" for role in ("killed", "survivor")}  # files: an unread pipe can block
    workers = {}
    try:
        for role in ("killed", "survivor"):  # the second starts once the first is inside its trial
            with logs[role].open("w") as log:
                workers[role] = subprocess.Popen(command, env={**env, "ROLE": role}, stdout=log, stderr=log)
            _wait_for(lambda role=role: (gate / role).is_file(), f"the {role} worker's first trial", workers[role], logs[role])
        study = optuna.load_study(study_name="search", storage=postgres_url)
        assert [t.state.name for t in study.get_trials()] == ["RUNNING", "RUNNING"]  # one study, two workers in it

        workers["killed"].send_signal(signal.SIGKILL)  # inside its trial: no chance to mark it failed itself
        workers["killed"].wait(timeout=60)
        time.sleep(3)  # past grace_period (2 s): a dead worker sends no heartbeat, so its trial is stale by now
        (gate / "release").touch()
        assert workers["survivor"].wait(timeout=600) == 0, logs["survivor"].read_text()[-3000:]
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.wait()

    trials = optuna.load_study(study_name="search", storage=postgres_url).get_trials()
    (killed,) = [t for t in trials if t.user_attrs["output_dir"] == (gate / "killed").read_text()]
    killed_number = killed.number
    assert killed.state.name == "FAIL" and killed.params  # killed with its parameters drawn
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == killed_number]
    assert retry.state.name == "COMPLETE" and retry.params == killed.params
    survivor_pid = str(workers["survivor"].pid)
    assert retry.user_attrs["worker"].endswith(f":{survivor_pid}"), "the surviving worker ran the retry"
    assert sum(t.state.name == "COMPLETE" for t in trials) == 2  # the survivor's own trial and the retry
    result = json.loads((out / "results.json").read_text())
    assert result["storage"] == postgres_url
    assert result["trials"][killed_number]["note"] == f"killed or interrupted; retried as trial {retry.number}"
    assert (Path(retry.user_attrs["output_dir"]) / "results.json").is_file()
