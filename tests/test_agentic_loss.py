"""Tool results never get gradient: TRL's tool mask, on a real batch from TRL's own tool loop.

The model's turns are scripted (a random tiny model would not call a tool), everything else is TRL's:
parsing the call, running the (guarded) calculator, appending its result with the chat template,
the tool mask, the advantages and the loss. The gradient of that loss with respect to each token's
log-probability is zero on every tool-result token and non-zero on the model's own tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model

    return str(build_tiny_tool_model(tmp_path_factory.mktemp("tiny_tools") / "model", seed=0))


def _trainer(tool_model: str, tmp_path: Path, scripted: list[str], max_tool_turns: int = 2):
    from datasets import Dataset

    from hello_agents_rl.models import load_model, load_tokenizer
    from hello_agents_rl.trainers.build import build_trainer
    from hello_agents_rl.trainers.tool_run import trajectory_reward
    from hello_agents_rl.workflows.actions import parse

    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": "What is 347 * 56?"}]] * 2,
                              "ground_truth": ["19432"] * 2})
    cfg = parse({"action": "train", "algorithm": "grpo", "model_name": tool_model, "dataset": rows,
                 "output_dir": str(tmp_path / "run"), "tools": ["calculator"], "max_tool_turns": max_tool_turns,
                 "batch_size": 2, "num_generations": 2, "max_new_tokens": 200, "use_lora": False, "report_to": "none",
                 "kl_coef": 0.0})
    tokenizer = load_tokenizer(tool_model)
    reward = trajectory_reward(cfg)
    trainer = build_trainer(cfg, load_model(tool_model), tokenizer, rows, None, reward, [], "cpu", False)
    turns = iter(scripted)

    def scripted_turns(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        ids = [tokenizer(next(turns), add_special_tokens=False)["input_ids"] for _ in prompt_ids]
        return ids, None

    trainer._generate_single_turn = scripted_turns
    return trainer, tokenizer


CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 * 56"}}\n</tool_call><|im_end|>'


@pytest.mark.slow
def test_tool_result_tokens_get_no_gradient(tool_model: str, tmp_path: Path) -> None:
    # rollout 0: call, then the right answer; rollout 1: a wrong answer at once (advantages +0.5 / -0.5)
    trainer, tokenizer = _trainer(tool_model, tmp_path, [CALL, "Final Answer: 20820<|im_end|>",
                                                          "Final Answer: 19432<|im_end|>"])
    rows = [{"prompt": [{"role": "user", "content": "What is 347 * 56?"}], "ground_truth": "19432"}] * 2
    batch = trainer._generate_and_score_completions(rows)
    assert batch["advantages"].tolist() == [0.5, -0.5]
    ids, mask, tool_mask = batch["completion_ids"][0], batch["completion_mask"][0], batch["tool_mask"][0]
    text_of = lambda keep: tokenizer.decode([int(t) for t, k in zip(ids, keep) if k])  # noqa: E731
    masked_out = text_of((mask == 1) & (tool_mask == 0))
    assert "19432" in masked_out and "<tool_response>" in masked_out  # the calculator's result
    assert "<tool_call>" not in masked_out and "Final Answer" not in masked_out
    assert "Final Answer: 19432" in text_of((mask == 1) & (tool_mask == 1))  # the model's own tokens

    captured = {}
    original = trainer._get_per_token_logps_and_entropies

    def keep_logps(*args, **kwargs):
        logps, entropies, *rest = original(*args, **kwargs)
        logps.retain_grad()
        captured["logps"] = logps
        return (logps, entropies, *rest)

    trainer._get_per_token_logps_and_entropies = keep_logps
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test skips
    trainer.compute_loss(trainer.model, batch).backward()
    grad = captured["logps"].grad
    loss_tokens = (batch["completion_mask"] * batch["tool_mask"]).bool()
    tool_tokens = batch["completion_mask"].bool() & ~batch["tool_mask"].bool()
    assert tool_tokens.sum() > 5
    assert torch.all(grad[tool_tokens] == 0)
    assert torch.all(grad[loss_tokens] != 0)


@pytest.mark.slow
def test_turn_limit_and_failed_calls_reach_the_reward_and_the_logs(tool_model: str, tmp_path: Path) -> None:
    bad = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "347 x 56"}}\n</tool_call><|im_end|>'
    # turn 1: rollout 0 makes a failed call, rollout 1 a good one; turn 2 (the last, max_tool_turns=1):
    # rollout 0 calls again (out of turns), rollout 1 answers
    trainer, _ = _trainer(tool_model, tmp_path, [bad, CALL, CALL, "Final Answer: 19432<|im_end|>"], 1)
    rows = [{"prompt": [{"role": "user", "content": "What is 347 * 56?"}], "ground_truth": "19432"}] * 2
    trainer.model.train()  # TRL files the rollout's metrics under the model's mode
    batch = trainer._generate_and_score_completions(rows)
    assert batch["advantages"].tolist() == [-0.5, 0.5]  # out of turns scores 0; the answer after a good call, 1
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items() if v}
    assert metrics["tools/failure_frequency"] == pytest.approx(0.5)  # TRL counted the failed calculator call
    assert metrics["tools/turns_exhausted"] == pytest.approx(0.5)  # rollout 0 ended on an unanswered call
    assert metrics["tools/call_rate"] == pytest.approx(1.0)
