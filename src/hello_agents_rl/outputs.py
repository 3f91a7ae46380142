"""The output folder: atomic final files, refusing to clobber a finished run, resuming an unfinished one."""

from __future__ import annotations

import fcntl
import functools
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hello_agents_rl.distributed import is_main_process, saves_collectively, wait_for_everyone
from hello_agents_rl.errors import ConfigError

RESULTS = "results.json"
METRICS = "metrics.jsonl"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def atomic_write_json(path: str | Path, data: Any) -> None:
    """Temp file + rename: a crash never leaves a truncated file behind. Any data: see `json_ready`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(json_ready(data), handle, indent=2, ensure_ascii=False, allow_nan=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def json_ready(data: Any) -> Any:
    """`data` as JSON (and YAML) can hold it; every result and saved config goes through here.

    A non-finite number becomes null (its absence is the honest value); a callable or a class given in a config
    (a tool, a reward, an environment, a reward component) becomes its qualified name, "module.qualname"; any
    other object (a Dataset) its type's qualified name.
    """
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if data is None or isinstance(data, (str, int, float, bool)):
        return data
    if isinstance(data, dict):
        return {key: json_ready(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_ready(value) for value in data]
    if isinstance(data, os.PathLike):
        return os.fspath(data)
    return qualified_name(data if callable(data) else type(data))


def qualified_name(obj: Any) -> str:
    """"module.qualname" of a function, class or method; a functools.partial's function; a callable object's class."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    if getattr(obj, "__qualname__", None) is None:
        obj = type(obj)
    return f"{obj.__module__}.{obj.__qualname__}" if getattr(obj, "__module__", None) else obj.__qualname__


LOCK = ".hello-agents-rl.lock"  # in each output_dir: held by the process that writes it, while it lives
CLAIMED_ENV = "HELLO_AGENTS_RL_CLAIMED"  # a job's child: the output_dir whose claim it inherited from its parent


def take_claim(output_dir: str | Path, holder: str) -> int:
    """An exclusive lock on output_dir's lock file (flock: atomic, released when its last holder exits), or a
    ConfigError naming who holds it (a job of any server, or a train started from the CLI or Python)."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held_by = _holder(fd)
        os.close(fd)
        raise ConfigError(f"`output_dir`: {held_by} is already writing to {folder}; "
                          "wait for it, cancel it, or choose another output_dir") from None
    os.ftruncate(fd, 0)
    os.write(fd, holder.encode())
    return fd


def _holder(fd: int, wait_s: float = 1.0) -> str:
    """Who holds the lock: the winner names itself just after taking it, so a loser that looks at once waits a moment."""
    deadline = time.monotonic() + wait_s
    while True:
        name = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
        if name or time.monotonic() > deadline:
            return name or "another run"
        time.sleep(0.02)


@contextmanager
def claimed(output_dir: str | Path) -> Iterator[None]:
    """Hold output_dir's claim while a run writes there; one process of a distributed run holds it for all."""
    folder = Path(output_dir).expanduser().resolve()
    if not is_main_process() or os.environ.get(CLAIMED_ENV) == str(folder):
        yield
        return
    fd = take_claim(folder, f"run of process {os.getpid()}")
    try:
        yield
    finally:
        os.close(fd)


def checkpoints(output_dir: str | Path) -> list[Path]:
    folder = Path(output_dir)
    found = [p for p in folder.glob("checkpoint-*") if p.is_dir() and _CHECKPOINT.match(p.name)]
    return sorted(found, key=lambda p: int(_CHECKPOINT.match(p.name).group(1)))


@dataclass
class OutputPlan:
    """What a run will do to its output_dir, decided before anything loads and applied after."""

    folder: Path
    resume: str | None = None  # the checkpoint to resume from
    stale: list[Path] = field(default_factory=list)  # an earlier run's files that overwrite_output_dir replaces

    def apply(self) -> None:
        """Called once the new run has loaded its data and model: only then is the old run's work removed.

        Every rank of a distributed run plans alike; only rank 0 deletes or trims files.
        """
        if not is_main_process():
            return
        for path in self.stale:
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        if self.resume and (match := _CHECKPOINT.match(Path(self.resume).name)):
            _trim_metrics(self.folder / METRICS, int(match.group(1)))


RUN_FILES = (METRICS, RESULTS, "completions.jsonl")  # what a run writes beside checkpoint-N, model/ and adapter/


def plan_output_dir(output_dir: str, resume: bool | str | None, overwrite: bool) -> OutputPlan:
    """Check the folder and decide what happens to it; raises ConfigError, touches nothing."""
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"`output_dir`: {output_dir} is a file, not a folder; choose a folder path")
    found = checkpoints(folder)
    status = _status(folder)
    if resume:
        if status == "completed":
            raise ConfigError(
                f"`resume_from_checkpoint`: the run in {output_dir} is finished ({RESULTS}: completed, step "
                f"{_finished_step(folder)}); nothing to resume. To train further, start a new run with "
                f"model_name: {output_dir} and another output_dir"
            )
        # Resuming loads the checkpoint's optimizer/scheduler/RNG state with torch.load (pickle): only
        # from checkpoint-N folders this tool wrote into this output_dir, or a path the user named.
        target = found[-1] if resume is True and found else (Path(resume) if isinstance(resume, str) else None)
        if target is None or not target.is_dir():
            raise ConfigError(
                f"`resume_from_checkpoint`: no checkpoint {'in ' + output_dir if resume is True else str(resume)}; "
                "remove resume_from_checkpoint to start fresh"
            )
        check_checkpoint(target)
        return OutputPlan(folder, resume=str(target))
    ours = [path for path in [*found, *(folder / name for name in RUN_FILES)] if path.exists()]
    _refuse_foreign_model_folders(folder, bool(ours))
    if overwrite:
        finals = [folder / name for name in ("model", "adapter") if ours and (folder / name).exists()]
        return OutputPlan(folder, stale=ours + finals)
    if status == "completed":
        raise ConfigError(
            f"`output_dir`: {output_dir} holds a finished run ({RESULTS}); choose another output_dir "
            "or set overwrite_output_dir: true to replace it"
        )
    if found:
        raise ConfigError(
            f"`output_dir`: {output_dir} holds an unfinished run ({found[-1].name}); continue it with "
            "resume_from_checkpoint: true, or set overwrite_output_dir: true to start over"
        )
    return OutputPlan(folder)


def _refuse_foreign_model_folders(folder: Path, holds_a_run: bool) -> None:
    """A run replaces output_dir/model and output_dir/adapter at its end: never ones it did not write."""
    foreign = [name for name in ("model", "adapter") if (folder / name).exists()] if not holds_a_run else []
    if foreign:
        raise ConfigError(
            f"`output_dir`: {folder} already has a {foreign[0]}/ folder that no run of this tool wrote; "
            "the final model would replace it. Choose an empty or new output_dir"
        )


def check_checkpoint(checkpoint: Path) -> None:
    """Refuse a checkpoint whose files are cut short (a full disk, a copy that stopped) before any is used."""
    import zipfile

    for file in sorted(checkpoint.iterdir()):
        problem = None
        if file.suffix in (".pt", ".pth", ".bin"):  # torch.save's zip format: a truncated file has no directory
            try:
                with zipfile.ZipFile(file) as archive:
                    bad = archive.testzip()
                problem = f"corrupt member {bad}" if bad else None
            except (zipfile.BadZipFile, OSError) as error:
                problem = str(error)
        elif file.suffix == ".safetensors":
            from hello_agents_rl.models import safetensors_problem

            problem = safetensors_problem(file)
        if problem:
            raise ConfigError(
                f"`resume_from_checkpoint`: {file} is damaged ({problem}); resume from an earlier checkpoint "
                f"(resume_from_checkpoint: <path>) or delete {checkpoint.name} yourself"
            )


def _finished_step(folder: Path) -> Any:
    try:
        return json.loads((folder / RESULTS).read_text()).get("num_steps", "?")
    except (OSError, ValueError):
        return "?"


def completed_run(folder: str | Path) -> dict[str, Any] | None:
    """The results of a run this folder finished, its final model still there; None for anything else."""
    try:
        result = json.loads((Path(folder) / RESULTS).read_text())
    except (OSError, ValueError):
        return None
    done = result.get("status") == "completed" and Path(result.get("model_path") or "").is_dir()
    return result if done else None


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


def final_model_dir(output_dir: str | Path, lora: bool, merge_lora: bool) -> Path:
    """Where a run's final model is saved: model/ (full weights, a LoRA run's merged ones), or adapter/ alone."""
    return Path(output_dir) / ("adapter" if lora and not merge_lora else "model")


def save_final_model(trainer: Any, output_dir: str, merge_lora: bool, prompt_settings: dict[str, Any]) -> str:
    """Save the trained model atomically; a LoRA run also keeps its adapter under adapter/.

    Each saved folder carries the prompt settings the model was trained with (models.PROMPT_SETTINGS), so
    that evaluation and later stages show it the prompt it knows, and the chat template training rendered with
    (TRL's training template where it replaced the model's), so that `serve` renders as training did.

    Call it on every rank: DeepSpeed and FSDP gather their weight shards to save, rank 0 alone
    writes, and no rank returns before the files are in place.
    """
    out = Path(output_dir)
    main = trainer.is_world_process_zero()
    model = trainer.accelerator.unwrap_model(trainer.model)
    tokenizer = trainer.processing_class
    if getattr(trainer, "chat_template", None):  # TRL rendered with its own training template: serve with that one
        tokenizer.chat_template = trainer.chat_template
    is_peft = hasattr(model, "peft_config")
    staging = out / ".final-staging"  # one path for every rank
    if saves_collectively(trainer):
        if main:
            shutil.rmtree(staging, ignore_errors=True)
        wait_for_everyone(trainer)
        trainer.save_model(str(staging / ("adapter" if is_peft else "model")))
        if main and is_peft and merge_lora:  # sharded weights cannot merge in place: merge the saved adapter
            from hello_agents_rl.models import load_model

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
        from hello_agents_rl.models import save_prompt_settings

        for part in ("adapter", "model"):
            if (staging / part).exists():
                save_prompt_settings(staging / part, prompt_settings)
                target = out / part
                if target.exists():
                    shutil.rmtree(target)
                os.replace(staging / part, target)
        shutil.rmtree(staging, ignore_errors=True)
    wait_for_everyone(trainer)
    return str(final_model_dir(out, is_peft, merge_lora))
