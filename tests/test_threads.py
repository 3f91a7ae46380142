"""A small model's CPU run takes one torch thread (benchmarks/threads.py measures why); the user's choice stands."""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = """
import torch
from hello_agents_rl.models import load_model
before = torch.get_num_threads()
load_model(__import__("sys").argv[1])
print(before, torch.get_num_threads())
"""


def _threads(model: str, **env: str) -> tuple[int, int]:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "HELLO_AGENTS_THREADS")}
    done = subprocess.run([sys.executable, "-c", PROBE, model], capture_output=True, text=True, timeout=300,
                          env={**clean, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = done.stdout.split()[-2:]
    return int(before), int(after)


def test_a_small_model_takes_one_thread_unless_the_user_chose(tiny_model: str) -> None:
    before, after = _threads(tiny_model)
    assert after == 1
    assert _threads(tiny_model, HELLO_AGENTS_THREADS="default") == (before, before), "left to torch"
    assert _threads(tiny_model, OMP_NUM_THREADS="2")[1] == 2, "the user's OMP_NUM_THREADS stands"
