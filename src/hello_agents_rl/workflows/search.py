"""`action: search` -- the book's section 11.6 (grid, random, TPE) on Optuna.

Optuna owns the loop, the samplers, the pruners and the study (an RDB: SQLite by default), so a killed
search resumes where it stopped and several workers can share one study. This module only turns a
trial into an ordinary training run in `<output_dir>/trial-NNNN/`, reports its progress to the pruner,
and writes the report (table, best config, plots).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any

import optuna
from filelock import FileLock
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState
from transformers import TrainerCallback

from hello_agents_rl.config import SearchConfig, Thresholds, TrainConfig, numeric_kinds
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.outputs import atomic_write_json
from hello_agents_rl.workflows.search_report import config_for_yaml, counted, report, write_yaml

CLAIM = "search.json"  # which study an output_dir belongs to: trial folders of two studies must never mix
HARD_FAILURES = ("nonfinite", "kl_high")  # doctor rules that end a trial as failed: NaN loss, KL explosion


class TrialFailed(Exception):
    """The run failed (NaN, KL explosion): the trial is marked FAIL with the reason and the search goes on."""


def run(cfg: SearchConfig) -> dict[str, Any]:
    from hello_agents_rl.trainers.preflight import check_vllm_device

    check_vllm_device(cfg.trial_config({}, 0))  # before the study claims the folder
    out = Path(cfg.output_dir)
    storage_url = cfg.storage or f"sqlite:///{out.resolve() / 'study.db'}"
    claim = _check_claim(out, storage_url, cfg.study_name)
    study = _open_study(cfg, storage_url)
    if not (out / CLAIM).is_file():  # only once the study opened: a wrong URL must not claim the folder
        atomic_write_json(out / CLAIM, claim)
    for params in cfg.enqueue:  # skip_if_exists: a rerun does not queue them again
        study.enqueue_trial(params, skip_if_exists=True)
    status = "completed"
    if counted(study) < cfg.n_trials:
        stop = _stop_at(cfg.n_trials)
        objective = Objective(cfg)
        try:
            # Optuna runs the loop; n_trials=None because the stop callback counts the whole study, every worker's trials
            study.optimize(objective, n_trials=None, callbacks=[stop], catch=(TrialFailed,), gc_after_trial=True)
        except KeyboardInterrupt:
            status = "interrupted"
            _retry_interrupted(study, objective.current, cfg.max_retry)
    return report(study, cfg, storage_url, status)


def _check_claim(out: Path, storage_url: str, study_name: str) -> dict[str, str]:
    claim = {"storage": storage_url, "study_name": study_name}
    path = out / CLAIM
    if path.is_file():
        held = json.loads(path.read_text(encoding="utf-8"))
        if {k: held.get(k) for k in claim} != claim:
            raise ConfigError(
                f"`output_dir`: {out} holds the trials of study {held.get('study_name')!r} in {held.get('storage')}; "
                "choose another output_dir, or the same storage and study_name to continue that search"
            )
    elif out.is_dir() and any(out.glob("trial-*")):
        raise ConfigError(f"`output_dir`: {out} holds trial folders of another search; choose another output_dir")
    return claim


def _open_study(cfg: SearchConfig, storage_url: str) -> optuna.Study:
    engine: dict[str, Any] = {}
    creating = contextlib.nullcontext()
    if storage_url.startswith("sqlite:///"):
        engine = {"connect_args": {"timeout": 60}}  # two workers wait for the lock, not fail
        db = Path(storage_url.removeprefix("sqlite:///"))
        db.parent.mkdir(parents=True, exist_ok=True)
        # Optuna creates a fresh SQLite file's tables without a lock: two workers started together race on
        # CREATE TABLE and one dies ("table studies already exists"), so they take turns creating it
        creating = FileLock(f"{db}.lock", timeout=120)
    with creating, warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat: experimental since 2.8
        storage = optuna.storages.RDBStorage(
            storage_url,
            engine_kwargs=engine,
            heartbeat_interval=cfg.heartbeat_interval,
            grace_period=cfg.grace_period,
            heartbeat_stale_trial_callback=_retry(cfg.max_retry),
        )
        # a first look to mix the trial count into the seed: a rerun or a second worker must not replay the same draws
        study = optuna.create_study(storage=storage, study_name=cfg.study_name, direction="maximize", load_if_exists=True)
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise ConfigError(f"`study_name`: {cfg.study_name!r} in {storage_url} minimises; use another study_name")
    seed = None if cfg.seed is None else cfg.seed + len(study.trials)
    return optuna.load_study(study_name=cfg.study_name, storage=storage, sampler=_sampler(cfg, seed), pruner=_pruner(cfg))


def _sampler(cfg: SearchConfig, seed: int) -> optuna.samplers.BaseSampler:
    if cfg.sampler == "grid":
        return optuna.samplers.GridSampler({key: list(values) for key, values in cfg.space.items()}, seed=seed)
    if cfg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # TPE models the space only after its random start-up trials; Optuna's 10 would be a whole small search
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(2, min(10, cfg.n_trials // 3)), constant_liar=True)


def _pruner(cfg: SearchConfig) -> optuna.pruners.BasePruner:
    if cfg.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=cfg.pruner_startup_trials, n_warmup_steps=cfg.pruner_warmup_steps)
    if cfg.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource="auto")
    return optuna.pruners.NopPruner()


def _stop_at(n_trials: int) -> Any:
    def stop(study: optuna.Study, trial: FrozenTrial) -> None:
        if counted(study) >= n_trials:
            study.stop()

    return stop


def _retry_interrupted(study: optuna.Study, number: int | None, max_retry: int) -> None:
    """Ctrl-C/SIGTERM marked the running trial FAIL: queue it again, as the heartbeat does for a killed one."""
    if number is None:
        return
    trial = study.get_trials(deepcopy=True)[number]
    if trial.state == TrialState.FAIL and "fail_reason" not in trial.user_attrs:
        _retry(max_retry)(study, trial)


def _retry(max_retry: int) -> RetryHeartbeatStaleTrialCallback:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # experimental since Optuna 2.8
        return RetryHeartbeatStaleTrialCallback(max_retry=max_retry)


class Objective:
    """One trial = one ordinary training run (then, for accuracy, one evaluation) in its own folder."""

    def __init__(self, cfg: SearchConfig) -> None:
        self.cfg = cfg
        self.current: int | None = None

    def __call__(self, trial: optuna.Trial) -> float:
        from hello_agents_rl.trainers.run import train

        self.current = trial.number
        params = {key: _suggest(trial, key, spec) for key, spec in self.cfg.space.items()}
        train_cfg = self.cfg.trial_config(params, trial.number)
        folder = Path(train_cfg.output_dir)
        trial.set_user_attr("output_dir", str(folder))
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
        write_yaml(folder / "config.yaml", config_for_yaml(train_cfg))
        reporter = TrialReporter(trial, train_cfg)
        print(f"[search] trial {trial.number}: {params} -> {folder}", flush=True)
        result = train(train_cfg, extra_callbacks=[reporter])
        if result["status"] == "interrupted":
            raise KeyboardInterrupt  # Optuna marks the trial FAIL; run() queues it again
        failure = result.get("error") if result["status"] == "failed" else reporter.failure
        if failure:
            trial.set_user_attr("fail_reason", failure)
            raise TrialFailed(failure)
        if reporter.pruned_at is not None:
            trial.set_user_attr("pruned_at_step", reporter.pruned_at)
            trial.set_user_attr("pruned_on", f"{reporter.metric} {reporter.last:.3g}")
            raise optuna.TrialPruned(f"pruned at step {reporter.pruned_at} ({reporter.metric} {reporter.last:.4g})")
        if self.cfg.objective == "reward":
            if reporter.last is None:
                raise TrialFailed(f"no {reporter.metric} was logged; lower logging_steps or eval_steps")
            return reporter.last
        return self._accuracy(trial, result["model_path"], folder)

    def _accuracy(self, trial: optuna.Trial, model_path: str, folder: Path) -> float:
        from hello_agents_rl.evaluation.run import run as evaluate

        evaluation = evaluate(self.cfg.evaluation_config(model_path))
        atomic_write_json(folder / "evaluation.json", evaluation)
        for key in ("format_rate", "mean_tokens"):
            trial.set_user_attr(key, evaluation[key])
        return float(evaluation["accuracy"])


def _suggest(trial: optuna.Trial, key: str, spec: Any) -> Any:
    if isinstance(spec, (list, tuple)):
        return trial.suggest_categorical(key, list(spec))
    integer = numeric_kinds(TrainConfig.model_fields[key].annotation) == [int]  # validated: int or float fields only
    suggest = trial.suggest_int if integer else trial.suggest_float
    return suggest(key, spec["low"], spec["high"], log=spec.get("log", False), step=spec.get("step", 1 if integer else None))


class TrialReporter(TrainerCallback):
    """Reports the run's progress to the trial (the pruner's input) and stops it on the doctor's hard failures."""

    def __init__(self, trial: optuna.Trial, cfg: TrainConfig) -> None:
        from hello_agents_rl.trainers.doctor import Doctor

        self.trial = trial
        grpo = cfg.algorithm == "grpo"
        # the periodic evaluation when there is one, else the train reward; SFT has only a loss (lower is better)
        self.metric = ("eval_reward" if grpo else "eval_loss") if cfg.eval_steps else ("reward" if grpo else "loss")
        self.sign = 1.0 if grpo else -1.0
        self.doctor = Doctor(cfg.learning_rate, cfg.kl_coef, cfg.max_new_tokens, Thresholds(**cfg.doctor_thresholds),
                             use_lora=cfg.use_lora)
        self.pruned_at: int | None = None
        self.failure: str | None = None
        self.last: float | None = None

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs or "train_runtime" in logs:
            return
        step = state.global_step
        if not any(key.startswith("eval_") for key in logs):
            before = self.doctor.active  # the doctor's own rules, so a search fails a run for the book's reasons
            findings = self.doctor.observe(step, logs)
            if (self.doctor.active - before) & set(HARD_FAILURES):
                self.failure = "; ".join(findings)
                control.should_training_stop = True
                return
        value = logs.get(self.metric)
        if not isinstance(value, (int, float)):
            return
        self.last = self.sign * float(value)
        self.trial.report(self.last, step)
        if self.trial.should_prune():
            self.pruned_at = step
            control.should_training_stop = True


# ---- the report: what a person looks at after (or during) a search ----
