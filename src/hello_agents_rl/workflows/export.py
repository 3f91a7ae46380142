"""Export: a LoRA adapter merged into its base, saved as safetensors with a model card."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.models import PROMPT_SETTINGS, is_adapter_dir, load_model, load_tokenizer, resolve_model_source

CARD_PARAMS = ("algorithm", "model_name", "dataset", "max_samples", "num_epochs", "batch_size", "learning_rate",
               "num_generations", "max_new_tokens", "temperature", "kl_coef", "clip_range", "use_lora", "lora_rank",
               "lora_alpha", "reward_type")


MANIFEST = ".hello-agents-rl-export.json"  # the files an export wrote: the only ones a later export may replace


def run(cfg: Any) -> dict[str, Any]:
    """`action: export`."""
    return export(cfg.model_path, cfg.output_dir, cfg.trust_remote_code, cfg.overwrite_output_dir)


def export(model_path: str, output_dir: str, trust_remote_code: bool = False, overwrite: bool = False) -> dict[str, Any]:
    out = Path(output_dir).expanduser().resolve()
    source = resolve_model_source(model_path)
    _check_target(out, model_path, source, overwrite)  # before the model loads: nothing is touched on refusal
    model = load_model(source, trust_remote_code, key="model_path")  # an adapter folder comes back merged
    tokenizer = load_tokenizer(source, trust_remote_code, key="model_path")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out if out.is_dir() else out.parent, prefix=f".{out.name}.export-"))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / "README.md").write_text(model_card(model_path, source), encoding="utf-8")
        if (Path(source) / PROMPT_SETTINGS).is_file():  # the prompt the model was trained with travels along
            shutil.copy2(Path(source) / PROMPT_SETTINGS, staging / PROMPT_SETTINGS)
        written = sorted(p.name for p in staging.iterdir())
        (staging / MANIFEST).write_text(json.dumps(written), encoding="utf-8")
        _check_collisions(out, written)  # the tokenizer may write files we could not name in advance
        _move_into(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"status": "completed", "model_path": str(out), "merged_from_adapter": is_adapter_dir(source)}


def _check_target(out: Path, model_path: str, source: str, overwrite: bool) -> None:
    """Refuse a target that overlaps the model being exported, or holds files export did not write."""
    given = Path(model_path).expanduser().resolve()
    protected = {given, Path(source).resolve()}
    protected |= {folder for folder in (given, given.parent) if (folder / "results.json").is_file()}  # the run
    for folder in protected:
        if out == folder or folder in out.parents or out in folder.parents:
            raise ConfigError(
                f"`output_dir`: {out} overlaps the model being exported ({folder}); export to a new folder"
            )
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(
                f"`output_dir`: {out} exists and is not empty; export to a new or empty folder "
                "(or set overwrite_output_dir: true to replace an earlier export there)"
            )
        if not (out / MANIFEST).is_file():
            raise ConfigError(
                f"`output_dir`: {out} holds files that no export wrote; overwrite_output_dir only replaces an "
                "earlier export. Export to a new or empty folder"
            )


def _earlier_export(out: Path) -> set[str]:
    try:
        return set(json.loads((out / MANIFEST).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return set()


def _check_collisions(out: Path, names: list[str]) -> None:
    if not out.is_dir():
        return
    ours = _earlier_export(out) | {MANIFEST}
    foreign = [name for name in names if (out / name).exists() and name not in ours]
    if foreign:
        raise ConfigError(f"`output_dir`: {out / foreign[0]} was not written by an export and would be replaced; "
                          "export to a new or empty folder")


def _move_into(staging: Path, out: Path) -> None:
    """A new folder appears whole (one rename); an earlier export is replaced file by file, nothing else."""
    if not out.exists():
        staging.rename(out)
        return
    old = _earlier_export(out)  # read before the new manifest replaces it
    for item in staging.iterdir():
        target = out / item.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(item, target)
    for name in old - _earlier_export(out):  # files of the earlier export that this one no longer writes
        stale = out / name
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink(missing_ok=True)


def _run_record(model_path: str) -> dict[str, Any]:
    """The training run behind a model: its results.json and the config it recorded, when there is one."""
    for folder in (Path(model_path), Path(model_path).parent):
        if (folder / "results.json").is_file():
            return json.loads((folder / "results.json").read_text())
    return {}


def model_card(model_path: str, source: str) -> str:
    record = _run_record(model_path)
    config = record.get("config", {})
    base = config.get("model_name") or _adapter_base(source) or "unknown"
    params = "\n".join(f"| {k} | {config[k]} |" for k in CARD_PARAMS if k in config)
    results = "\n".join(
        f"| {k} | {record[k]:.4g} |" if isinstance(record[k], float) else f"| {k} | {record[k]} |"
        for k in ("num_samples", "num_steps", "average_reward", "final_kl", "final_loss", "train_runtime_s") if k in record
    )
    return (
        f"---\nlibrary_name: transformers\nbase_model: {base}\ntags: [hello-agents-rl, {record.get('algorithm', 'fine-tuned')}]\n---\n\n"
        f"# {Path(source).name}\n\nFine-tuned with hello-agents-rl ({record.get('algorithm', 'unknown').upper()}), "
        f"merged into a plain transformers model (safetensors).\n\n- Base model: `{base}`\n"
        f"- Data: `{config.get('dataset', 'unknown')}` ({record.get('num_samples', '?')} examples)\n\n"
        f"## Training parameters\n\n| key | value |\n|---|---|\n{params}\n\n## Results\n\n| metric | value |\n|---|---|\n{results}\n"
    )


def _adapter_base(source: str) -> str | None:
    config = Path(source) / "adapter_config.json"
    return json.loads(config.read_text()).get("base_model_name_or_path") if config.is_file() else None
