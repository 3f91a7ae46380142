"""GSM8K: from a local folder of train.jsonl/test.jsonl (offline) or from the hub (openai/gsm8k, main)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.tasks.base import Task, subsample
from hello_agents_rl.tasks.custom import build_rows, read_jsonl
from hello_agents_rl.tasks.formatting import GSM8K_SYSTEM_PROMPT

ENV_VAR = "HELLO_AGENTS_GSM8K"


def load(split: str, dataset_path: str | None, system_prompt: str | None) -> Any:
    folder = dataset_path or os.environ.get(ENV_VAR)
    if folder:
        file = Path(folder).expanduser() / f"{split}.jsonl"
        if not file.is_file():
            raise ConfigError(f"`dataset_path`: {file} not found; the folder must hold train.jsonl and test.jsonl")
        return build_rows(read_jsonl(file), "question", "answer", system_prompt, str(file))
    try:
        from datasets import load_dataset

        hub = load_dataset("openai/gsm8k", "main", split=split)
    except Exception as error:  # noqa: BLE001 - offline, or the hub is unreachable: say how to work without it
        raise ConfigError(
            f"`dataset`: could not load openai/gsm8k from the hub ({type(error).__name__}); download it once and "
            f"set dataset_path (or ${ENV_VAR}) to a folder with train.jsonl and test.jsonl"
        ) from None
    return build_rows(enumerate(hub, start=1), "question", "answer", system_prompt, f"openai/gsm8k[{split}]")


class Gsm8k(Task):
    """`dataset: gsm8k`: grade-school word problems, a plain answer; `dataset_path` reads them offline."""

    name = "gsm8k"
    system_prompt = GSM8K_SYSTEM_PROMPT

    def rows(self, split: str, count: int | None = None, seed: int = 42,
             system_prompt: str | None = GSM8K_SYSTEM_PROMPT) -> Any:
        return subsample(load(split, self.dataset_path, system_prompt), count, seed)
