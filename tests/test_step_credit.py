"""Credit per step (trainers/step_credit.py): a hand-computed group of four lookup chains, the tokens each step
owns, and a GRPO run whose per-token advantages are the episode's plus the step's."""

from __future__ import annotations

import math

import pytest
import torch

from hello_agents_rl.trainers.step_credit import per_token, results_read, step_advantages, steps_of

# One question, four rollouts (TRL's order: one group of 4):
#   0: lookup(P) -> "P: works at K1", lookup(K1) -> "K1: founded by F", answers right      R = 1
#   1: lookup(P) -> "P: works at K1", lookup(Q)  -> "error",            answers wrong      R = 0
#   2: lookup(P) -> "P: works at K1", answers at once, wrong                               R = 0
#   3: answers at once (a guess), wrong                                                    R = 0
READ = [[("P: works at K1",), ("K1: founded by F",)], [("P: works at K1",), ("error",)], [("P: works at K1",)], []]
REWARDS = [1.0, 0.0, 0.0, 0.0]
STEPS = [3, 3, 2, 1]


def close(got: list[list[float]], expected: list[list[float]]) -> bool:
    return [len(r) for r in got] == [len(r) for r in expected] and all(
        a == pytest.approx(b) for row, want in zip(got, expected) for a, b in zip(row, want))


def test_a_step_is_credited_against_the_rollouts_that_reached_the_same_results() -> None:
    # step 0, state (): all four, mean 1/4. step 1, state ("P: works at K1",): rollouts 0, 1 and 2, mean 1/3 --
    # reading the employer and looking it up beats answering there. step 2: each rollout read other results, alone.
    assert close(step_advantages(READ, REWARDS, STEPS, 4),
                 [[0.75, 2 / 3, 0.0], [-0.25, -1 / 3, 0.0], [-0.25, -1 / 3], [-0.25]])


def test_an_unscored_rollout_is_left_out_of_every_mean_and_gets_no_step_term() -> None:
    terms = step_advantages(READ, [1.0, 0.0, math.nan, 0.0], STEPS, 4)
    assert terms[2] == [0.0, 0.0] and terms[0] == pytest.approx([1 - 1 / 3, 0.5, 0.0])


def test_groups_are_compared_only_within_themselves() -> None:
    terms = step_advantages(READ + READ, REWARDS + [0.0, 0.0, 0.0, 1.0], STEPS + STEPS, 4)
    assert close(terms[:4], [[0.75, 2 / 3, 0.0], [-0.25, -1 / 3, 0.0], [-0.25, -1 / 3], [-0.25]])
    assert close(terms[4:], [[-0.25, 0.0, 0.0], [-0.25, 0.0, 0.0], [-0.25, 0.0], [0.75]])  # all three wrong: no step term


def test_a_round_of_several_results_is_one_state() -> None:
    messages = [{"role": "assistant", "content": "", "tool_calls": [{}, {}]}, {"role": "tool", "content": "a"},
                {"role": "tool", "content": "b"}, {"role": "assistant", "content": ""}, {"role": "tool", "content": "c"},
                {"role": "assistant", "content": "Final Answer: 1"}]
    assert results_read(messages) == [("a", "b"), ("c",)] and results_read("plain text") == []


def test_each_model_token_belongs_to_the_step_it_was_sampled_in() -> None:
    # model tokens (1), a tool result (0), model tokens, a tool result, model tokens, then padding
    tool_mask = torch.tensor([[1, 1, 0, 0, 1, 0, 1, 1, 1, 1]])
    completion_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
    steps = steps_of(tool_mask, completion_mask)
    assert steps.tolist() == [[0, 0, -1, -1, 1, -1, 2, 2, -1, -1]]
    tokens = per_token(torch.tensor([0.5]), steps, [[0.75, 2 / 3, 0.0]], weight=1.0)
    assert close(tokens.tolist(), [[1.25, 1.25, 0.5, 0.5, 0.5 + 2 / 3, 0.5, 0.5, 0.5, 0.5, 0.5]])


def text_sum(completion: str, ground_truth: str) -> float:
    """A reward that varies within a group of a random model's answers (their texts differ)."""
    return float(sum(map(ord, completion)) % 5) / 4


@pytest.mark.slow
def test_a_grpo_tool_run_trains_on_per_token_advantages_with_the_step_term(tmp_path, monkeypatch) -> None:
    """Through the book's call: the class composed with StepCredit, the loss fed [B, T] advantages, each model token's
    the episode's plus step_credit times its step's term (the tiny model's rollouts here are one step: their first
    step's group is the whole group, so the term is the episode advantage again)."""
    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.models.tiny_tool_model import build_tiny_tool_model
    from hello_agents_rl.trainers import step_credit

    seen: list[tuple[torch.Tensor, torch.Tensor, list, torch.Tensor]] = []
    real = step_credit.per_token

    def spy(advantages, steps, terms, weight):
        out = real(advantages, steps, terms, weight)
        seen.append((advantages.clone(), steps.clone(), terms, out.clone()))
        return out

    monkeypatch.setattr(step_credit, "per_token", spy)
    model = build_tiny_tool_model(tmp_path / "tiny", seed=0)
    result = RLTrainingTool().run({
        "action": "train", "algorithm": "grpo", "model_name": str(model), "output_dir": str(tmp_path / "run"),
        "dataset": "multiplication", "max_samples": 8, "max_steps": 2, "batch_size": 2, "num_generations": 4,
        "max_new_tokens": 24, "use_lora": False, "report_to": "none", "logging_steps": 1, "save_steps": 100,
        "reward_type": text_sum, "step_credit": 0.5})
    assert result["status"] == "completed" and len(seen) == 2
    for episode, steps, terms, tokens in seen:
        assert tokens.dim() == 2 and tokens.shape == steps.shape
        for row, row_terms in enumerate(terms):
            for k, term in enumerate(row_terms):
                owned = steps[row] == k
                assert torch.allclose(tokens[row][owned], episode[row] + 0.5 * term)
            assert torch.allclose(tokens[row][steps[row] < 0], episode[row])  # tool results and padding: no step term
        assert any(abs(t) > 0 for row_terms in terms for t in row_terms), "the groups varied: some step term is not 0"


def test_step_credit_is_refused_where_it_cannot_run_naming_the_key() -> None:
    from hello_agents_rl import ConfigError
    from hello_agents_rl.config import TrainConfig
    from hello_agents_rl.trainers.preflight import check_schedule

    run = TrainConfig(model_name="org/m", dataset="lookups", step_credit=1.0)  # the task brings its tools
    check_schedule(run, 64, world_size=1)
    with pytest.raises(ConfigError, match=r"`step_credit`: runs in one process"):
        check_schedule(run, 64, world_size=2)
    from hello_agents_rl.workflows.actions import parse

    for bad, why in (({"dataset": "arithmetic"}, "this run has no tools"),
                     ({"dataset": "lookups", "dynamic_sampling": "skip"}, "not with dynamic_sampling"),
                     ({"dataset": "lookups", "algorithm": "sft"}, "read only by GRPO")):
        with pytest.raises(ConfigError, match=why):
            parse({"action": "train", "model_name": "org/m", "step_credit": 1.0, **bad})
