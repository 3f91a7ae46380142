"""FastGRPOTrainer is TRL's GRPOTrainer: one whole step against plain TRL, and a record of which path ran.

docs/performance.md: the fast trainer must give TRL's loss and gradients (dropout 0, same batch), and a run
must say whether the fast sampler and the shared-prompt forward did the work (a renamed TRL method would
otherwise switch them off without a trace).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from hello_agents_rl.trainers import fast
from hello_agents_rl.trainers.fast import buckets
from hello_agents_rl.trainers.fast.verified import DEVICES_UNDER_TEST, ENV_SWITCH

# Where the two trainers run: this machine's CPU, or what benchmarks/gpu_check.sh names (cuda), whose equivalence
# with TRL is what opens the fast path's gate there (trainers/fast/verified.py)
DEVICE = os.environ.get("HELLO_AGENTS_TEST_DEVICE", "cpu")

pytestmark = pytest.mark.slow


def _trainers(tiny_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype = torch.float32,
              target_length: int = 6, **overrides) -> tuple:
    """The project's GRPO trainer and plain TRL's, built by build_trainer from one config, same LoRA weights;
    dtype bfloat16: weights and autocast as on a bf16 GPU (run.py: load in bf16, TRL's bf16=True)."""
    from trl import GRPOTrainer

    from hello_agents_rl.config import TrainConfig
    from hello_agents_rl.data import sources as data_layer
    from hello_agents_rl.models import load_model, load_tokenizer
    from hello_agents_rl.rewards import build_reward, to_trl_reward
    from hello_agents_rl.trainers import build

    monkeypatch.setenv(DEVICES_UNDER_TEST, DEVICE)  # the fast path runs on the device it is compared on
    cfg = TrainConfig(algorithm="grpo", model_name=tiny_model, output_dir=str(tmp_path), dataset="arithmetic",
                      max_samples=8, batch_size=2, num_generations=4, max_new_tokens=16, lora_rank=8, lora_alpha=16,
                      lora_dropout=0.0, report_to=["none"], max_steps=1, **overrides)
    data = data_layer.load(cfg)
    tokenizer = load_tokenizer(cfg.model_name, False)
    # length shaping differs within a group even for a random model: non-zero advantages, hence gradients
    reward = to_trl_reward(build_reward("length_penalty", {"target_length": target_length, "penalty_weight": 1.0}))
    trainers = []
    for trainer_class in (fast.FastGRPOTrainer, GRPOTrainer):
        monkeypatch.setattr(fast, "FastGRPOTrainer", trainer_class)
        model = load_model(cfg.model_name, False, dtype)
        bf16 = dtype == torch.bfloat16
        trainers.append(build.build_trainer(cfg, model, tokenizer, data, None, reward, [], DEVICE, bf16))
    ours, theirs = trainers
    assert type(ours) is not GRPOTrainer and type(theirs) is GRPOTrainer
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for (name, param), (other_name, other) in zip(ours.model.named_parameters(), theirs.model.named_parameters()):
            assert name == other_name
            if "lora_B" in name:  # a fresh adapter is an exact no-op: make it matter
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
            other.copy_(param)
    for trainer in trainers:
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = cfg.gradient_accumulation_steps  # what train() sets
    prompts = cfg.batch_size * cfg.effective_steps_per_generation  # one generation batch, each prompt in its group
    rows = [data[i] for i in range(prompts) for _ in range(cfg.num_generations)]
    return ours, theirs, rows


def _loss_and_grads(trainer, inputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One trainer's loss on `inputs` and the gradient of every trainable weight."""
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


# Every TRL loss type and its companions (README: Loss variants), each with the fast path's parts that step aside
# for it (the loss chunks: their split or their logged metrics would differ from TRL's whole batch).
ENTROPY_MASK = ("loss chunks", "aux loss or entropy masking")
LOSS_CASES = {
    "dapo": ({}, "", set()),
    "grpo_spg2": ({"loss_type": "grpo", "steps_per_generation": 2}, "", set()),
    "dapo_module_forward": ({}, "functional_forward", set()),
    "cispo": ({"loss_type": "cispo", "clip_range_high": 5.0, "steps_per_generation": 2}, "", set()),
    "sapo": ({"loss_type": "sapo", "sapo_temperature_neg": 1.2}, "", set()),
    "luspo_sequence": ({"loss_type": "luspo", "importance_sampling_level": "sequence", "steps_per_generation": 2}, "",
                       {("loss chunks", "loss_type luspo")}),
    "vespo": ({"loss_type": "vespo", "vespo_k_pos": 1.5, "steps_per_generation": 2}, "",
              {("loss chunks", "loss_type vespo")}),
    "bnpo_clip_higher_masked": ({"loss_type": "bnpo", "clip_range_high": 0.28, "mask_truncated_completions": True},
                                "", set()),
    "dr_grpo_sequence": ({"loss_type": "dr_grpo", "importance_sampling_level": "sequence"}, "",
                         {("loss chunks", "importance_sampling_level sequence")}),
    "dapo_top_entropy": ({"top_entropy_quantile": 0.2}, "", {ENTROPY_MASK}),
}


@pytest.mark.parametrize("overrides, off, fallbacks", LOSS_CASES.values(), ids=LOSS_CASES.keys())
def test_one_step_loss_and_gradients_equal_trls(tiny_model: str, tmp_path: Path, monkeypatch, overrides: dict,
                                                 off: str, fallbacks: set) -> None:
    """Same batch, dropout 0: the whole step (rollout record, reference and old-policy log-probs, advantages,
    loss, every LoRA gradient) of FastGRPOTrainer equals plain GRPOTrainer's on the same completions -- with the
    functional training forward (lora_forward.py) and, switched off, with TRL's own forward --
    for every loss type and companion setting; what steps aside for one says so in fast_path."""
    from trl.trainer.utils import split_tensor_dict

    monkeypatch.setenv("HELLO_AGENTS_FAST_OFF", off)

    monkeypatch.setattr(buckets, "BUCKET_OVERHEAD_TOKENS", 0)  # split by length as much as allowed: buckets exercised
    ours, theirs, rows = _trainers(tiny_model, tmp_path, monkeypatch, **overrides)
    if overrides.get("mask_truncated_completions"):  # one token in 16 ends a completion: some end, some are cut
        for trainer in (ours, theirs):
            trainer.eos_token_ids = list(range(0, trainer.model.config.vocab_size, 16))
    torch.manual_seed(0)
    batch = ours._generate_and_score_completions(rows)  # our sampler's rollout, our reference/old log-probs
    if overrides.get("mask_truncated_completions"):
        masked = int((batch["completion_mask"].sum(dim=1) == 0).sum())
        assert 0 < masked < len(rows), "cut completions are left out of the loss, finished ones kept"
    # a row masked whole (mask_truncated_completions) was cut at max_new_tokens: all its ids are the completion
    completions = [ids[mask.bool()].tolist() if mask.any() else ids.tolist()
                   for ids, mask in zip(batch["completion_ids"], batch["completion_mask"])]
    monkeypatch.setattr(theirs, "_generate_single_turn", lambda *args, **kwargs: (completions, None))
    expected = theirs._generate_and_score_completions(rows)  # TRL's own code on the same completions
    assert ("old_per_token_logps" in expected) == ("steps_per_generation" in overrides)
    assert batch.keys() == expected.keys()
    for key, value in expected.items():
        torch.testing.assert_close(batch[key], value, atol=1e-5, rtol=0, msg=key)
    steps = ours.args.steps_per_generation
    for mine, trls in zip(split_tensor_dict(batch, steps), split_tensor_dict(expected, steps)):
        (loss, grads), (trl_loss, trl_grads) = _loss_and_grads(ours, mine), _loss_and_grads(theirs, trls)
        torch.testing.assert_close(loss, trl_loss, atol=1e-7, rtol=1e-5)
        assert grads.keys() == trl_grads.keys() and len(grads) == 4 * 7 * 2, "lora_A and lora_B of every layer"
        assert all(g.abs().sum() > 0 for g in trl_grads.values()), "every LoRA weight gets a gradient"
        for name, grad in trl_grads.items():
            torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)
    counts = ours.fast_path["counts"]
    assert counts["sampler_completions"] == len(rows), "the rollout was the fast sampler's"
    forward = "trl_forwards" if off else "functional_train_forwards"
    assert counts.get(forward, 0) > 0 and counts["functional_scores"] > 0, "the fast forwards ran"
    assert {(f["part"], f["reason"]) for f in ours.fast_path["fallbacks"]} == fallbacks


def test_one_bf16_step_equals_trls_bf16_step(tiny_model: str, tmp_path: Path, monkeypatch) -> None:
    """A GPU trains in bf16 (weights loaded in bf16, bf16 autocast; fp32 LoRA adapters from PEFT): the same on CPU
    here, so a dtype mistake in the fast path shows without a GPU. Within bf16 tolerance: on this model TRL's own
    bf16 step differs from its fp32 step by up to ~3% per gradient (norm) and ~0.007 per reference log-prob; the
    fast path differs from TRL's bf16 step by about as much, and is as close to the fp32 step as TRL's is."""
    # long enough a target that the 16-token completions of the bf16 model get different rewards
    ours, theirs, rows = _trainers(tiny_model, tmp_path, monkeypatch, dtype=torch.bfloat16, target_length=12)
    assert ours.accelerator.mixed_precision == "bf16" and ours.model.get_base_model().dtype == torch.bfloat16
    torch.manual_seed(0)
    batch = ours._generate_and_score_completions(rows)
    completions = [ids[mask.bool()].tolist() for ids, mask in zip(batch["completion_ids"], batch["completion_mask"])]
    monkeypatch.setattr(theirs, "_generate_single_turn", lambda *args, **kwargs: (completions, None))
    expected = theirs._generate_and_score_completions(rows)
    assert batch.keys() == expected.keys() and expected["advantages"].abs().sum() > 0
    for key, value in expected.items():
        if torch.is_tensor(value):
            assert batch[key].dtype == value.dtype, key
        torch.testing.assert_close(batch[key], value, atol=2e-2, rtol=0, msg=key)
    (loss, grads), (trl_loss, trl_grads) = _loss_and_grads(ours, batch), _loss_and_grads(theirs, expected)
    assert loss.dtype == trl_loss.dtype
    torch.testing.assert_close(loss, trl_loss, atol=1e-6, rtol=1e-2)
    assert grads.keys() == trl_grads.keys() and len(grads) == 4 * 7 * 2
    for name, grad in trl_grads.items():
        assert grads[name].dtype == grad.dtype, name
        assert grad.norm() > 0 and (grads[name] - grad).norm() <= 0.05 * grad.norm(), name
    counts = ours.fast_path["counts"]
    assert counts["sampler_completions"] == len(rows) and counts["trl_forwards"] > 0  # the functional one is fp32
    assert counts["functional_scores"] > 0 and ours.fast_path["fallbacks"] == []

def test_a_run_records_the_fast_path_it_took(tiny_model: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """A GRPO run on a supported model goes through the fast sampler and the functional forward, and says so
    in the result and results.json; a renamed or reshaped TRL method would show up here as zero counts."""
    monkeypatch.setenv(DEVICES_UNDER_TEST, DEVICE)
    from hello_agents_rl.interfaces.tool import RLTrainingTool  # the book's tool, without the start-up hook

    out = tmp_path / "grpo"
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(out),
        "dataset": "arithmetic", "max_samples": 4, "max_steps": 2, "batch_size": 2, "num_generations": 2,
        "max_new_tokens": 8, "logging_steps": 1, "save_steps": 100, "report_to": ["none"],
    })
    record = result["fast_path"]
    assert record["sampler"] is True and record["shared_prompt_forward"] is True
    counts = record["counts"]
    assert counts["sampler_completions"] == 2 * 2 * 2, "every completion of both steps came from the fast sampler"
    assert counts.get("generate_completions", 0) == 0
    assert counts["functional_train_forwards"] >= 2 and counts["fast_dropout_layers"] == 4 * 7
    assert counts.get("trl_forwards", 0) == 0, "TRL's forward is only the functional forward's fallback"
    assert record["fallbacks"] == [] and record["passed_over"] == [] and "[fast path]" not in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text())["fast_path"] == record


def test_a_run_with_the_switch_off_records_the_fallback(tiny_model: str, tmp_path: Path, monkeypatch, capsys) -> None:
    from hello_agents_rl.interfaces.tool import RLTrainingTool  # the book's tool, without the start-up hook

    monkeypatch.setenv(ENV_SWITCH, "0")
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(tmp_path / "grpo"),
        "dataset": "arithmetic", "max_samples": 2, "max_steps": 1, "batch_size": 2, "num_generations": 2,
        "max_new_tokens": 4, "logging_steps": 1, "save_steps": 100, "report_to": ["none"],
    })
    record = result["fast_path"]
    assert record["sampler"] is False and record["shared_prompt_forward"] is False
    assert record["counts"]["generate_completions"] == 4 and record["counts"].get("sampler_completions", 0) == 0
    assert [(f["part"], f["reason"]) for f in record["fallbacks"]] == [("all", "HELLO_AGENTS_FAST=0")]
    assert capsys.readouterr().out.count("HELLO_AGENTS_FAST=0") == 1, "said once, for the whole run"
