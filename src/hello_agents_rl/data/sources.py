"""Every source becomes rows of prompt (chat messages), completion, ground_truth, question (`load`)."""

from __future__ import annotations

from datasets import Dataset, DatasetDict

from hello_agents_rl.config import DataConfig, split_problem
from hello_agents_rl.data import arithmetic, custom, gsm8k, lookups, multiplication, reasoning_tasks
from hello_agents_rl.data.formatting import GSM8K_SYSTEM_PROMPT, build_messages
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.paths import is_task_name


def _system_prompt(cfg: DataConfig, default: str | None) -> str | None:
    return default if cfg.system_prompt is None else (cfg.system_prompt or None)


def load(cfg: DataConfig, split: str | None = None) -> Dataset:
    """The rows of one split, subsampled to max_samples by a seeded shuffle."""
    split = split or cfg.split
    source = cfg.dataset
    if problem := split_problem(source, split):  # never a silent fall-back to another split
        raise ConfigError(problem)
    if isinstance(source, DatasetDict):
        source = source[split]
    if isinstance(source, Dataset):
        data = custom.from_dataset(source, cfg.question_column, cfg.answer_column, _system_prompt(cfg, None))
    elif source == "arithmetic":
        data = arithmetic.make_dataset(split, None, cfg.seed, system_prompt=_system_prompt(cfg, None))
    elif source == "multiplication":  # the tool-use task (docs/agentic.md): max_samples = seeded draws
        return multiplication.make_dataset(split, cfg.max_samples, cfg.seed, system_prompt=_system_prompt(cfg, None))
    elif source == "lookups":  # the multi-step tool task (docs/agentic.md): train max_samples = seeded draws
        data = lookups.make_dataset(split, cfg.max_samples if split == "train" else None, cfg.seed,
                                    dict(getattr(cfg, "dataset_config", {})), _system_prompt(cfg, lookups.SYSTEM_PROMPT))
    elif is_task_name(source):
        data = _task_rows(source, cfg, split)
    elif source == "gsm8k":
        data = gsm8k.load(split, cfg.dataset_path, _system_prompt(cfg, GSM8K_SYSTEM_PROMPT))
    elif isinstance(source, str):
        data = custom.load_file(source, cfg.question_column, cfg.answer_column, _system_prompt(cfg, GSM8K_SYSTEM_PROMPT))
    else:
        raise ConfigError(
            f"`dataset`: unsupported {type(source).__name__}; use 'gsm8k', 'arithmetic', a .jsonl/.csv path or a datasets.Dataset"
        )
    if cfg.max_samples is not None and cfg.max_samples < len(data):
        data = data.shuffle(seed=cfg.seed).select(range(cfg.max_samples))
    return data


def _task_rows(source: str, cfg: DataConfig, split: str) -> Dataset:
    """reasoning-gym rows; `task_ref` lets the reward and evaluation call the task's own checker."""
    system_prompt = _system_prompt(cfg, reasoning_tasks.SYSTEM_PROMPT)
    rows = {"prompt": [], "completion": [], "ground_truth": [], "question": [], "task_ref": []}
    for task_ref, question, answer in reasoning_tasks.entries(source, dict(getattr(cfg, "dataset_config", {})), split,
                                                               cfg.seed):
        rows["question"].append(question)
        rows["prompt"].append(build_messages(question, system_prompt))
        # a task whose checker verifies any valid solution (graph_color, rush_hour...) has no answer to imitate
        rows["completion"].append([] if answer is None else [{"role": "assistant", "content": f"Final Answer: {answer}"}])
        rows["ground_truth"].append("" if answer is None else str(answer))
        rows["task_ref"].append(task_ref)
    return Dataset.from_dict(rows)


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
