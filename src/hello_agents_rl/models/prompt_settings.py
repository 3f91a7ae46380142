"""The prompt a trained model knows (system prompt, thinking mode), saved beside its weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hello_agents_rl.models.sources import resolve_model_source

PROMPT_SETTINGS = "prompt_settings.json"  # beside the weights: the prompt a trained model knows


def save_prompt_settings(folder: str | Path, settings: dict[str, Any]) -> None:
    (Path(folder) / PROMPT_SETTINGS).write_text(json.dumps(settings, indent=2, ensure_ascii=False), encoding="utf-8")


def recorded_prompt(name: str) -> dict[str, Any] | None:
    """The prompt settings a run saved beside this model (a run folder, its model/ or adapter/), if any."""
    source = Path(resolve_model_source(name)) if not str(name).endswith(".gguf") else None
    file = source / PROMPT_SETTINGS if source is not None else None
    if file is None or not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except ValueError:
        return None


def with_recorded_prompt(cfg: Any, model_name: str) -> tuple[Any, str]:
    """cfg with the model's recorded system prompt and thinking mode where the user set none; and where they came from."""
    recorded = recorded_prompt(model_name) or {}
    update = {key: recorded[key] for key in ("system_prompt", "enable_thinking")
              if key in recorded and key not in cfg.model_fields_set}
    if "system_prompt" in update:
        update["system_prompt"] = update["system_prompt"] or ""  # recorded None = no system message, not the default
    source = ("given" if "system_prompt" in cfg.model_fields_set else
              "recorded with the model" if "system_prompt" in update else "the dataset's default")
    return (cfg.model_copy(update=update) if update else cfg), source


def system_prompt_of(rows: Any) -> str | None:
    """The system message the rows' prompts carry (the same for every row of a dataset)."""
    first = rows[0]["prompt"] if len(rows) else []
    return next((m["content"] for m in first if m.get("role") == "system"), None)
