"""dynamic_sampling: groups whose completions all score the same are left out of the step -- out of the update and
out of the reference and old-policy forwards -- and the rest trains exactly as TRL trains it; resample refills the
batch with new prompts, within its bound; a run logs it, resumes with it, and the doctor names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hello_agents.tools import RLTrainingTool
from test_adaptive_kl import _CrashAtStep  # stands in for kill -9 after a checkpoint

from hello_agents_rl.trainers import fast
from hello_agents_rl.trainers.dynamic_sampling import join, take_rows, varied_groups

ZERO_VARIANCE = "dynamic_sampling/zero_variance_fraction"
GROUPS = "dynamic_sampling/groups_trained"


def parity_reward(completion: str, ground_truth: object, **_: object) -> float:
    """An even answer's group all scores 0 (no signal); an odd one's scores its completions' lengths."""
    return 0.0 if int(str(ground_truth)) % 2 == 0 else float(len(completion) % 5)


def test_varied_groups_follow_trls_zero_std_rule() -> None:
    rewards = torch.tensor([[1.0], [1.0], [0.0], [1.0], [float("nan")], [2.0], [float("nan")], [float("nan")]])
    assert varied_groups(rewards, torch.ones(1), 2).tolist() == [False, False, True, True, False, False, False, False]


def test_take_rows_and_join_keep_the_padding_trl_uses() -> None:
    a = {"prompt_ids": torch.tensor([[0, 5], [6, 7]]), "prompt_mask": torch.tensor([[0, 1], [1, 1]]),
         "completion_ids": torch.tensor([[1, 9], [2, 9]]), "completion_mask": torch.tensor([[1, 0], [1, 1]]),
         "advantages": torch.tensor([0.5, -0.5]), "num_items_in_batch": torch.tensor(3)}
    b = {"prompt_ids": torch.tensor([[3, 4, 5]]), "prompt_mask": torch.tensor([[1, 1, 1]]),
         "completion_ids": torch.tensor([[8]]), "completion_mask": torch.tensor([[1]]),
         "advantages": torch.tensor([1.0]), "num_items_in_batch": torch.tensor(1)}
    both = join(take_rows(a, torch.tensor([1])), b, pad_token_id=0)
    assert both["prompt_ids"].tolist() == [[0, 6, 7], [3, 4, 5]] and both["prompt_mask"].tolist() == [[0, 1, 1], [1, 1, 1]]
    assert both["completion_ids"].tolist() == [[2, 9], [8, 0]] and both["completion_mask"].tolist() == [[1, 1], [1, 0]]
    assert both["advantages"].tolist() == [-0.5, 1.0] and int(both["num_items_in_batch"]) == 3, "tokens recounted"


def _skip_and_plain(tiny_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides) -> tuple:
    """A dynamic-sampling trainer and plain TRL's, one config, the same LoRA weights, and one batch of rows: an even
    answer's group (no signal) and an odd one's."""
    from trl import GRPOTrainer

    from hello_agents_rl.config import TrainConfig
    from hello_agents_rl.data import sources as data_layer
    from hello_agents_rl.models import load_model, load_tokenizer
    from hello_agents_rl.rewards import build_reward, to_trl_reward
    from hello_agents_rl.trainers import build

    cfg = TrainConfig(algorithm="grpo", model_name=tiny_model, output_dir=str(tmp_path), dataset="arithmetic",
                      max_samples=8, batch_size=2, num_generations=4, max_new_tokens=16, lora_rank=8, lora_alpha=16,
                      lora_dropout=0.0, report_to=["none"], max_steps=1, dynamic_sampling="skip", **overrides)
    data = data_layer.load(cfg)
    tokenizer = load_tokenizer(cfg.model_name, False)
    reward = to_trl_reward(build_reward(parity_reward))
    trainers = []
    for trainer_class, mode in ((fast.FastGRPOTrainer, "skip"), (GRPOTrainer, "off")):
        monkeypatch.setattr(fast, "FastGRPOTrainer", trainer_class)
        model = load_model(cfg.model_name, False, torch.float32)
        run_cfg = cfg.model_copy(update={"dynamic_sampling": mode})
        trainers.append(build.build_trainer(run_cfg, model, tokenizer, data, None, reward, [], "cpu", False))
    ours, theirs = trainers
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for (name, param), (_, other) in zip(ours.model.named_parameters(), theirs.model.named_parameters()):
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
            other.copy_(param)
    for trainer in trainers:
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
    even = next(r for r in data if int(r["ground_truth"]) % 2 == 0)
    odd = next(r for r in data if int(r["ground_truth"]) % 2 == 1)
    return ours, theirs, [even] * 4 + [odd] * 4


@pytest.mark.slow
def test_skip_trains_the_varied_groups_exactly_as_trl_and_scores_nothing_else(tiny_model: str, tmp_path: Path,
                                                                               monkeypatch) -> None:
    ours, theirs, rows = _skip_and_plain(tiny_model, tmp_path, monkeypatch)
    assert type(ours).__name__ == "DynamicSamplingFastGRPOTrainer" and type(theirs).__name__ == "GRPOTrainer"
    base = next(c for c in type(ours).__mro__ if c.__name__ == "FastGRPOTrainer")  # what runs each forward
    scored, generated = [], []
    original = base._get_per_token_logps_and_entropies

    def spy(self, model, input_ids, *args, **kwargs):
        if not torch.is_grad_enabled():
            scored.append(input_ids.size(0))
        return original(self, model, input_ids, *args, **kwargs)

    monkeypatch.setattr(base, "_get_per_token_logps_and_entropies", spy)
    original_generate = base._generate

    def record(self, prompts):
        result = original_generate(self, prompts)
        generated.append(result[1])
        return result

    monkeypatch.setattr(base, "_generate", record)
    torch.manual_seed(0)
    batch = ours._generate_and_score_completions(rows)
    assert scored == [4], "the reference forward ran on the varied group's 4 rows, not all 8"
    assert batch["completion_ids"].size(0) == 4 and batch["advantages"].abs().sum() > 0
    monkeypatch.setattr(theirs, "_generate_single_turn", lambda *a, **k: (generated[0], None))
    expected = theirs._generate_and_score_completions(rows)  # TRL on every row, the same completions
    kept = take_rows(expected, torch.arange(4, 8))
    assert batch.keys() == kept.keys()
    for key, value in kept.items():
        torch.testing.assert_close(batch[key], value, atol=1e-5, rtol=0, msg=key)
    losses = []
    for trainer, inputs in ((ours, batch), (theirs, kept)):
        trainer.model.zero_grad()
        trainer.compute_loss(trainer.model, inputs).backward()
        losses.append({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.requires_grad})
    for name, grad in losses[1].items():
        torch.testing.assert_close(losses[0][name], grad, atol=1e-6, rtol=1e-4, msg=name)
    metrics = ours._metrics["train"]
    assert metrics[ZERO_VARIANCE] == [0.5] and metrics[GROUPS] == [1]
    assert metrics["frac_reward_zero_std"] == [0.5], "TRL's own count of the same groups"


@pytest.mark.slow
def test_a_step_with_no_varied_group_makes_no_update(tiny_model: str, tmp_path: Path, monkeypatch) -> None:
    ours, _, rows = _skip_and_plain(tiny_model, tmp_path, monkeypatch)
    even = rows[:4] * 2
    batch = ours._generate_and_score_completions(even)
    assert batch["completion_ids"].size(0) == 0 and ours._metrics["train"][GROUPS] == [0]
    ours.model.zero_grad()
    loss = ours.compute_loss(ours.model, batch)
    loss.backward()
    assert float(loss.detach()) == 0.0 and all(p.grad is None for p in ours.model.parameters() if p.requires_grad)


@pytest.mark.slow
def test_resample_fills_the_batch_logs_it_and_resumes(tiny_model: str, tmp_path: Path, capsys) -> None:
    from hello_agents_rl.trainers.run import train
    from hello_agents_rl.workflows.actions import parse

    out = tmp_path / "run"
    params = {"action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(out),
              "dataset": "arithmetic", "max_samples": 32, "max_steps": 3, "batch_size": 2, "num_generations": 4,
              "max_new_tokens": 8, "logging_steps": 1, "save_steps": 1, "report_to": ["tensorboard"],
              "reward_type": parity_reward, "dynamic_sampling": "resample", "dynamic_sampling_rounds": 6}
    with pytest.raises(RuntimeError, match="killed"):
        train(parse(params), extra_callbacks=[_CrashAtStep(2)])
    result = RLTrainingTool().run({**params, "resume_from_checkpoint": True})
    assert result["status"] == "completed" and result["num_steps"] == 3
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = {e["step"]: e for e in logs if GROUPS in e}
    assert sorted(steps) == [1, 2, 3], "every step logged, the resumed ones too"
    for entry in steps.values():
        assert entry[GROUPS] == 2, "refilled to a full batch of groups whose rewards differ"
        assert entry["dynamic_sampling/rounds"] >= 2 and 0 < entry[ZERO_VARIANCE] < 1
    assert "Zero-variance:" in capsys.readouterr().out, "the console line shows it"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = [EventAccumulator(str(path.parent)).Reload() for path in out.glob("runs/**/events.out.tfevents*")]
    tags = {tag for acc in events for tag in acc.Tags()["scalars"]}
    assert {f"train/{ZERO_VARIANCE}", f"train/{GROUPS}"} <= tags


@pytest.mark.slow
def test_a_run_where_no_group_varies_completes_without_an_update(tiny_model: str, tmp_path: Path) -> None:
    """A random model never answers right: every group scores 0, every step's batch is empty, and the run still
    completes through TRL's own step (split, optimizer, scheduler) with the adapter as it started."""
    from safetensors.torch import load_file

    out = tmp_path / "run"
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(out),
        "dataset": "arithmetic", "max_samples": 8, "max_steps": 2, "batch_size": 2, "num_generations": 2,
        "max_new_tokens": 6, "logging_steps": 1, "save_steps": 100, "report_to": ["none"],
        "gradient_accumulation_steps": 2, "dynamic_sampling": "skip"})
    assert result["status"] == "completed" and result["num_steps"] == 2
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [e for e in logs if GROUPS in e]
    assert [e[GROUPS] for e in steps] == [0, 0] and all(e[ZERO_VARIANCE] == 1.0 for e in steps)
    adapter = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    lora_b = [t for name, t in adapter.items() if "lora_B" in name]
    assert lora_b and all(t.abs().sum() == 0 for t in lora_b), "no update: LoRA's B is still its zero start"


def test_group_chunks_split_whole_groups_over_the_steps_and_keep_every_row() -> None:
    from hello_agents_rl.trainers.dynamic_sampling import group_chunks

    for groups, group, steps in ((1, 2, 4), (3, 3, 4), (5, 2, 2), (4, 4, 4)):
        rows = groups * group
        batch = {"completion_ids": torch.arange(rows)[:, None], "completion_mask": torch.ones(rows, 1),
                 "advantages": torch.arange(rows, dtype=torch.float), "num_items_in_batch": torch.tensor(rows)}
        chunks = group_chunks(batch, group, steps)
        assert len(chunks) == steps
        seen = torch.cat([c["completion_ids"].flatten() for c in chunks]).tolist()
        assert sorted(seen) == list(range(rows)), "every kept row trained once"
        for chunk in chunks:
            ids = chunk["completion_ids"].flatten().tolist()
            assert len(ids) % group == 0 and {i // group for i in ids[::group]} == {i // group for i in ids}
            assert all(ids[k:k + group] == list(range(ids[k], ids[k] + group)) for k in range(0, len(ids), group))
            assert int(chunk["num_items_in_batch"]) == rows, "the round's token count, as TRL's split keeps it"
        sizes = [len(c["completion_ids"]) // group for c in chunks]
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.slow
@pytest.mark.parametrize("generations", [2, 3])
def test_the_groups_logged_as_varied_are_the_groups_trained(generations: int, tiny_model: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """gradient_accumulation_steps 4, one prompt per micro-step: a round of 4 groups of which 1-3 vary used to
    train none of them (TRL's equal split of their rows over 4 steps dropped the remainder)."""
    from hello_agents_rl.trainers import dynamic_sampling

    trained: list[int] = []  # the rows each micro-step's loss is computed on
    real_loss = dynamic_sampling.DynamicSampling.compute_loss

    def counting_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        trained.append(int(inputs["completion_ids"].size(0)))
        return real_loss(self, model, inputs, return_outputs, num_items_in_batch)

    monkeypatch.setattr(dynamic_sampling.DynamicSampling, "compute_loss", counting_loss)
    out = tmp_path / "run"
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": tiny_model, "output_dir": str(out),
        "dataset": "arithmetic", "max_samples": 16, "max_steps": 3, "batch_size": 1, "num_generations": generations,
        "gradient_accumulation_steps": 4, "max_new_tokens": 8, "logging_steps": 1, "save_steps": 100,
        "report_to": ["none"], "reward_type": parity_reward, "dynamic_sampling": "skip", "seed": 3})
    assert result["status"] == "completed"
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [e for e in logs if GROUPS in e]
    assert len(steps) == 3 and len(trained) == 12, "4 micro-steps per optimizer step"
    for step, entry in enumerate(steps):
        varied = round((1 - entry[ZERO_VARIANCE]) * 4)
        assert entry[GROUPS] == varied, entry
        rows = trained[4 * step: 4 * step + 4]
        assert sum(rows) == varied * generations and all(r % generations == 0 for r in rows), (rows, entry)
    assert any(0 < e[GROUPS] < 4 for e in steps), "a step with some groups varied and some not"


def test_the_trainer_class_is_composed_once_and_named_for_its_parts() -> None:
    from hello_agents_rl.config import TrainConfig
    from hello_agents_rl.trainers import fast
    from hello_agents_rl.trainers.agent_run import FinishEndsTheRollout
    from hello_agents_rl.trainers.build import grpo_trainer_class
    from hello_agents_rl.trainers.dynamic_sampling import DynamicSampling

    react = type("Spec", (), {"finish_tool": "Finish"})()
    plain = TrainConfig(model_name="org/m", dataset="arithmetic")
    assert grpo_trainer_class(plain) is fast.FastGRPOTrainer
    both = grpo_trainer_class(plain.model_copy(update={"dynamic_sampling": "skip"}), react)
    assert both.__name__ == "FinishEndsTheRolloutDynamicSamplingFastGRPOTrainer" and both.finish_tool == "Finish"
    assert both.__mro__[1:4] == (FinishEndsTheRollout, DynamicSampling, fast.FastGRPOTrainer)
