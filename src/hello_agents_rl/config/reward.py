"""`action: create_reward`: build a reward from its keys and score completions with it."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from hello_agents_rl.config.base import Base, Count
from hello_agents_rl.config.checks import check_reward


class CreateRewardConfig(Base):
    """`action: create_reward` -- build a reward and score completions with it."""

    reward_type: Any = Field("accuracy", description="accuracy, length_penalty, step, combined, or a callable.")
    reward_config: dict[str, Any] = Field(default_factory=dict, description="Reward parameters.")
    completions: list[str] = Field(default_factory=list, description="Completions to score.")
    ground_truth: Any = Field(None, description="One value for all completions, or a list with one per completion.")
    num_generations: Count | None = Field(None, ge=1, description="If given, also return group advantages.")
    reward_failure_value: float | None = Field(
        None, description="Score of a completion whose custom reward failed, as in training; None = no score (left out)."
    )

    @model_validator(mode="after")
    def _reward_is_valid(self) -> "CreateRewardConfig":
        check_reward(self.reward_type, self.reward_config)
        n = len(self.completions)
        if isinstance(self.ground_truth, list) and len(self.ground_truth) != n:
            raise ValueError(f"`ground_truth`: {len(self.ground_truth)} values for {n} completions; "
                             "give one value, or one per completion")
        if self.num_generations and n % self.num_generations:
            raise ValueError(f"`num_generations`: {n} completions do not split into groups of {self.num_generations}; "
                             "give a multiple of num_generations completions")
        return self
