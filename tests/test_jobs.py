"""Background jobs as a user (or an agent) sees them: start at once, watch, cancel with a checkpoint, collect.

The store must outlive the server: a new JobManager on the same folder knows every job, and a job whose process
died without a result is failed with its last step, never "running" forever.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from hello_agents_rl import ConfigError
from hello_agents_rl.workflows.jobs import JobManager

TINY_TRAIN = {"action": "train", "algorithm": "grpo", "dataset": "arithmetic", "max_samples": 8, "batch_size": 2,
              "num_generations": 2, "max_new_tokens": 8, "logging_steps": 1, "use_lora": False, "report_to": "none"}


def _fake_child(manager: JobManager, script: str) -> None:
    """Stand in for the training process (its metrics.jsonl and console lines, then its fate) without a model."""
    manager._command = lambda action, config: [sys.executable, "-c", script]  # type: ignore[method-assign]


def _log_step(out: Path, entry: dict) -> str:
    """Child code appending one metrics.jsonl entry, as the trainer's RunMonitor does."""
    return (f"import json, pathlib\nout = pathlib.Path({str(out)!r}); out.mkdir(exist_ok=True)\n"
            f"with (out / 'metrics.jsonl').open('a') as f: f.write(json.dumps({entry!r}) + '\\n')\n")


def test_bad_parameters_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    manager = JobManager(tmp_path / "jobs")
    with pytest.raises(ConfigError, match="kl_coeff.*did you mean `kl_coef`"):
        manager.start({"action": "train", "kl_coeff": 0.1, "output_dir": str(tmp_path / "out")})
    with pytest.raises(ConfigError, match="does not run as a job"):
        manager.start({"action": "evaluate", "model_path": "x"})
    with pytest.raises(ConfigError, match="`reward_type`: function cannot be passed"):
        manager.start({"action": "train", "reward_type": lambda c, g: 1.0, "output_dir": str(tmp_path / "out")})
    finished = tmp_path / "finished"
    finished.mkdir()
    (finished / "results.json").write_text('{"status": "completed", "num_steps": 2}')
    with pytest.raises(ConfigError, match="`output_dir`: .* holds a finished run"):  # at once, not a failed job later
        manager.start({"action": "train", "output_dir": str(finished)})
    assert manager.list() == [] and not (tmp_path / "jobs").exists()  # not even the store
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="`job_id`: no job 'nope'"):
        manager.status("nope")


def test_a_crashed_job_is_failed_with_its_last_step_also_after_a_restart(tmp_path: Path) -> None:
    manager = JobManager(tmp_path / "jobs")
    finding = "KL 0.70 > 0.5 for 3 logs: the policy is drifting from the reference"
    _fake_child(manager, "import os, signal, time\ntime.sleep(1)\n"
                + _log_step(tmp_path / "out", {"step": 3, "reward": 0.25, "kl": 0.7, "loss": 0.1, "diagnostics": [finding]})
                + "print('Epoch 1/1 | Step 3/10 | Reward: 0.25 | KL: 0.700 | Loss: 0.100', flush=True)\n"
                "print('  7%|▋  | 3/10 [00:03<00:07]', flush=True)\n"  # a progress bar's text: never in the error
                "os.kill(os.getpid(), signal.SIGKILL)\n")
    job = manager.start({**TINY_TRAIN, "max_steps": 10, "output_dir": str(tmp_path / "out")})
    assert job["state"] in ("running", "failed") and job["job_id"].startswith("train-")  # failed: a slow poll
    done = manager.wait(job["job_id"], timeout=30, poll=0.2)
    assert done["state"] == "failed" and (done["step"], done["total"]) == (3, 10)
    assert (done["reward"], done["kl"], done["loss"]) == (0.25, 0.7, 0.1)
    assert done["error"] == "killed (signal 9) at step 3/10"
    assert done["diagnostics"] == [finding]
    assert manager.result(job["job_id"])["status"] == "failed"

    restarted = JobManager(tmp_path / "jobs")  # a new server process on the same store
    again = restarted.status(job["job_id"])
    assert again["state"] == "failed" and again["error"] == done["error"]


def test_a_restarted_server_still_sees_and_cancels_a_running_job(tmp_path: Path) -> None:
    manager = JobManager(tmp_path / "jobs")
    _fake_child(manager, "import time\nprint('Epoch 1/1 | Step 1/50 | Loss: 1.000', flush=True)\n"
                + _log_step(tmp_path / "out", {"step": 1, "loss": 1.0, "epoch": 0.02}) + "time.sleep(60)\n")
    # a server started as `cmd &` ignores SIGINT, and would pass that on to its jobs through exec
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        job = manager.start({**TINY_TRAIN, "max_steps": 50, "output_dir": str(tmp_path / "out")})
    finally:
        signal.signal(signal.SIGINT, before)
    with pytest.raises(ConfigError, match="already writing to"):  # one run per folder
        manager.start({**TINY_TRAIN, "output_dir": str(tmp_path / "out")})

    restarted = JobManager(tmp_path / "jobs")
    deadline = time.monotonic() + 20
    while (status := restarted.status(job["job_id"]))["step"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status["state"] == "running" and status["line"] == "Epoch 1/1 | Step 1/50 | Loss: 1.000"
    assert status["eta_s"] is not None and status["eta_s"] > 0
    with pytest.raises(ConfigError, match="still running .*step 1/50"):
        restarted.result(job["job_id"])
    assert restarted.cancel(job["job_id"])["state"] in ("cancelling", "cancelled")
    # the SIGINT ended it before any training: nothing to checkpoint, and the job says so
    assert restarted.wait(job["job_id"], timeout=20, poll=0.2)["state"] == "cancelled"
    assert [j["job_id"] for j in JobManager(tmp_path / "jobs").list()] == [job["job_id"]]


def test_a_crash_after_a_cancel_is_reported_as_a_crash(tmp_path: Path) -> None:
    manager = JobManager(tmp_path / "jobs")
    _fake_child(manager, "import signal, sys, time\n"
                "def crash(*_):\n    print('NameError: boom', file=sys.stderr); sys.exit(1)\n"
                "signal.signal(signal.SIGINT, crash)\n" + _log_step(tmp_path / "out", {"step": 1, "loss": 1.0})
                + "time.sleep(60)\n")
    job = manager.start({**TINY_TRAIN, "max_steps": 50, "output_dir": str(tmp_path / "out")})
    deadline = time.monotonic() + 20
    while manager.status(job["job_id"])["step"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    manager.cancel(job["job_id"])
    final = manager.wait(job["job_id"], timeout=20, poll=0.2)
    assert final["state"] == "failed" and "NameError: boom" in final["error"]
    assert final["error"].startswith("the process exited with status 1 without a result at step 1/50")


def test_a_repeated_cancel_while_cancelling_lets_the_run_save_its_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    manager = JobManager(tmp_path / "jobs")
    # as the trainer's InterruptGuard: the first SIGINT stops after this step, a second one exits at once
    _fake_child(manager, "import json, os, pathlib, signal, sys, time\n"
                "seen = []\n"
                "def stop(*_):\n"
                "    if seen: print('KeyboardInterrupt', file=sys.stderr, flush=True); os._exit(130)\n"
                "    seen.append(1)\n"
                "signal.signal(signal.SIGINT, stop)\n" + _log_step(out, {"step": 1, "loss": 1.0})
                + "while not seen: time.sleep(0.05)\n"
                "time.sleep(1.5)  # finishing the step and writing the checkpoint: the second cancel lands here\n"
                "(out / 'checkpoint-2').mkdir()\n"
                "(out / 'results.json').write_text(json.dumps({'status': 'interrupted', 'num_steps': 2}))\n"
                "sys.exit(130)\n")
    job = manager.start({**TINY_TRAIN, "max_steps": 50, "output_dir": str(out)})
    deadline = time.monotonic() + 20
    while manager.status(job["job_id"])["step"] < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert manager.cancel(job["job_id"])["state"] == "cancelling"
    time.sleep(0.3)
    assert manager.cancel(job["job_id"])["state"] == "cancelling"  # the second call sends nothing
    final = manager.wait(job["job_id"], timeout=20, poll=0.2)
    assert final["state"] == "interrupted", final
    assert manager.result(job["job_id"]) == {"status": "interrupted", "num_steps": 2}
    assert (out / "checkpoint-2").is_dir()


def test_reading_a_mistyped_jobs_folder_creates_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "typo" / "jobs"
    manager = JobManager(typo)
    assert manager.list() == []
    with pytest.raises(ConfigError, match="`job_id`: no job 'x'"):
        manager.status("x")
    assert not (tmp_path / "typo").exists()


def test_a_run_that_saved_its_result_but_died_before_printing_it_is_not_failed(tmp_path: Path) -> None:
    manager = JobManager(tmp_path / "jobs")
    out = tmp_path / "out"
    _fake_child(manager, "import json, os, pathlib, signal\n"
                f"out = pathlib.Path({str(out)!r}); out.mkdir(exist_ok=True)\n"
                "(out / 'results.json').write_text(json.dumps({'status': 'completed', 'num_steps': 4}))\n"
                "os.kill(os.getpid(), signal.SIGKILL)\n")
    job = manager.start({**TINY_TRAIN, "output_dir": str(out)})
    assert manager.wait(job["job_id"], timeout=30, poll=0.2)["state"] == "completed"
    assert manager.result(job["job_id"]) == {"status": "completed", "num_steps": 4}


def test_of_concurrent_starts_on_one_folder_across_servers_exactly_one_is_accepted(tmp_path: Path) -> None:
    import threading

    out = tmp_path / "out"
    one, other = JobManager(tmp_path / "jobs-a"), JobManager(tmp_path / "jobs-b")  # two servers, two stores
    for manager in (one, other):
        _fake_child(manager, "import time\ntime.sleep(3)\n")
    barrier = threading.Barrier(3)
    accepted, refused = [], []

    def start(manager: JobManager) -> None:
        barrier.wait()
        try:
            accepted.append(manager.start({**TINY_TRAIN, "output_dir": str(out)})["job_id"])
        except ConfigError as error:
            refused.append(str(error))

    threads = [threading.Thread(target=start, args=(m,)) for m in (one, one, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(accepted) == 1 and len(refused) == 2, (accepted, refused)
    assert all(f"job {accepted[0]} is already writing to {out}" in message for message in refused), refused
    winner = one if accepted[0] in [j["job_id"] for j in one.list()] else other
    loser = other if winner is one else one
    with pytest.raises(ConfigError, match=f"job {accepted[0]} is already writing"):  # held for the job's life
        loser.start({**TINY_TRAIN, "output_dir": str(out)})
    winner.wait(accepted[0], timeout=30, poll=0.2)
    assert loser.start({**TINY_TRAIN, "output_dir": str(out)})["state"] in ("running", "failed")  # free again


def test_a_search_jobs_progress_and_eta_cover_the_whole_study(tmp_path: Path) -> None:
    out = tmp_path / "search"
    manager = JobManager(tmp_path / "jobs")
    _fake_child(manager, "import time\n" + _log_step(out / "trial-0000", {"step": 4, "reward": 0.5})
                + "time.sleep(0.05)\n" + _log_step(out / "trial-0001", {"step": 1, "reward": 0.25}) + "time.sleep(60)\n")
    job = manager.start({"action": "search", "output_dir": str(out), "n_trials": 4, "base": {"max_steps": 4},
                         "space": {"learning_rate": {"low": 1e-5, "high": 1e-3}}})
    try:
        deadline = time.monotonic() + 20
        while (status := manager.status(job["job_id"]))["step"] != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        # the trial in progress: step 1 of 4; the study: one trial of four done and a quarter of the next
        assert (status["step"], status["total"], status["reward"]) == (1, 4, 0.25)
        assert status["fraction"] == pytest.approx((1 + 1 / 4) / 4)
        assert status["eta_s"] > status["elapsed_s"]  # most of the study is still ahead, not 3/4 of one trial
    finally:
        manager.cancel(job["job_id"])


def test_a_reused_pid_is_not_mistaken_for_the_job(tmp_path: Path) -> None:
    manager = JobManager(tmp_path / "jobs", create=True)
    folder = tmp_path / "jobs" / "train-x"
    folder.mkdir()
    with sqlite3.connect(tmp_path / "jobs" / "jobs.db") as db:  # a record left by a server that died long ago
        db.execute("INSERT INTO jobs (id, action, params, output_dir, folder, pid, started, created, state) "
                   "VALUES ('train-x', 'train', '{}', '/nowhere', ?, ?, 1.0, 1.0, 'running')", (str(folder), os.getpid()))
    assert manager.status("train-x")["state"] == "failed"  # pid alive, but it is this test, not that job


@pytest.mark.slow
def test_cancel_stops_a_real_run_with_a_checkpoint(tiny_model: str, tmp_path: Path) -> None:
    manager = JobManager(tmp_path / "jobs")
    out = tmp_path / "out"
    job = manager.start({**TINY_TRAIN, "model_name": tiny_model, "output_dir": str(out), "max_steps": 500,
                         "save_steps": 1000})
    deadline = time.monotonic() + 120
    try:
        while (status := manager.status(job["job_id"]))["step"] < 1:
            assert status["state"] == "running", status
            assert time.monotonic() < deadline, "no training step within 120 s"
            time.sleep(0.5)
        # the latest console line: the book's line, or a doctor finding printed after it on a slow machine
        assert status["total"] == 500 and status["line"].startswith(("Epoch ", "[doctor] ")), status["line"]
    finally:
        manager.cancel(job["job_id"])  # also when an assertion fails: no run left training on its own
    final = manager.wait(job["job_id"], timeout=120, poll=0.5)
    result = manager.result(job["job_id"])
    assert final["state"] == "interrupted" and result["status"] == "interrupted"
    assert 1 <= result["num_steps"] < 500
    assert list(out.glob("checkpoint-*")), "the cancelled run must leave a checkpoint to resume from"


def test_a_cli_run_and_a_job_never_write_one_folder_at_once(tiny_model: str, tmp_path: Path) -> None:
    """The claim is the run's, not only the job server's: a train started from the CLI holds its folder too."""
    import json
    import subprocess

    from hello_agents_rl.interfaces.tool import RLTrainingTool
    from hello_agents_rl.outputs import LOCK

    out, config = tmp_path / "out", tmp_path / "run.json"
    config.write_text(json.dumps({**TINY_TRAIN, "model_name": tiny_model, "output_dir": str(out), "max_steps": 500,
                                  "save_steps": 1000}))
    cli = subprocess.Popen([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "train", "--config", str(config)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    manager = JobManager(tmp_path / "jobs")
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").exists():  # the CLI run is training (it claimed the folder before that)
            assert cli.poll() is None and time.monotonic() < deadline, "the CLI run did not start training"
            time.sleep(0.5)
        held_by = f"run of process {cli.pid}"
        assert held_by in (out / LOCK).read_text()
        with pytest.raises(ConfigError, match=f"{held_by} is already writing to"):
            manager.start({**TINY_TRAIN, "model_name": tiny_model, "output_dir": str(out), "max_steps": 2})
        # in-process too, and "overwrite" deletes nothing of the running run
        with pytest.raises(ConfigError, match=f"{held_by} is already writing to"):
            RLTrainingTool().run({**TINY_TRAIN, "model_name": tiny_model, "output_dir": str(out), "max_steps": 2,
                                  "overwrite_output_dir": True})
        assert (out / "metrics.jsonl").exists()
    finally:
        cli.kill()
        cli.wait()
    # the claim died with its holder: a job may now continue that folder, and its own child is not refused by it
    job = manager.start({**TINY_TRAIN, "model_name": tiny_model, "output_dir": str(out), "max_steps": 2,
                         "overwrite_output_dir": True})
    assert manager.wait(job["job_id"], timeout=180, poll=0.5)["state"] == "completed", manager.status(job["job_id"])
