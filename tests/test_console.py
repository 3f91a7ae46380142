"""What a person sees on the console: the book's log line on lines of its own, and no deprecation warnings
that our own calls cause."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

import pytest
from hello_agents.tools import RLTrainingTool

from hello_agents_rl.trainers.args import trl_args
from hello_agents_rl.workflows.actions import parse

pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[1] / "src" / "hello_agents_rl"
TINY_SFT = {"action": "train", "algorithm": "sft", "dataset": "arithmetic", "max_samples": 12, "batch_size": 4,
            "num_epochs": 1, "learning_rate": 1e-3, "logging_steps": 1, "save_steps": 2, "report_to": "none"}
TINY_GRPO = {"action": "train", "algorithm": "grpo", "dataset": "arithmetic", "max_samples": 4,
             "batch_size": 2, "num_generations": 2, "max_new_tokens": 8, "logging_steps": 1, "save_steps": 1,
             "report_to": "none", "reward_type": "length_penalty"}


def test_log_lines_in_a_file_are_whole_lines(tiny_model: str, tmp_path: Path) -> None:
    """`hello-agents-rl train ... > log 2>&1`: no progress bar, and each book line on a line of its own."""
    log = tmp_path / "train.log"
    flags = [f"--{k}={v}" for k, v in TINY_GRPO.items() if k != "action"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as most users run: stdout buffered
    env |= {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    with log.open("wb") as sink:
        done = subprocess.run([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "train", f"--model_name={tiny_model}",
                               f"--output_dir={tmp_path / 'out'}", "--max_steps=3", *flags],
                              stdout=sink, stderr=subprocess.STDOUT, env=env, timeout=300)
    text = log.read_bytes().decode()  # bytes as written: a carriage return is not a line break here
    assert done.returncode == 0, text[-3000:]
    lines = text.split("\n")
    logged = [line for line in lines if "| Step " in line]
    assert len(logged) == 3, text[-3000:]
    for line in logged:  # no bar fragment, no carriage return before or after the line
        assert re.fullmatch(r"Epoch [12]/2 \| Step [123]/3 \| Reward: -?\d+\.\d\d \| KL: -?\d+\.\d{3} "
                            r"\| Loss: -?\d+\.\d{3}", line), repr(line)
    assert all(line.startswith("[doctor] ") for line in lines if "[doctor]" in line), text[-3000:]
    assert not re.search(r"\|\s*\d/3 \[", text), "no training progress bar in a file"


def test_a_pipe_gets_no_progress_bar_and_no_dependency_deprecation(tiny_model: str, tmp_path: Path) -> None:
    """`make demo | tee log`: what reaches a pipe is the book's lines, not bars nor transformers' FutureWarning
    about TRL's own call (`is_gradient_checkpointing`)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    for name in ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "PYTHONWARNINGS"):
        env.pop(name, None)  # as a user's shell has them: unset
    done = subprocess.run([sys.executable, "-m", "hello_agents_rl.interfaces.cli", "train", f"--model_name={tiny_model}",
                           f"--output_dir={tmp_path / 'out'}", "--algorithm=sft", "--dataset=arithmetic",
                           "--max_samples=8", "--max_steps=2", "--batch_size=4", "--use_lora=true",
                           "--gradient_checkpointing=true", "--report_to=none"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for text in (done.stdout, done.stderr):
        for noise in ("is_gradient_checkpointing is deprecated", "FutureWarning", "Loading weights",
                      "Writing model shards"):
            assert noise not in text, text[-3000:]
        assert not re.search(r"\d+%\|", text), f"a progress bar in a pipe:\n{text[-3000:]}"
    assert "Epoch 1/1 | Step 2/2 | Loss: " in done.stderr + done.stdout  # the book's lines still come


# --- deprecation warnings our calls cause ---------------------------------------------------------------


def _deprecations_we_cause(params: dict[str, Any]) -> list[str]:
    """Deprecation warnings raised where our code calls a deprecated API, or naming an argument we pass."""
    passed = set(trl_args(parse({**params, "output_dir": "/tmp/unused"})))
    ours: list[str] = []

    def record(message: Warning | str, category: type[Warning], filename: str, lineno: int, *args: Any) -> None:
        if not issubclass(category, (DeprecationWarning, PendingDeprecationWarning, FutureWarning)):
            return
        frames = [f for f in traceback.extract_stack()[:-1] if not f.filename.endswith("warnings.py")]
        emitter, caller = frames[-1], frames[-2]
        named = re.findall(r"`(\w+)`", str(message))[:1]  # the deprecated name comes first
        if any(str(SRC) in f.filename for f in (emitter, caller)) or set(named) & passed:
            ours.append(f"{category.__name__}: {message} (at {caller.filename}:{caller.lineno})")

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        RLTrainingTool().run(params)
    return ours


@pytest.mark.parametrize("params", [TINY_SFT, TINY_GRPO], ids=["sft", "grpo"])
@pytest.mark.parametrize("use_lora", [True, False], ids=["lora", "full"])
def test_our_calls_raise_no_deprecation_warnings(tiny_model: str, tmp_path: Path, params: dict, use_lora: bool) -> None:
    run = {**params, "model_name": tiny_model, "output_dir": str(tmp_path / "out"), "max_steps": 2,
           "use_lora": use_lora, "gradient_checkpointing": True}
    assert _deprecations_we_cause(run) == []
