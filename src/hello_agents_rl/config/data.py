"""The data keys every action that reads a dataset shares, and which splits each dataset has."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from hello_agents_rl.config.base import MAX_SEED, Base, Count, LocalPath, PathRole, require
from hello_agents_rl.config.checks import check_task
from hello_agents_rl.errors import did_you_mean
from hello_agents_rl.paths import is_task_name

# Splits of the named datasets; a single file or datasets.Dataset is the whole data under either name.
SPLITS: dict[str, tuple[str, ...]] = {"gsm8k": ("train", "test"), "arithmetic": ("train", "test"),
                                      "lookups": ("train", "test")}
SINGLE_SOURCE_SPLITS = ("train", "test")


def split_problem(dataset: Any, split: str, key: str = "split") -> str | None:
    """Why `split` is not a split of `dataset`, listing the ones it has; None when it is."""
    if isinstance(dataset, dict):  # a datasets.DatasetDict: its own splits
        known = tuple(dataset)
    else:
        known = SPLITS.get(dataset, SINGLE_SOURCE_SPLITS) if isinstance(dataset, str) else SINGLE_SOURCE_SPLITS
    if split in known:
        return None
    return f"`{key}`: {split!r} is not a split of this dataset{did_you_mean(split, list(known))} (it has: {', '.join(known)})"


def _is_dataset_object(value: Any) -> bool:
    # A Dataset can only exist once `datasets` is imported: look it up there rather than import it here.
    datasets = sys.modules.get("datasets")
    return datasets is not None and isinstance(value, (datasets.Dataset, datasets.DatasetDict))


AnswerChecker = Literal["number", "math_verify"]  # rewards/checkers.py: CHECKERS (tests/test_checkers.py checks they match)
ANSWER_CHECKER_HELP = ("How an answer is compared with the ground truth, in the reward and in evaluation: number (the "
                       "final number, exactly) or math_verify (LaTeX and expressions; pip install 'hello-agents-rl[math]').")


def answer_checker_problem(checker: str, dataset: Any = None) -> str | None:
    """Why `checker` cannot judge this run's answers (None: it can)."""
    if checker != "math_verify":
        return None
    if isinstance(dataset, str) and is_task_name(dataset):
        return ("`answer_checker`: a reasoning_gym task's answers are judged by the task's own checker; "
                "remove answer_checker")
    from hello_agents_rl.rewards.checkers import math_verify_problem  # the reward layer knows its extra

    return math_verify_problem()


class DataConfig(Base):
    dataset: Annotated[Any, PathRole("dataset")] = Field(
        "gsm8k",
        description="`gsm8k`, `arithmetic` (the embedded synthetic task), `reasoning_gym:<task>` (a reasoning-gym "
        "generator), a .jsonl/.csv file, or a datasets.Dataset.",
    )
    dataset_config: Annotated[dict[str, Any], PathRole("parameters")] = Field(
        default_factory=dict,
        description="`reasoning_gym:<task>`: the generator's own parameters (size per split, difficulty ranges); "
        "`lookups`: chain_lengths, distractors, names, guess_rate, early_stop_rate (docs/agentic.md).",
    )
    dataset_path: LocalPath | None = Field(
        None,
        description="Folder holding GSM8K's train.jsonl/test.jsonl (offline); else $HELLO_AGENTS_GSM8K, else the hub.",
    )
    split: str = Field("train", description="Dataset split to train on (GSM8K: train/test).")
    question_column: str = Field("question", description="Column holding the question in a custom dataset.")
    answer_column: str = Field("answer", description="Column holding the answer in a custom dataset.")
    max_samples: Count | None = Field(
        None, ge=1, description="Use at most this many examples (a seeded shuffle, not the first N); None = all."
    )
    system_prompt: str | None = Field(
        None, description="System message for every prompt; None = the dataset's default, '' = none."
    )
    seed: int = Field(42, ge=0, le=MAX_SEED, description="Seed for data shuffling, sampling and initialisation.")
    answer_checker: AnswerChecker = Field("number", description=ANSWER_CHECKER_HELP)

    @field_validator("dataset")
    @classmethod
    def _dataset_kind(cls, value: Any) -> Any:
        if not isinstance(value, str) and not _is_dataset_object(value):
            raise ValueError(
                f"unsupported {type(value).__name__}; use 'gsm8k', 'arithmetic', a .jsonl/.csv path or a datasets.Dataset"
            )
        return value

    @model_validator(mode="after")
    def _split_exists(self) -> DataConfig:
        require(split_problem(self.dataset, self.split))
        require(answer_checker_problem(self.answer_checker, self.dataset))
        if is_task_name(self.dataset):
            check_task(self.dataset, self.dataset_config)
        elif self.dataset == "lookups":
            from hello_agents_rl.data.lookups import LookupConfig  # pure Python: its parameters, checked here

            LookupConfig.of(self.dataset_config)
        elif self.dataset_config:
            raise ValueError("`dataset_config`: only a `reasoning_gym:<task>` or the `lookups` dataset takes generator "
                             "parameters; remove it or name such a dataset")
        return self


class LoadDatasetConfig(DataConfig):
    """`action: load_dataset` -- size, columns and a formatted sample."""
