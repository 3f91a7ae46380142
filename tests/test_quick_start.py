"""The README's quick start as a reader runs it: the book's call in a plain script (top-level code, no main guard)
after `make demo`, from the same folder; the Chinese quick start gives the same commands and the same call."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
ENGLISH, CHINESE = README.split("## 快速开始（中文）", 1)


def _book_call(text: str) -> str:
    return next(block for block in re.findall(r"```python\n(.*?)```", text, re.S) if '"action": "train"' in block)


def _call_arguments(snippet: str) -> dict:
    call = next(node for node in ast.walk(ast.parse(snippet)) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute) and node.func.attr == "run")
    return ast.literal_eval(call.args[0])


def test_both_languages_give_the_same_commands_and_the_same_call() -> None:
    def commands(text: str) -> list[str]:
        return [line.split("#")[0].strip() for line in re.findall(r"```bash\n(.*?)```", text, re.S)[0].splitlines()]

    assert commands(ENGLISH) == commands(CHINESE) == ["make demo", "make test"]
    assert _call_arguments(_book_call(ENGLISH)) == _call_arguments(_book_call(CHINESE))


@pytest.mark.slow
def test_the_books_call_runs_as_written_after_make_demo(tiny_model: str, tmp_path: Path) -> None:
    """`make demo` leaves outputs/demo/sft; the snippet, saved as a script with its print, trains from it once."""
    shutil.copytree(tiny_model, tmp_path / "outputs" / "demo" / "sft")  # the demo's SFT model, where it leaves it
    script = tmp_path / "book_call.py"
    script.write_text('print("script body runs")\n' + _book_call(ENGLISH), encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=900,
                          env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                               "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("script body runs") == 1
    output = done.stdout + done.stderr  # a file, not a terminal: as quiet as the command line
    assert "it/s]" not in output and "FutureWarning" not in output, output[-2000:]
    model_path, samples, reward = done.stdout.strip().splitlines()[-1].rsplit(" ", 2)
    model = tmp_path / model_path  # as the script printed it: relative to its folder, as the reader wrote it
    assert model.is_dir() and (tmp_path / "models" / "grpo_model") in model.parents
    assert int(samples) == 100 and 0.0 <= float(reward) <= 1.0
    results = json.loads((tmp_path / "models" / "grpo_model" / "results.json").read_text())
    assert results["status"] == "completed"
