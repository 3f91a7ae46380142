"""Every source becomes rows of prompt (chat messages), completion, ground_truth, question (`load`)."""

from __future__ import annotations

from datasets import Dataset, DatasetDict

from hello_agents_rl.config import DataConfig, split_problem
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.tasks import custom, task_for
from hello_agents_rl.tasks.formatting import GSM8K_SYSTEM_PROMPT


def _system_prompt(cfg: DataConfig, default: str | None) -> str | None:
    return default if cfg.system_prompt is None else (cfg.system_prompt or None)


def load(cfg: DataConfig, split: str | None = None) -> Dataset:
    """The rows of one split: a task's own (`max_samples` as the task draws them), or the user's, subsampled to
    max_samples by a seeded shuffle."""
    split = split or cfg.split
    source = cfg.dataset
    if problem := split_problem(source, split):  # never a silent fall-back to another split
        raise ConfigError(problem)
    task = task_for(source, dict(cfg.dataset_config), cfg.dataset_path)
    if task is not None:
        return task.rows(split, cfg.max_samples, cfg.seed, _system_prompt(cfg, task.system_prompt))
    if isinstance(source, DatasetDict):
        source = source[split]
    if isinstance(source, Dataset):
        data = custom.from_dataset(source, cfg.question_column, cfg.answer_column, _system_prompt(cfg, None))
    elif isinstance(source, str):
        data = custom.load_file(source, cfg.question_column, cfg.answer_column, _system_prompt(cfg, GSM8K_SYSTEM_PROMPT))
    else:
        raise ConfigError(
            f"`dataset`: unsupported {type(source).__name__}; use a task's name, a .jsonl/.csv path or a datasets.Dataset"
        )
    if cfg.max_samples is not None and cfg.max_samples < len(data):
        data = data.shuffle(seed=cfg.seed).select(range(cfg.max_samples))
    return data


def describe(cfg: DataConfig) -> dict:
    """`action: load_dataset`: size, columns and one formatted sample."""
    rows = load(cfg)
    sample = rows[0]
    return {
        "status": "completed",
        "num_samples": len(rows),
        "columns": rows.column_names,
        "sample": {"prompt": sample["prompt"], "completion": sample["completion"], "ground_truth": sample["ground_truth"],
                   **({"task_ref": sample["task_ref"]} if "task_ref" in sample else {})},  # create_reward takes it
    }
