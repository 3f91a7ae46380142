"""GPU settings that fit real cards: vLLM's context window, and training arguments that exist before the model.

Without a GPU here, each is checked where it is decided: the arguments TRL receives, and the order of a run's
steps (tests/test_launch_configs.py shows transformers seeing FSDP while it loads, under accelerate launch).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hello_agents_rl.config import TrainConfig, checks
from hello_agents_rl.trainers import run
from hello_agents_rl.trainers.args import trl_args, vllm_context_length


class _Built(Exception):
    """Stops the run once the trainer's inputs are known."""


def _vllm_run(monkeypatch: pytest.MonkeyPatch, tiny_model: str, out: Path, **extra) -> tuple[dict, list[str]]:
    """A GRPO run with use_vllm, stopped at build_trainer: what TRL would get, and the order of the steps."""
    monkeypatch.setattr(checks, "find_spec", lambda name: object())  # vLLM "installed"
    monkeypatch.setattr(run, "check_vllm_device", lambda cfg: None)  # and a GPU "visible"
    steps: list[str] = []
    seen: dict = {}
    make_args, load_model = run.training_arguments, run.load_model
    monkeypatch.setattr(run, "training_arguments", lambda *a: steps.append("arguments") or make_args(*a))
    monkeypatch.setattr(run, "load_model", lambda *a: steps.append("model") or load_model(*a))

    def build_trainer(cfg, model, tokenizer, train_data, *rest, args=None):
        seen.update(cfg=cfg, args=args, rows=train_data, tokenizer=tokenizer)
        raise _Built

    monkeypatch.setattr(run, "build_trainer", lambda *a: build_trainer(*a[:-2], args=a[-2]))
    cfg = TrainConfig(algorithm="grpo", model_name=tiny_model, output_dir=str(out), dataset="arithmetic",
                      max_samples=8, max_new_tokens=24, use_vllm=True, report_to=["none"], **extra)
    with pytest.raises(_Built):
        run.train(cfg)
    return seen, steps


def test_vllm_context_defaults_to_the_longest_prompt_plus_max_new_tokens(tiny_model: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """And the training arguments exist before the model loads: creating them sets up the process group and
    DeepSpeed's config, which from_pretrained reads."""
    seen, steps = _vllm_run(monkeypatch, tiny_model, tmp_path / "run")
    assert steps == ["arguments", "model"]
    tokenizer, rows = seen["tokenizer"], seen["rows"]
    longest = max(len(tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True,
                                                    enable_thinking=False)) for r in rows)  # characters
    expected = vllm_context_length(seen["cfg"], tokenizer, rows)
    assert seen["args"].vllm_max_model_length == expected
    assert 24 < expected <= 24 + longest, "prompt tokens + max_new_tokens, far below the model's context"
    assert seen["args"].vllm_max_model_length < seen["cfg"].max_new_tokens + 1024


def test_vllm_context_is_the_users_when_set(tiny_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen, _ = _vllm_run(monkeypatch, tiny_model, tmp_path / "run", vllm_max_model_length=4096)
    assert seen["args"].vllm_max_model_length == 4096
    assert trl_args(TrainConfig(vllm_mode="server", output_dir="/tmp/x"))["vllm_max_model_length"] is None

