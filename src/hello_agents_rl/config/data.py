"""The data keys every action that reads a dataset shares, and which splits each dataset has."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from hello_agents_rl.config.base import MAX_SEED, Base, Count, LocalPath, PathRole, require
from hello_agents_rl.config.checks import is_task_object, task_class_of, task_defaults, task_named
from hello_agents_rl.errors import did_you_mean
from hello_agents_rl.tasks.gsm8k import Gsm8k  # the book's default task

SINGLE_SOURCE_SPLITS = ("train", "test")  # a single file or datasets.Dataset is the whole data under either name


def split_problem(dataset: Any, split: str, key: str = "split") -> str | None:
    """Why `split` is not a split of `dataset`, listing the ones it has; None when it is."""
    if isinstance(dataset, dict):  # a datasets.DatasetDict: its own splits
        known = tuple(dataset)
    else:
        task = task_class_of(dataset)
        known = task.splits if task is not None else SINGLE_SOURCE_SPLITS
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
    task = task_class_of(dataset)
    if task is not None and task.own_checker:
        return (f"`answer_checker`: {dataset}'s answers are judged by the task's own checker; remove answer_checker")
    from hello_agents_rl.rewards.checkers import math_verify_problem  # the reward layer knows its extra

    return math_verify_problem()


class DataConfig(Base):
    dataset: Annotated[Any, PathRole("dataset")] = Field(
        Gsm8k.name,
        description="A task: `gsm8k`, `arithmetic`, `multiplication` or `lookups` (the embedded tasks), "
        "`reasoning_gym:<task>` (a reasoning-gym generator), or your own Task class ('my_module:MyTask', or the class "
        "or object in Python); or rows of your own: a .jsonl/.csv file or a datasets.Dataset.",
    )
    dataset_config: Annotated[dict[str, Any], PathRole("parameters")] = Field(
        default_factory=dict,
        description="The task's own parameters, checked by its schema: `reasoning_gym:<task>`: the generator's (size "
        "per split, difficulty ranges); `lookups`: chain_lengths, distractors, names, guess_rate, early_stop_rate "
        "(docs/agentic.md); `arithmetic`: carry_error; `multiplication`: tool_rate; your own Task: its Config.",
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
    _task: Any = PrivateAttr(None)  # the task `dataset` names, validated (None: rows of the user's own)

    @property
    def task(self) -> Any:
        """The task `dataset` names (tasks/), validated; None for rows of the user's own."""
        return self._task

    @field_validator("dataset")
    @classmethod
    def _dataset_kind(cls, value: Any) -> Any:
        if not isinstance(value, str) and not _is_dataset_object(value) and not is_task_object(value):
            raise ValueError(f"unsupported {type(value).__name__}; use a task's name ('gsm8k', 'arithmetic', "
                             "'my_module:MyTask'), a Task, a .jsonl/.csv path or a datasets.Dataset")
        return value

    @model_validator(mode="after")
    def _split_exists(self) -> DataConfig:
        task = task_named(self.dataset, self.dataset_config, self.dataset_path)  # its dataset_config, checked
        self._task = task
        for key, value in task_defaults(task, type(self).model_fields, self.model_fields_set).items():
            object.__setattr__(self, key, value)  # not a key the user gave: a later check of given keys skips it
        if task is None and self.dataset_config:
            raise ValueError("`dataset_config`: rows of your own take no task parameters; remove it, or name a task "
                             "(a built-in, `reasoning_gym:<task>` or your own Task class)")
        require(split_problem(self.dataset, self.split))
        require(answer_checker_problem(self.answer_checker, self.dataset))
        return self


class LoadDatasetConfig(DataConfig):
    """`action: load_dataset` -- size, columns and a formatted sample."""
