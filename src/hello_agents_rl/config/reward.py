"""`action: create_reward`: build a reward from its keys and score completions with it."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from hello_agents_rl.config.base import Base, Count, PathRole, require
from hello_agents_rl.config.checks import check_reward, check_task_ref
from hello_agents_rl.config.data import ANSWER_CHECKER_HELP, AnswerChecker, answer_checker_problem


class CreateRewardConfig(Base):
    """`action: create_reward` -- build a reward and score completions with it."""

    reward_type: Any = Field("accuracy", description="accuracy, length_penalty, step, combined, or a callable.")
    reward_config: dict[str, Any] = Field(default_factory=dict, description="Reward parameters.")
    completions: list[str] = Field(default_factory=list, description="Completions to score.")
    ground_truth: Any = Field(None, description="One value for all completions, or a list with one per completion.")
    task_ref: Annotated[str | list[str] | None, PathRole("task_ref")] = Field(
        None, description="A reasoning-gym row's `task_ref` (load_dataset shows one in its sample), for every "
        "completion or a list with one per completion: the task's own checker scores them, as in training.")
    num_generations: Count | None = Field(None, ge=1, description="If given, also return group advantages.")
    reward_failure_value: float | None = Field(
        None, description="Score of a completion whose custom reward failed, as in training; None = no score (left out)."
    )
    answer_checker: AnswerChecker = Field("number", description=ANSWER_CHECKER_HELP)

    @model_validator(mode="after")
    def _reward_is_valid(self) -> CreateRewardConfig:
        check_reward(self.reward_type, self.reward_config)
        require(answer_checker_problem(self.answer_checker))
        n = len(self.completions)
        if isinstance(self.ground_truth, list) and len(self.ground_truth) != n:
            raise ValueError(f"`ground_truth`: {len(self.ground_truth)} values for {n} completions; "
                             "give one value, or one per completion")
        refs = self.task_ref if isinstance(self.task_ref, list) else [self.task_ref] if self.task_ref else []
        if isinstance(self.task_ref, list) and len(refs) != n:
            raise ValueError(f"`task_ref`: {len(refs)} values for {n} completions; give one, or one per completion")
        if refs and self.answer_checker != "number":
            raise ValueError("`answer_checker`: a task_ref's answers are judged by the task's own checker; "
                             "remove answer_checker")
        for i, ref in enumerate(refs):
            if ref not in refs[:i]:  # each task checked once (validation draws a question)
                check_task_ref(ref, f"task_ref.{i}" if isinstance(self.task_ref, list) else "task_ref")
        if self.num_generations and n % self.num_generations:
            raise ValueError(f"`num_generations`: {n} completions do not split into groups of {self.num_generations}; "
                             "give a multiple of num_generations completions")
        return self
