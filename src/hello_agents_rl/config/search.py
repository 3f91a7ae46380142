"""`action: search`: the study's settings, and the checks that every point of the space is a valid train config."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from hello_agents_rl.config.base import (
    MAX_SEED,
    Base,
    Count,
    LocalPath,
    PathRole,
    SectionOf,
    nested,
    numeric_kinds,
    read_number,
)
from hello_agents_rl.config.evaluate import EvaluateConfig, evaluation_of
from hello_agents_rl.config.train import TrainConfig, keys_read_by
from hello_agents_rl.errors import did_you_mean

SEARCH_OWNS = {"output_dir", "overwrite_output_dir", "resume_from_checkpoint"}
RANGE_KEYS = ("low", "high", "log", "step")
# The package that provides each database driver SQLAlchemy may pick (its default for postgresql:// is psycopg
# since SQLAlchemy 2.1, psycopg2 before); any other is named by its module.
DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "mysqldb": "mysqlclient",
                   "pymysql": "PyMySQL", "mysqlconnector": "mysql-connector-python"}


class SearchConfig(Base):
    """`action: search` -- the book's section 11.6 on Optuna: every trial is a full training run in its own folder."""

    base: Annotated[dict[str, Any], SectionOf(TrainConfig)] = Field(default_factory=dict, description="Train keys every trial shares (any train key).")
    space: Annotated[dict[str, Any], SectionOf(TrainConfig, "space")] = Field(
        default_factory=lambda: {
            "learning_rate": {"low": 1e-6, "high": 1e-4, "log": True},
            "kl_coef": [0.01, 0.05, 0.1],
            "lora_rank": [8, 16, 32],
        },
        description="Train key -> a list of choices, or {low, high, log, step} for a number; the default is the book's section 11.6 space.",
    )
    sampler: Literal["tpe", "random", "grid"] = Field("tpe", description="Optuna sampler; grid needs lists only.")
    pruner: Literal["median", "hyperband", "none"] = Field(
        "median", description="Stop hopeless trials early on the periodic eval reward (eval_steps) or the train reward."
    )
    pruner_startup_trials: Count = Field(3, ge=0, description="Median pruner: trials that run in full before any is pruned.")
    pruner_warmup_steps: Count = Field(0, ge=0, description="Median pruner: steps a trial runs before it can be pruned.")
    n_trials: Count = Field(20, ge=1, description="Finished trials (complete, pruned or failed) the study ends with.")
    objective: Literal["accuracy", "reward"] = Field(
        "accuracy",
        description="accuracy: greedy accuracy on the evaluation split after training; reward: the last "
        "periodic eval reward (or train reward without eval_steps). Maximised.",
    )
    evaluation: Annotated[dict[str, Any], SectionOf(EvaluateConfig)] = Field(
        default_factory=dict,
        description="Evaluate keys for the accuracy objective; default: the base's dataset, split test, 200 questions.",
    )
    enqueue: Annotated[list[dict[str, Any]], SectionOf(TrainConfig, "rows")] = Field(
        default_factory=list, description="Configurations (space keys -> values) to try first, e.g. the hand-picked one."
    )
    storage: Annotated[str, PathRole("storage")] | None = Field(
        None, description="Optuna RDB URL holding the study; None = sqlite:///<output_dir>/study.db."
    )
    study_name: str = Field("search", min_length=1, description="Study name in the storage; workers with the same one share it.")
    output_dir: LocalPath = Field("./runs/search", description="trial-NNNN/ folders, report.md, plots and best_config.yaml.")
    seed: int | None = Field(
        None, ge=0, le=MAX_SEED,
        description="Sampler seed, plus the number of trials already in the study (a rerun draws anew); None = fresh per worker.",
    )
    heartbeat_interval: Count = Field(
        30, ge=1, description="Seconds between a running trial's heartbeats; a killed trial is retried after grace_period."
    )
    grace_period: Count | None = Field(None, ge=1, description="Seconds without a heartbeat before a trial counts as killed; None = 2 x heartbeat_interval.")
    max_retry: Count = Field(2, ge=0, description="Times a killed or interrupted trial is retried with the same parameters.")

    @field_validator("storage")
    @classmethod
    def _rdb_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "://" not in value:
            raise ValueError(f"not a database URL: {value!r}; e.g. sqlite:///runs/search.db or postgresql://user@host/db")
        _check_driver(value)
        return value

    @model_validator(mode="after")
    def _search_is_valid(self) -> SearchConfig:
        owned = sorted(set(self.base) & SEARCH_OWNS)
        if owned:
            raise ValueError(
                f"`base.{owned[0]}`: the search sets it for each trial (<output_dir>/trial-NNNN, never overwriting); "
                "remove it from base (set the search's output_dir instead)"
            )
        _refuse_nonfinite(self.base, "base")  # NaN slips through pydantic's gt/ge checks
        base = self.trial_config({}, 0)  # validates every base key, and that output_dir is writable
        if not self.space:
            raise ValueError("`space`: empty; give at least one train key, e.g. {kl_coef: [0.01, 0.05, 0.1]}")
        _refuse_nonfinite(self.space, "space")
        # numbers read as the train keys read them (YAML's 1e-3 is a string): Optuna gets numbers, not strings
        object.__setattr__(self, "space", {key: _dimension(key, spec, self.base, self.sampler)
                                           for key, spec in self.space.items()})
        if self.objective == "reward":
            _every_trial_has_a_reward(base.algorithm, self.space)
        for i, row in enumerate(self.enqueue):
            unknown = [key for key in row if key not in self.space]
            if unknown:
                raise ValueError(f"`enqueue.{i}.{unknown[0]}`: not a key of space{did_you_mean(unknown[0], list(self.space))}")
            nested(TrainConfig, keys_read_by({**self.base, **row}), f"enqueue.{i}")
        object.__setattr__(self, "enqueue", [{key: _as_key_reads(key, value) for key, value in row.items()}
                                             for row in self.enqueue])
        if self.objective == "accuracy":
            if not isinstance(base.dataset, str) and "dataset" not in self.evaluation:
                raise ValueError(
                    "`evaluation.dataset`: the base's dataset is a Python object, so its held-out split cannot be "
                    "chosen; give the evaluation a dataset (e.g. arithmetic, or a .jsonl file)"
                )
            self.evaluation_config("<model>")
        return self

    def trial_config(self, params: dict[str, Any], number: int) -> TrainConfig:
        """One trial's full, validated train config: base, then the trial's parameters, in its own folder."""
        folder = str(Path(self.output_dir) / f"trial-{number:04d}")
        return nested(TrainConfig, keys_read_by({**self.base, **params, "action": "train", "output_dir": folder}), "base")

    def evaluation_config(self, model_path: str) -> EvaluateConfig:
        answer_length = {"max_new_tokens": self.base["max_new_tokens"]} if "max_new_tokens" in self.base else {}
        return evaluation_of(self.base, {**answer_length, **self.evaluation}, model_path)


def _number_kind(key: str) -> type | None:
    """int or float for a numeric train key, None for any other."""
    kinds = numeric_kinds(TrainConfig.model_fields[key].annotation)
    return (int if kinds == [int] else float) if kinds else None


def _as_key_reads(key: str, value: Any) -> Any:
    """A choice as the train key reads it: for a number key, '1e-3' is 0.001; anything else stays as given."""
    kind = _number_kind(key)
    number = read_number(value, kind) if kind is not None else None
    return value if number is None else number


def _dimension(key: str, spec: Any, base: dict[str, Any], sampler: str) -> Any:
    """One space entry, checked and with its numbers read: a train key, with choices or a range its type accepts."""
    where = f"`space.{key}`"
    if key not in TrainConfig.model_fields or key == "action":
        raise ValueError(f"{where}: not a train key{did_you_mean(key, list(TrainConfig.model_fields))}")
    if key in SEARCH_OWNS:
        raise ValueError(f"{where}: the search sets it for each trial; it cannot be searched")
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ValueError(f"{where}: empty list of choices; give at least one value")
        for value in spec:
            if value is not None and not isinstance(value, (bool, int, float, str)):
                raise ValueError(f"{where}: choices must be numbers, strings, booleans or null (got {value!r})")
            nested(TrainConfig, keys_read_by({**base, key: value}), f"space.{key}")
        return [_as_key_reads(key, value) for value in spec]
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: give a list of choices or a range {{low, high, log, step}} (got {spec!r})")
    if sampler == "grid":
        raise ValueError(f"{where}: the grid sampler needs a finite list of values, e.g. [1e-5, 1e-4]; or use sampler tpe/random")
    for name in spec:
        if name not in RANGE_KEYS:
            raise ValueError(f"`space.{key}.{name}`: unknown range key{did_you_mean(str(name), list(RANGE_KEYS))} (use low, high, log, step)")
    if "low" not in spec or "high" not in spec:
        raise ValueError(f"{where}: a range needs low and high, e.g. {{low: 1e-6, high: 1e-4, log: true}}")
    kind = _number_kind(key)
    if kind is None:
        raise ValueError(f"{where}: {key} is not a number; give a list of choices instead of a range")
    read = dict(spec)
    for name in ("low", "high", "step"):
        if name == "step" and spec.get("step") is None:
            continue
        read[name] = read_number(spec[name], kind)
        if read[name] is None:
            taken = "an integer" if kind is int else "a finite number"
            raise ValueError(f"`space.{key}.{name}`: {key} takes {taken} (got {spec[name]!r})")
    low, high, log, step = read["low"], read["high"], read.get("log", False), read.get("step")
    if not isinstance(log, bool):
        raise ValueError(f"`space.{key}.log`: true or false (got {log!r})")
    if not low < high:
        raise ValueError(f"{where}: need low < high (got low {low}, high {high})")
    if log and low <= 0:
        raise ValueError(f"{where}: a log range needs low > 0 (got {low})")
    if step is not None and (step <= 0 or log):
        raise ValueError(f"`space.{key}.step`: must be > 0 and cannot go with log: true (got {step})")
    for value in (low, high):  # the key's own bounds, e.g. lora_rank >= 1, kl_coef >= 0
        nested(TrainConfig, {**base, key: value}, f"space.{key}")
    return read


def _check_driver(url: str) -> None:
    """The database and its driver as SQLAlchemy (Optuna's RDB storage) will load them, before anything runs."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    scheme = url.split("://", 1)[0]
    try:
        dialect = make_url(url).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError):
        raise ValueError(f"{scheme}:// is not a database SQLAlchemy knows; e.g. sqlite:///runs/search.db or "
                         "postgresql://user@host/db") from None
    try:
        dialect.import_dbapi()
    except ImportError as error:
        package = DRIVER_PACKAGES.get(dialect.driver, error.name or dialect.driver)
        raise ValueError(f"{scheme}:// needs the database driver {dialect.driver}, which is not installed: "
                         f"pip install '{package}'") from None


def _every_trial_has_a_reward(base_algorithm: str, space: dict[str, Any]) -> None:
    """objective reward: SFT logs no reward, so every algorithm a trial can draw must be grpo."""
    if "algorithm" in space:
        others = sorted({str(a) for a in space["algorithm"]} - {"grpo"})  # a list: algorithm is not a number
        if others:
            raise ValueError(f"`space.algorithm`: objective reward needs algorithm grpo in every trial, and "
                             f"{others[0]} has no reward; drop {others[0]} from space.algorithm or use objective accuracy")
    elif base_algorithm != "grpo":
        raise ValueError("`objective`: reward needs algorithm grpo in base (SFT has no reward); use accuracy")


def _refuse_nonfinite(value: Any, where: str) -> None:
    """NaN or inf anywhere in a nested section, named by its path (e.g. `space.kl_coef.0`)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_nonfinite(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _refuse_nonfinite(item, f"{where}.{i}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"`{where}`: must be a finite number (got {value})")
