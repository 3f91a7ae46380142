"""What a model name refers to: a hub id, a folder, a run's output folder, a LoRA adapter or a GGUF file."""

from __future__ import annotations

from pathlib import Path

from hello_agents_rl.models.gguf import import_gguf


def is_adapter_dir(path: str | Path) -> bool:
    folder = Path(path)
    return (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file()


def resolve_model_source(name: str) -> str:
    """What transformers can load: a run's output_dir means its final model; GGUF becomes a cached folder."""
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        return str(import_gguf(path))
    for final in ("model", "adapter"):  # our training runs save their final model in these subfolders
        if path.is_dir() and not (path / "config.json").is_file() and (path / final).is_dir():
            return str(path / final)
    return str(path) if path.exists() else name
