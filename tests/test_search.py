"""`action: search`: validation before anything runs, trials as ordinary runs, pruning, failures, resume, workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hello_agents.tools import RLTrainingTool

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.interfaces import cli
from hello_agents_rl.workflows.actions import parse


def tiny_base(model: str, **overrides: Any) -> dict[str, Any]:
    """A GRPO run of a few seconds on the tiny model."""
    return {
        "model_name": model, "algorithm": "grpo", "dataset": "arithmetic", "max_samples": 8, "max_steps": 2,
        "batch_size": 2, "num_generations": 2, "max_new_tokens": 8, "logging_steps": 1, "save_steps": 1000,
        "report_to": "none", "seed": 0, **overrides,
    }


def search_params(out: Path, model: str, base: dict | None = None, **overrides: Any) -> dict[str, Any]:
    return {
        "action": "search", "output_dir": str(out), "sampler": "random", "n_trials": 3, "seed": 0,
        "base": base or tiny_base(model),
        "space": {"learning_rate": {"low": 1e-5, "high": 1e-3, "log": True}, "lora_rank": [4, 8]},
        "evaluation": {"max_samples": 8, "batch_size": 8}, **overrides,
    }


def load_study(out: Path, name: str = "search") -> Any:
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{out.resolve() / 'study.db'}")


# ---- 5. the space is checked before anything runs ----

BAD_SPACES = [
    ({"kl_coeff": [0.01, 0.1]}, "`space.kl_coeff`: not a train key; did you mean `kl_coef`?"),
    ({"lora_rank": [0, 8]}, "`space.lora_rank`"),  # lora_rank >= 1
    ({"lora_rank": {"low": 0, "high": 16}}, "greater than or equal to 1"),
    ({"lora_rank": {"low": 4.5, "high": 16}}, "`space.lora_rank.low`: lora_rank takes an integer"),
    ({"kl_coef": {"low": -0.1, "high": 0.1}}, "`space.kl_coef`"),  # kl_coef >= 0
    ({"learning_rate": {"low": 0.0, "high": 1e-4, "log": True}}, "a log range needs low > 0"),
    ({"learning_rate": {"low": 1e-4, "high": 1e-6}}, "need low < high"),
    ({"learning_rate": {"lo": 1e-6, "high": 1e-4}}, "`space.learning_rate.lo`: unknown range key; did you mean `low`?"),
    ({"scale_rewards": {"low": 0, "high": 1}}, "`space.scale_rewards`: scale_rewards is not a number"),
    ({"output_dir": ["a", "b"]}, "`space.output_dir`: the search sets it"),
    ({"kl_coef": []}, "`space.kl_coef`: empty list"),
    ({"kl_coef": [float("nan")]}, "`space.kl_coef.0`: must be a finite number"),
    ({}, "`space`: empty"),
]


@pytest.mark.parametrize("space,message", BAD_SPACES)
def test_bad_space_is_refused_naming_the_key(tmp_path: Path, space: dict, message: str) -> None:
    out = tmp_path / "search"
    params = {"action": "search", "output_dir": str(out), "base": {"dataset": "arithmetic"}, "space": space}
    with pytest.raises(ConfigError) as error:
        RLTrainingTool().run(params)
    assert message in str(error.value)
    assert not out.exists(), "nothing is written before the space is valid"


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"sampler": "grid", "space": {"learning_rate": {"low": 1e-6, "high": 1e-4}}}, "grid sampler needs a finite list"),
        ({"base": {"algorithm": "sft", "dataset": "arithmetic"}, "objective": "reward"}, "`objective`: reward needs algorithm grpo"),
        ({"space": {"algorithm": ["sft"]}, "objective": "reward"}, "`space.algorithm`: objective reward needs algorithm grpo"),
        ({"space": {"algorithm": ["grpo", "sft"]}, "objective": "reward"}, "`space.algorithm`: objective reward needs"),
        ({"base": {"dataset": "arithmetic", "output_dir": "elsewhere"}}, "`base.output_dir`: the search sets it"),
        ({"base": {"dataset": "arithmetic", "learnin_rate": 1e-5}}, "did you mean `learning_rate`?"),
        ({"base": {"dataset": "arithmetic", "kl_coef": float("nan")}}, "`base.kl_coef`: must be a finite number"),
        ({"enqueue": [{"kl_coeff": 0.1}]}, "`enqueue.0.kl_coeff`: not a key of space; did you mean `kl_coef`?"),
        ({"enqueue": [{"kl_coef": -1.0}]}, "`enqueue.0`"),
        ({"evaluation": {"max_sample": 10}}, "`evaluation.max_sample`: unknown parameter; did you mean `max_samples`?"),
        ({"storage": "runs/search.db"}, "`storage`: not a database URL"),
        ({"samplr": "tpe"}, "did you mean `sampler`?"),
    ],
)
def test_bad_search_settings_are_refused(tmp_path: Path, extra: dict, message: str) -> None:
    params = {"action": "search", "output_dir": str(tmp_path / "s"), "base": {"dataset": "arithmetic"},
              "space": {"kl_coef": [0.01, 0.1]}, **extra}
    with pytest.raises(ConfigError) as error:
        parse(params)
    assert message in str(error.value)


def test_cli_refuses_a_bad_search_config_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "search.yaml"
    config.write_text(yaml.safe_dump({"base": {"dataset": "arithmetic"}, "space": {"lora_rank": [0, 8]},
                                      "output_dir": str(tmp_path / "s")}))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["search", "--config", str(config)])
    assert exit_.value.code == 2
    assert "`space.lora_rank`" in capsys.readouterr().err


@pytest.mark.slow
def test_a_yaml_search_with_unquoted_exponents_trains_on_numbers(tmp_path: Path, tiny_model: str) -> None:
    """PyYAML reads `1e-3` as a string; the search reads it as a train key does: trials get numbers in range."""
    out = tmp_path / "s"
    config = tmp_path / "search.yaml"
    config.write_text(f"output_dir: {out}\nn_trials: 1\nobjective: reward\nsampler: random\n"
                      f"base: {json.dumps(tiny_base(tiny_model))}\n"
                      "space:\n  learning_rate: {low: 1e-5, high: 1e-3, log: true}\n  kl_coef: [1e-3, 5e-2]\n")
    assert yaml.safe_load(config.read_text())["space"]["kl_coef"] == ["1e-3", "5e-2"]  # the case this is about
    with pytest.raises(SystemExit) as exit_:
        cli.main(["search", "--config", str(config)])
    assert exit_.value.code == 0
    trial = yaml.safe_load((out / "trial-0000" / "config.yaml").read_text())
    assert isinstance(trial["learning_rate"], float) and 1e-5 <= trial["learning_rate"] <= 1e-3
    assert trial["kl_coef"] in (1e-3, 5e-2)


@pytest.mark.parametrize("name", ["search_demo.yaml", "search_gsm8k_grpo.yaml"])
def test_shipped_search_configs_are_valid(tmp_path: Path, name: str) -> None:
    params = cli.load_config_file(str(Path(__file__).resolve().parents[1] / "configs" / name))
    (tmp_path / "sft").mkdir()
    params["base"]["model_name"] = str(tmp_path / "sft")  # the SFT model these configs start from is trained first
    params.update(action="search", output_dir=str(tmp_path / "search"))
    cfg = parse(params)
    assert cfg.space == params["space"] and cfg.n_trials == params["n_trials"]
    for key, spec in cfg.space.items():  # each end of every dimension makes a trial the train action accepts
        for value in (spec if isinstance(spec, list) else [spec["low"], spec["high"]]):
            trial = cfg.trial_config({key: value}, 0)
            assert getattr(trial, key) == value and trial.model_name == params["base"]["model_name"]
            assert trial.output_dir == str(tmp_path / "search" / "trial-0000")


def test_ranges_become_optuna_suggestions_of_the_key_type(tmp_path: Path) -> None:
    import optuna

    from hello_agents_rl.workflows.search import _suggest

    space = {"lora_rank": {"low": 4, "high": 64, "log": True}, "learning_rate": {"low": 1e-6, "high": 1e-4, "log": True},
             "kl_coef": [0.01, 0.05, 0.1], "num_generations": {"low": 2, "high": 8, "step": 2}}
    cfg = parse({"action": "search", "output_dir": str(tmp_path), "base": {"dataset": "arithmetic"}, "space": space})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(30):
        trial = study.ask()
        params = {key: _suggest(trial, key, spec) for key, spec in cfg.space.items()}
        train = cfg.trial_config(params, trial.number)  # every draw is a valid train config
        assert isinstance(train.lora_rank, int) and 4 <= train.lora_rank <= 64
        assert 1e-6 <= train.learning_rate <= 1e-4 and train.kl_coef in (0.01, 0.05, 0.1)
        assert train.num_generations in (2, 4, 6, 8)
        assert Path(train.output_dir) == tmp_path / f"trial-{trial.number:04d}"
        study.tell(trial, 0.0)


# ---- 1 and 4. trials are ordinary runs; the report; the best config trains as is; reruns continue ----


@pytest.mark.slow
def test_search_trials_report_and_best_config(tmp_path: Path, tiny_model: str) -> None:
    import matplotlib.image

    out = tmp_path / "search"
    result = RLTrainingTool().run(search_params(out, tiny_model))
    assert result["status"] == "completed" and result["n_trials"] == 3
    assert [row["state"] for row in result["trials"]] == ["complete"] * 3
    for row in result["trials"]:
        folder = Path(row["output_dir"])
        assert folder == out / f"trial-{row['number']:04d}"
        assert json.loads((folder / "results.json").read_text())["status"] == "completed"
        assert json.loads((folder / "evaluation.json").read_text())["accuracy"] == row["value"]
        trial_config = yaml.safe_load((folder / "config.yaml").read_text())
        assert trial_config["learning_rate"] == row["params"]["learning_rate"]
        assert trial_config["lora_rank"] == row["params"]["lora_rank"]
        assert row["duration_s"] > 0
    report = (out / "report.md").read_text()
    assert "| trial | learning_rate | lora_rank | objective | duration (s) | state | note |" in report
    assert f"optuna-dashboard {result['storage']}" in report
    for png in ("history.png", "importance.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"({png})" in report
        assert matplotlib.image.imread(out / png).ndim == 3

    best = yaml.safe_load(Path(result["best"]["config_path"]).read_text())
    assert best["learning_rate"] == result["best"]["params"]["learning_rate"] and best["output_dir"] == str(out / "best")
    with pytest.raises(SystemExit) as exit_:  # the best config trains as is
        cli.main(["train", "--config", result["best"]["config_path"]])
    assert exit_.value.code == 0
    assert json.loads((out / "best" / "results.json").read_text())["config"]["lora_rank"] == best["lora_rank"]

    again = RLTrainingTool().run(search_params(out, tiny_model))  # the same command: nothing left to do
    assert [row["duration_s"] for row in again["trials"]] == [row["duration_s"] for row in result["trials"]]
    more = RLTrainingTool().run(search_params(out, tiny_model, n_trials=4))  # a bigger budget: one more trial
    assert len(more["trials"]) == 4 and more["trials"][:3] == again["trials"]
    assert more["trials"][3]["params"] not in [row["params"] for row in result["trials"]]


@pytest.mark.slow
def test_grid_search_runs_each_combination_once_then_stops(tmp_path: Path, tiny_model: str) -> None:
    space = {"kl_coef": [0.0, 0.1], "lora_rank": [4, 8]}
    result = RLTrainingTool().run(search_params(tmp_path / "grid", tiny_model, sampler="grid", n_trials=10, space=space))
    combos = sorted((row["params"]["kl_coef"], row["params"]["lora_rank"]) for row in result["trials"])
    assert combos == [(0.0, 4), (0.0, 8), (0.1, 4), (0.1, 8)]  # the grid is exhausted before n_trials


@pytest.mark.slow
def test_sft_trials_report_minus_the_loss(tmp_path: Path, tiny_model: str) -> None:
    base = tiny_base(tiny_model, algorithm="sft", max_steps=3)
    out = tmp_path / "sft"
    result = RLTrainingTool().run(search_params(out, tiny_model, base=base, n_trials=2, space={"learning_rate": [1e-4, 1e-3]}))
    assert [row["state"] for row in result["trials"]] == ["complete", "complete"]
    for trial in load_study(out).trials:  # the study maximises: a lower loss must report higher
        losses = [json.loads(line)["loss"] for line in (out / f"trial-{trial.number:04d}" / "metrics.jsonl").read_text().splitlines()
                  if "loss" in json.loads(line) and "train_runtime" not in json.loads(line)]
        assert list(trial.intermediate_values.values()) == [-loss for loss in losses] and losses


@pytest.mark.slow
def test_with_eval_steps_trials_report_the_periodic_eval_reward(tmp_path: Path, tiny_model: str) -> None:
    base = tiny_base(tiny_model, max_steps=2, eval_steps=1, eval_samples=2)
    out = tmp_path / "eval"
    RLTrainingTool().run(search_params(out, tiny_model, base=base, n_trials=1, objective="reward", space={"kl_coef": [0.05]}))
    (trial,) = load_study(out).trials
    logs = [json.loads(line) for line in (out / "trial-0000" / "metrics.jsonl").read_text().splitlines()]
    evals = {entry["step"]: entry["eval_reward"] for entry in logs if "eval_reward" in entry}
    assert trial.intermediate_values == evals and len(evals) == 2
    assert trial.value == evals[2]  # objective reward: the last periodic evaluation


@pytest.mark.slow
def test_another_studys_folder_is_refused(tmp_path: Path, tiny_model: str) -> None:
    out = tmp_path / "search"
    RLTrainingTool().run(search_params(out, tiny_model, n_trials=1))
    with pytest.raises(ConfigError, match="holds the trials of study 'search'"):
        RLTrainingTool().run(search_params(out, tiny_model, n_trials=1, study_name="other"))


# ---- 2. pruning on the reported reward; the doctor's hard failures fail a trial with the reason ----


def _minus_length(completion: str, ground_truth: Any = None, **_: Any) -> float:
    return -float(len(completion))


@pytest.mark.slow
def test_hopeless_trial_is_pruned(tmp_path: Path, tiny_model: str) -> None:
    out = tmp_path / "search"
    base = tiny_base(tiny_model, max_steps=4, reward_type=_minus_length)  # short answers score higher
    params = search_params(
        out, tiny_model, base=base, objective="reward", pruner="median", pruner_startup_trials=1, n_trials=2,
        space={"max_new_tokens": [1, 16]}, enqueue=[{"max_new_tokens": 1}, {"max_new_tokens": 16}],
    )
    result = RLTrainingTool().run(params)
    good, hopeless = result["trials"]
    assert (good["state"], good["params"]) == ("complete", {"max_new_tokens": 1})
    assert (hopeless["state"], hopeless["params"]) == ("pruned", {"max_new_tokens": 16})
    assert hopeless["note"].startswith("pruned at step 1 (reward -") and hopeless["value"] is None
    assert json.loads((out / "trial-0001" / "results.json").read_text())["num_steps"] == 1  # it stopped early
    assert json.loads((out / "trial-0000" / "results.json").read_text())["num_steps"] == 4
    assert load_study(out).trials[1].intermediate_values.keys() == {1}


@pytest.mark.slow
def test_hyperband_pruner_runs_a_search(tmp_path: Path, tiny_model: str) -> None:
    out = tmp_path / "hyperband"
    result = RLTrainingTool().run(search_params(out, tiny_model, base=tiny_base(tiny_model, max_steps=3), pruner="hyperband"))
    assert result["n_trials"] == 3 and {row["state"] for row in result["trials"]} <= {"complete", "pruned"}
    steps = [list(t.intermediate_values) for t in load_study(out).trials]
    assert all(s and s == [1, 2, 3][: len(s)] for s in steps), steps  # reported each step, until pruned


@pytest.mark.slow
def test_kl_explosion_fails_the_trial_with_the_doctors_reason(tmp_path: Path, tiny_model: str) -> None:
    out = tmp_path / "search"
    # the doctor's KL rule with a threshold every real step crosses: the first log with KL > 0 ends the trial
    base = tiny_base(tiny_model, max_steps=6, learning_rate=1e-2, doctor_thresholds={"kl_high": 1e-12, "patience": 1})
    result = RLTrainingTool().run(search_params(out, tiny_model, base=base, n_trials=1, space={"kl_coef": [0.05]}))
    assert result["status"] == "completed" and result["n_trials"] == 1  # a failed trial counts; the search goes on
    (row,) = result["trials"]
    assert row["state"] == "fail" and row["value"] is None
    assert "the policy is drifting from the reference" in row["note"]
    assert load_study(out).trials[0].user_attrs["fail_reason"] == row["note"]
    assert json.loads((out / "trial-0000" / "results.json").read_text())["num_steps"] < 6
    assert "best" not in result


# ---- 3. kill -9 and rerun: finished trials kept, the killed one retried; two workers share one study ----


def _search_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "hello_agents_rl.interfaces.cli", "search", "--config", str(config)]


def _gated_search_command(config: Path, gate: Path) -> list[str]:
    """The search CLI whose trials start only once two workers are each inside one (a file per worker in `gate`),
    so two workers overlap however fast the first would otherwise finish the study alone."""
    hold = (
        "import os, pathlib, sys, time\n"
        "from hello_agents_rl.workflows import search\n"
        "from hello_agents_rl.interfaces.cli import main\n"
        f"gate = pathlib.Path({str(gate)!r})\n"
        "trial = search.Objective.__call__\n"
        "def gated(self, optuna_trial):\n"
        "    (gate / str(os.getpid())).touch()\n"
        "    deadline = time.monotonic() + 300  # then go on: the test fails on its assertion, it does not hang\n"
        "    while len(list(gate.iterdir())) < 2 and time.monotonic() < deadline:\n"
        "        time.sleep(0.1)\n"
        "    return trial(self, optuna_trial)\n"
        "search.Objective.__call__ = gated\n"
        "main(sys.argv[1:])\n"
    )
    return [sys.executable, "-c", hold, "search", "--config", str(config)]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _states(out: Path) -> list[str]:
    if not (out / "search.json").is_file():  # written once the study is open: reading it sooner races its creation
        return []
    try:
        return [t.state.name for t in load_study(out).trials]
    except Exception:  # noqa: BLE001 - the study does not exist yet
        return []


@pytest.mark.slow
def test_killed_search_resumes_and_retries_the_killed_trial(tmp_path: Path, tiny_model: str) -> None:
    out = tmp_path / "search"
    config = tmp_path / "search.yaml"
    params = search_params(out, tiny_model, base=tiny_base(tiny_model, max_steps=40), heartbeat_interval=1, grace_period=2)
    config.write_text(yaml.safe_dump({k: v for k, v in params.items() if k != "action"}))
    first = subprocess.Popen(_search_command(config), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: _states(out)[:2] == ["COMPLETE", "RUNNING"], 300, "trial 1 to be running")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    before = load_study(out).trials[0]
    time.sleep(3)  # past the grace period: trial 1's heartbeat has stopped
    rerun = subprocess.run(_search_command(config), env=_env(), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]

    trials = load_study(out).trials
    assert trials[0].datetime_complete == before.datetime_complete and trials[0].value == before.value  # kept
    killed = trials[1]
    assert killed.state.name == "FAIL"
    (retry,) = [t for t in trials if t.system_attrs.get("failed_trial") == 1]
    assert retry.state.name == "COMPLETE" and retry.params == killed.params
    assert sum(t.state.name == "COMPLETE" for t in trials) == 3  # and the search went on to n_trials
    result = json.loads((out / "results.json").read_text())
    assert result["trials"][1]["note"] == f"killed or interrupted; retried as trial {retry.number}"
    assert json.loads((out / f"trial-{retry.number:04d}" / "results.json").read_text())["num_steps"] == 40


def test_two_workers_opening_a_fresh_study_together_both_open_it(tmp_path: Path) -> None:
    # Optuna creates a new SQLite file's tables unlocked: started together, one worker died on CREATE TABLE
    out = tmp_path / "search"
    start = time.time() + 15  # both have imported by then and open the study in the same instant
    opener = (
        "import sys, time\n"
        "from hello_agents_rl.workflows import search\n"
        "from hello_agents_rl.workflows.actions import parse\n"
        f"cfg = parse({{'action': 'search', 'output_dir': {str(out)!r}, 'base': {{'dataset': 'arithmetic'}}}})\n"
        f"time.sleep(max(0.0, {start} - time.time()))\n"
        "study = search._open_study(cfg, f'sqlite:///{cfg.output_dir}/study.db')\n"
        "print(study.study_name)\n"
    )
    workers = [subprocess.Popen([sys.executable, "-c", opener], env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=120)
        assert worker.returncode == 0 and stdout.strip() == "search", stderr[-2000:]
    assert len(load_study(out).trials) == 0


@pytest.mark.slow
def test_two_workers_share_one_study_without_running_a_trial_twice(tmp_path: Path, tiny_model: str) -> None:
    out = tmp_path / "search"
    config = tmp_path / "search.yaml"
    rates = [1e-5, 3e-5, 1e-4, 3e-4]
    params = search_params(out, tiny_model, n_trials=4, seed=None, space={"learning_rate": {"low": 1e-6, "high": 1e-3}},
                           enqueue=[{"learning_rate": rate} for rate in rates])
    config.write_text(yaml.safe_dump({k: v for k, v in params.items() if k != "action"}))
    gate = tmp_path / "in-a-trial"  # each worker's first trial waits here until the other worker is in one too
    gate.mkdir()
    # the first worker's stderr goes to a file: an unread pipe fills up and blocks the worker mid-trial
    first_log = tmp_path / "first-worker.log"
    with first_log.open("w") as log:
        first = subprocess.Popen(_gated_search_command(config, gate), env=_env(), stdout=subprocess.DEVNULL, stderr=log)
    _wait_for(lambda: len(_states(out)) >= 4 or first.poll() is not None, 300, "the first worker to queue the trials")
    assert first.poll() is None, first_log.read_text()[-3000:]  # else the second would wait 300 s for nobody
    second = subprocess.run(_gated_search_command(config, gate), env=_env(), capture_output=True, text=True, timeout=600)
    assert first.wait(timeout=600) == 0, first_log.read_text()[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]

    trials = load_study(out).trials
    done = [t for t in trials if t.state.name == "COMPLETE"]
    assert 4 <= len(done) <= 5  # a worker may start one more trial while the other finishes the last one
    assert sorted(t.params["learning_rate"] for t in done if t.params["learning_rate"] in rates) == rates  # each once
    assert len({t.user_attrs["worker"] for t in done}) == 2, "both workers ran trials"
    folders = [t.user_attrs["output_dir"] for t in done]
    assert len(set(folders)) == len(folders) and all((Path(f) / "results.json").is_file() for f in folders)


@pytest.mark.slow
def test_ctrl_c_checkpoints_the_trial_queues_it_again_and_the_rerun_finishes(tmp_path: Path, tiny_model: str) -> None:
    out = tmp_path / "search"
    config = tmp_path / "search.yaml"
    params = search_params(out, tiny_model, base=tiny_base(tiny_model, max_steps=60), n_trials=2)
    config.write_text(yaml.safe_dump({k: v for k, v in params.items() if k != "action"}))
    first_log = tmp_path / "first-run.log"  # a file, not an unread pipe that could fill and block the run
    with first_log.open("w") as log:
        first = subprocess.Popen(_search_command(config), env=_env(), stdout=subprocess.DEVNULL, stderr=log)
    metrics = out / "trial-0000" / "metrics.jsonl"
    _wait_for(lambda: metrics.is_file() or first.poll() is not None, 300, "trial 0 to be training")
    first.send_signal(signal.SIGINT)
    assert first.wait(timeout=300) == 130, first_log.read_text()[-3000:]
    trials = load_study(out).trials
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"] and trials[1].params == trials[0].params
    run = json.loads((out / "trial-0000" / "results.json").read_text())
    assert run["status"] == "interrupted" and list((out / "trial-0000").glob("checkpoint-*"))
    assert json.loads((out / "results.json").read_text())["status"] == "interrupted"

    rerun = subprocess.run(_search_command(config), env=_env(), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    trials = load_study(out).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    assert trials[1].system_attrs["failed_trial"] == 0


@pytest.mark.slow
def test_optuna_dashboard_reads_the_study(tmp_path: Path, tiny_model: str) -> None:
    from wsgiref.util import setup_testing_defaults

    dashboard = pytest.importorskip("optuna_dashboard")
    out = tmp_path / "search"
    result = RLTrainingTool().run(search_params(out, tiny_model, n_trials=2, study_name="gsm8k-grpo"))
    app = dashboard.wsgi(result["storage"])  # what `optuna-dashboard <storage>` serves

    def get(path: str) -> dict:
        environ: dict = {}
        setup_testing_defaults(environ)
        environ.update(PATH_INFO=path, REQUEST_METHOD="GET")
        status: list[str] = []
        body = b"".join(app(environ, lambda s, headers, *rest: status.append(s)))
        assert status == ["200 OK"], (path, status)
        return json.loads(body)

    (summary,) = get("/api/studies")["study_summaries"]
    assert summary["study_name"] == "gsm8k-grpo" and summary["directions"] == ["maximize"]
    study = get(f"/api/studies/{summary['study_id']}")
    assert len(study["trials"]) == 2
    assert all({p["name"] for p in trial["params"]} == {"learning_rate", "lora_rank"} for trial in study["trials"])
