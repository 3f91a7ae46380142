"""GGUF files: dequantized once into a trainable transformers folder, kept in a cache."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import torch

from hello_agents_rl.errors import ConfigError

log = logging.getLogger(__name__)


def gguf_cache_dir() -> Path:
    """Where imported GGUF files are kept: $HELLO_AGENTS_CACHE/gguf (default ~/.cache/hello_agents_rl/gguf)."""
    return Path(os.environ.get("HELLO_AGENTS_CACHE") or "~/.cache/hello_agents_rl").expanduser() / "gguf"



def import_gguf(path: Path, out_dir: Path | None = None) -> Path:
    """Dequantize a GGUF file once into a trainable transformers folder (TRL refuses quantized GGUF models).

    Without out_dir the folder goes to the cache (gguf_cache_dir()), keyed by the file's path, size and
    mtime, so later runs (and the other ranks of a distributed run) reuse it.
    """
    import shutil
    import tempfile

    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    path = Path(path).expanduser()
    if not path.is_file():
        raise ConfigError(f"`model_name`: GGUF file {path} not found")
    digest = hashlib.sha256(f"{path.resolve()}:{path.stat().st_size}:{path.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    out = Path(out_dir).expanduser() if out_dir else gguf_cache_dir() / f"{path.stem}-{digest}"
    if (out / "config.json").is_file():
        log.info("using %s, imported earlier from %s", out, path)
        return out
    log.warning("dequantizing %s into the trainable model folder %s (once: later runs reuse it)", path, out)
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
    )
    if getattr(model, "hf_quantizer", None) is not None:  # plain dense weights now: save them as such
        model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)  # keeps the chat template
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))  # unique: ranks may import at once
    tmp.chmod(0o755)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out)  # atomic: a crash never leaves a half-written folder
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not (out / "config.json").is_file():
            raise ConfigError(f"import-gguf: {out} exists and is not empty; choose a new folder") from None
    log.warning("imported %s -> %s", path.name, out)
    return out
