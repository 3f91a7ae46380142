"""The fast trainer runs only where it was verified, and says so when it does not (trainers/fast/coupling.py,
trainers/fast/verified.py): a renamed TRL attribute, a loss TRL no longer scales for gradient accumulation or an
unverified device turns it off for the run, the reason recorded in `fast_path` and warned, never silently."""

from __future__ import annotations

from pathlib import Path

import pytest
import trl

from hello_agents_rl.trainers.fast import coupling, verified
from hello_agents_rl.trainers.fast.dropout import FastDropout
from test_performance_semantics import _fast_trainer, _prompts


def _trl_with(monkeypatch: pytest.MonkeyPatch, change) -> list[int]:
    """trl.GRPOTrainer replaced by a subclass whose instances `change` after TRL's __init__ (as a TRL release
    that renamed something would be); returns the list its own rollout method appends to when TRL's code runs."""
    calls: list[int] = []

    class ChangedTRL(trl.GRPOTrainer):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            change(self)

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            calls.append(len(prompt_ids))
            return [[2] for _ in prompt_ids], None

    monkeypatch.setattr(trl, "GRPOTrainer", ChangedTRL)  # fast_grpo_trainer_class imports it at call time
    return calls


def _renamed(old: str, new: str):
    def rename(trainer) -> None:
        setattr(trainer, new, trainer.__dict__.pop(old))

    return rename


def _assert_off_for_the_run(trainer, calls: list[int], reason_part: str, capsys, caplog) -> None:
    reasons = [f["reason"] for f in trainer.fast_path["fallbacks"] if f["part"] == "all"]
    assert len(reasons) == 1 and reason_part in reasons[0], trainer.fast_path["fallbacks"]
    assert reason_part in capsys.readouterr().out, "printed for the user"
    assert any(reason_part in r.getMessage() and r.levelname == "WARNING" for r in caplog.records), "and logged"
    assert not any(isinstance(m, FastDropout) for m in trainer.model.modules()), "PEFT's own dropout kept"
    trainer._generate_single_turn(_prompts(trainer.processing_class, 2, 2), None, {}, 2)
    assert calls == [4], "TRL's own rollout ran"
    assert trainer.fast_path["counts"]["generate_completions"] == 4 and trainer.fast_path["sampler"] is False


@pytest.mark.parametrize("attribute", ["_is_vlm", "_entropy_bonus_enabled", "_metrics"])
def test_a_renamed_trl_attribute_turns_the_fast_path_off_visibly(tiny_model: str, tmp_path: Path, monkeypatch,
                                                                 capsys, caplog, attribute: str) -> None:
    """Each of these was read with a default or would fail mid-run: a rename must name itself at start."""
    calls = _trl_with(monkeypatch, _renamed(attribute, attribute + "_v2"))
    trainer = _fast_trainer(tiny_model, tmp_path, dropout=0.05, max_completion_length=8)
    _assert_off_for_the_run(trainer, calls, f"no attribute {attribute}", capsys, caplog)


def test_a_loss_not_scaled_for_gradient_accumulation_turns_the_fast_path_off(tiny_model: str, tmp_path: Path,
                                                                            monkeypatch, capsys, caplog) -> None:
    """The chunked loss backpropagates TRL's per-chunk loss as is: right only while TRL scales it for gradient
    accumulation itself (transformers' Trainer.loss_is_scaled_for_ga); otherwise the gradients would be
    gradient_accumulation_steps times too large."""
    calls = _trl_with(monkeypatch, lambda trainer: setattr(trainer, "loss_is_scaled_for_ga", None))
    trainer = _fast_trainer(tiny_model, tmp_path, dropout=0.05, max_completion_length=8)
    _assert_off_for_the_run(trainer, calls, "loss_is_scaled_for_ga is None", capsys, caplog)


def test_the_installed_trl_passes_every_check(tiny_model: str, tmp_path: Path) -> None:
    from trl import GRPOTrainer

    trainer = _fast_trainer(tiny_model, tmp_path, dropout=0.05)
    assert coupling.class_blocker(GRPOTrainer) is None
    assert coupling.instance_blocker(trainer, GRPOTrainer) is None
    assert trainer.fast_path["fallbacks"] == [] and trainer.fast_path["counts"]["fast_dropout_layers"] == 4 * 7
    listed = set(coupling.ATTRIBUTES_READ) | {coupling.GA_SCALING_FLAG}
    assert all(hasattr(trainer, name) for name in listed)


@pytest.mark.parametrize("device", ["cuda", "mps", "xpu"])
def test_devices_other_than_cpu_are_not_verified(device: str, monkeypatch) -> None:
    monkeypatch.delenv(verified.DEVICES_UNDER_TEST, raising=False)
    assert verified.device_blocker("cpu") is None
    assert verified.device_blocker(device) == f"not verified on {device}; benchmarks/gpu_check.sh verifies it"
    monkeypatch.setenv(verified.DEVICES_UNDER_TEST, f"{device},cpu")  # what gpu_check.sh sets to verify one
    assert verified.device_blocker(device) is None


@pytest.mark.slow
def test_a_run_on_an_unverified_device_uses_trl_and_says_why(tiny_model: str, tmp_path: Path, monkeypatch,
                                                             capsys) -> None:
    """No GPU here: make CPU the unverified device, as CUDA or MPS are today, and train through the tool."""
    from hello_agents.tools import RLTrainingTool

    monkeypatch.setattr(verified, "VERIFIED_DEVICES", frozenset({"cuda"}))
    monkeypatch.delenv(verified.DEVICES_UNDER_TEST, raising=False)
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(tmp_path / "grpo"),
        "dataset": "arithmetic", "max_samples": 2, "max_steps": 1, "batch_size": 2, "num_generations": 2,
        "max_new_tokens": 4, "logging_steps": 1, "save_steps": 100, "report_to": ["none"],
    })
    record = result["fast_path"]
    why = "not verified on cpu; benchmarks/gpu_check.sh verifies it"
    assert [(f["part"], f["reason"]) for f in record["fallbacks"]] == [("all", why)]
    assert record["sampler"] is False and record["shared_prompt_forward"] is False
    assert record["counts"]["generate_completions"] == 4 and record["counts"].get("sampler_completions", 0) == 0
    assert capsys.readouterr().out.count(why) == 1

