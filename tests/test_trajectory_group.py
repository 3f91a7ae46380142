"""The trajectory group: one prompt's G trajectories and rewards, as training and evaluation both read them."""

from __future__ import annotations

import random

import pytest
import torch

from hello_agents_rl.rewards import group_advantages
from hello_agents_rl.trainers.dynamic_sampling import varied_groups
from hello_agents_rl.trajectory import TrajectoryGroup, split_groups

CALL = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
    "name": "calculator", "arguments": {"expression": "2 * 3"}}}]}
TOOL_RESULT = {"role": "tool", "name": "calculator", "content": "6"}


def test_a_flat_batch_splits_into_groups_in_trl_order() -> None:
    completions = ["Final Answer: 6", [CALL, TOOL_RESULT, {"role": "assistant", "content": "Final Answer: 6"}],
                   "Final Answer: 5", [CALL, {"role": "tool", "name": "calculator", "content": "{'error': 'x'}"}]]
    groups = split_groups(completions, [1.0, 1.0, 0.0, None], group_size=2)
    assert [g.size for g in groups] == [2, 2]
    first, second = groups
    assert [t.calls for t in first.trajectories] == [0, 1] and first.trajectories[1].final_text == "Final Answer: 6"
    assert second.trajectories[1].failed_calls == 1 and second.trajectories[1].turns_exhausted
    assert first.rewards == (1.0, 1.0) and second.rewards == (0.0, None)
    assert not first.varied and not second.varied  # equal rewards; one scored reward is no comparison
    with pytest.raises(ValueError, match="groups of 3"):
        split_groups(completions, [1.0, 1.0, 0.0, None], group_size=3)
    with pytest.raises(ValueError, match="one reward per trajectory"):
        TrajectoryGroup(first.trajectories, (1.0,))


def test_advantages_and_the_zero_variance_test_agree_with_the_trainers() -> None:
    rng = random.Random(0)
    for _ in range(200):
        size = rng.choice([2, 3, 4, 8])
        values = [rng.choice([0.0, 0.5, 1.0, 1.0 + 1e-12, None]) for _ in range(size * 3)]
        groups = split_groups(["x"] * len(values), values, size)
        for scale in (False, True):
            assert [a for g in groups for a in g.advantages(scale)] == pytest.approx(
                group_advantages(values, size, scale=scale))
        tensor = torch.tensor([[float("nan") if v is None else v] for v in values])
        expected = varied_groups(tensor, torch.ones(1), size)[::size].tolist()  # dynamic sampling's test, on TRL's tensors
        assert [g.varied for g in groups] == expected, values


def test_create_reward_counts_the_groups_grpo_learns_from() -> None:
    from hello_agents_rl.interfaces.tool import RLTrainingTool

    result = RLTrainingTool().run({"action": "create_reward", "reward_type": "accuracy", "num_generations": 2,
                                   "completions": ["Final Answer: 6", "Final Answer: 5", "Final Answer: 6",
                                                   "Final Answer: 6"], "ground_truth": 6})
    assert result["scores"] == [1.0, 0.0, 1.0, 1.0]
    assert result["advantages"] == pytest.approx([0.5, -0.5, 0.0, 0.0]) and result["varied_groups"] == 1
