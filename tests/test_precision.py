"""Which weights a run trains in which precision, per device, with torch.cuda faked (no GPU here).

The rule: trainable weights are never fp16 without loss scaling. GPUs with bf16 train bf16 under bf16 autocast;
older GPUs keep full fine-tuning's weights in fp32 under fp16 autocast with transformers' GradScaler
(`fp16=True`), and LoRA keeps a frozen fp16 base with fp32 adapters (PEFT upcasts them) under the same scaler.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hello_agents_rl.trainers import run
from hello_agents_rl.trainers.args import trl_args
from hello_agents_rl.workflows.actions import parse


class _Built(Exception):
    """Stops the run once the trainer's inputs are known."""


def _what_training_uses(monkeypatch: pytest.MonkeyPatch, model: str, out: Path, cuda: bool, bf16: bool,
                        use_lora: bool) -> tuple[torch.dtype, dict]:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    seen: dict = {}

    def build_trainer(cfg, model, tokenizer, train_data, eval_data, reward_fn, callbacks, device, bf16_flag, args, spec=None):
        seen.update(dtype=model.dtype, args=args)
        raise _Built

    # the keyword arguments TRL's config would get: building it would set up a CUDA device that is not there
    monkeypatch.setattr(run, "training_arguments", trl_args)
    monkeypatch.setattr(run, "build_trainer", build_trainer)
    cfg = parse({"action": "train", "algorithm": "sft", "model_name": model, "output_dir": str(out),
                 "dataset": "arithmetic", "max_samples": 8, "max_steps": 1, "use_lora": use_lora, "report_to": "none"})
    with pytest.raises(_Built):
        run.train(cfg)
    return seen["dtype"], seen["args"]


CASES = [  # cuda, bf16 support, use_lora -> weights loaded in, autocast (bf16, fp16)
    (False, False, False, torch.float32, (False, False)),
    (False, False, True, torch.float32, (False, False)),
    (True, True, False, torch.bfloat16, (True, False)),
    (True, True, True, torch.bfloat16, (True, False)),
    (True, False, False, torch.float32, (False, True)),  # fp32 master weights, fp16 autocast + GradScaler
    (True, False, True, torch.float16, (False, True)),  # frozen fp16 base, fp32 adapters, GradScaler
]


@pytest.mark.parametrize(("cuda", "bf16", "use_lora", "weights", "autocast"), CASES,
                         ids=["cpu-full", "cpu-lora", "bf16gpu-full", "bf16gpu-lora", "fp16gpu-full", "fp16gpu-lora"])
def test_precision_per_device(monkeypatch: pytest.MonkeyPatch, tiny_model: str, tmp_path: Path, cuda: bool,
                              bf16: bool, use_lora: bool, weights: torch.dtype, autocast: tuple[bool, bool]) -> None:
    dtype, args = _what_training_uses(monkeypatch, tiny_model, tmp_path / "out", cuda, bf16, use_lora)
    assert dtype == weights
    assert (args["bf16"], args["fp16"]) == autocast
    if dtype == torch.float16:
        assert use_lora and args["fp16"], "fp16 weights are only a frozen base, under loss scaling"
