"""Export: a LoRA adapter merged into its base, saved as safetensors with a model card."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from hello_agents.rl.models import is_adapter_dir, load_model, load_tokenizer, resolve_model_source

CARD_PARAMS = ("algorithm", "model_name", "dataset", "max_samples", "num_epochs", "batch_size", "learning_rate",
               "num_generations", "max_new_tokens", "temperature", "kl_coef", "clip_range", "use_lora", "lora_rank",
               "lora_alpha", "reward_type")


def run(cfg: Any) -> dict[str, Any]:
    """`action: export`."""
    return export(cfg.model_path, cfg.output_dir, cfg.trust_remote_code)


def export(model_path: str, output_dir: str, trust_remote_code: bool = False) -> dict[str, Any]:
    source = resolve_model_source(model_path)
    model = load_model(source, trust_remote_code)  # an adapter folder comes back merged
    tokenizer = load_tokenizer(source, trust_remote_code)
    out = Path(output_dir)
    staging = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    (staging / "README.md").write_text(model_card(model_path, source), encoding="utf-8")
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)  # atomic: never a half-written export
    return {"status": "completed", "model_path": str(out), "merged_from_adapter": is_adapter_dir(source)}


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
