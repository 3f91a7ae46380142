"""The output folder: atomic final files, refusing to clobber a finished run, resuming an unfinished one."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hello_agents.rl.distributed import is_main_process, saves_collectively, wait_for_everyone
from hello_agents.rl.errors import ConfigError

RESULTS = "results.json"
METRICS = "metrics.jsonl"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def atomic_write_json(path: str | Path, data: Any) -> None:
    """Temp file + rename: a crash never leaves a truncated file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def checkpoints(output_dir: str | Path) -> list[Path]:
    folder = Path(output_dir)
    found = [p for p in folder.glob("checkpoint-*") if p.is_dir() and _CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(_CHECKPOINT.match(p.name).group(1)))


def prepare_output_dir(output_dir: str, resume: bool | str | None, overwrite: bool) -> str | None:
    """Check the folder before anything loads; return the checkpoint to resume from, if any.

    Every rank of a distributed run checks (and raises) alike; only rank 0 deletes or trims files.
    """
    folder = Path(output_dir)
    main = is_main_process()
    finished = (folder / RESULTS).is_file() and _status(folder) == "completed"
    found = checkpoints(folder)
    if resume:
        # Resuming loads the checkpoint's optimizer/scheduler/RNG state with torch.load (pickle): only
        # from checkpoint-N folders this tool wrote into this output_dir, or a path the user named.
        target = found[-1] if resume is True and found else (Path(resume) if isinstance(resume, str) else None)
        if target is None or not target.is_dir():
            raise ConfigError(
                f"`resume_from_checkpoint`: no checkpoint {'in ' + output_dir if resume is True else str(resume)}; "
                "remove resume_from_checkpoint to start fresh"
            )
        if main:
            _trim_metrics(folder / METRICS, int(_CHECKPOINT.match(target.name).group(1)) if _CHECKPOINT.match(target.name) else None)
        return str(target)
    if overwrite:
        stale = [*found, folder / METRICS, folder / RESULTS, folder / "completions.jsonl"] if main else []
        for path in stale:
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        return None
    if finished:
        raise ConfigError(
            f"`output_dir`: {output_dir} holds a finished run ({RESULTS}); choose another output_dir "
            "or set overwrite_output_dir: true to replace it"
        )
    if found:
        raise ConfigError(
            f"`output_dir`: {output_dir} holds an unfinished run ({found[-1].name}); continue it with "
            "resume_from_checkpoint: true, or set overwrite_output_dir: true to start over"
        )
    return None


def _status(folder: Path) -> str | None:
    try:
        return json.loads((folder / RESULTS).read_text()).get("status")
    except (OSError, ValueError):
        return None


def _trim_metrics(path: Path, step: int | None) -> None:
    """Resuming replays the steps after the checkpoint: drop their old log lines so none is duplicated."""
    if step is None or not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line).get("step", 0) <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


def save_final_model(trainer: Any, output_dir: str, merge_lora: bool) -> str:
    """Save the trained model atomically; a LoRA run also keeps its adapter under adapter/.

    Call it on every rank: DeepSpeed and FSDP gather their weight shards to save, rank 0 alone
    writes, and no rank returns before the files are in place.
    """
    out = Path(output_dir)
    main = trainer.is_world_process_zero()
    model = trainer.accelerator.unwrap_model(trainer.model)
    tokenizer = trainer.processing_class
    is_peft = hasattr(model, "peft_config")
    staging = out / ".final-staging"  # one path for every rank
    if saves_collectively(trainer):
        if main:
            shutil.rmtree(staging, ignore_errors=True)
        wait_for_everyone(trainer)
        trainer.save_model(str(staging / ("adapter" if is_peft else "model")))
        if main and is_peft and merge_lora:  # sharded weights cannot merge in place: merge the saved adapter
            from hello_agents.rl.models import load_model

            load_model(str(staging / "adapter")).save_pretrained(staging / "model", safe_serialization=True)
            tokenizer.save_pretrained(staging / "model")
    elif main:
        staging = Path(tempfile.mkdtemp(dir=out, prefix=".final-"))
        if is_peft:
            model.save_pretrained(staging / "adapter", safe_serialization=True)
            tokenizer.save_pretrained(staging / "adapter")
        if not is_peft or merge_lora:
            full = model.merge_and_unload() if is_peft else model
            full.save_pretrained(staging / "model", safe_serialization=True)
            tokenizer.save_pretrained(staging / "model")
    if main:
        for part in ("adapter", "model"):
            if (staging / part).exists():
                target = out / part
                if target.exists():
                    shutil.rmtree(target)
                os.replace(staging / part, target)
        shutil.rmtree(staging, ignore_errors=True)
    wait_for_everyone(trainer)
    return str(out / ("model" if not is_peft or merge_lora else "adapter"))
