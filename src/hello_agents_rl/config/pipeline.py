"""`action: pipeline`: the book's whole flow, whose stages are train and evaluate configs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from hello_agents_rl.config.base import SectionOf, WritableFolder, nested
from hello_agents_rl.config.evaluate import EvaluateConfig, evaluation_of
from hello_agents_rl.config.train import TrainConfig, keys_read_by


class PipelineConfig(TrainConfig):
    """`action: pipeline` -- evaluate the base, SFT, evaluate, GRPO from the SFT model, evaluate, report.

    Any train key at the top level applies to the stages that read it (`kl_coef` to GRPO only); `sft` and `grpo`
    override it per stage.
    """

    one_algorithm: ClassVar[bool] = False
    output_dir: WritableFolder | None = Field("./models/pipeline", description="Root folder: sft/, grpo/, training_results.json, report.")
    sft: Annotated[dict[str, Any], SectionOf(TrainConfig)] = Field(default_factory=dict, description="SFT parameters (any train key), over the shared ones.")
    grpo: Annotated[dict[str, Any], SectionOf(TrainConfig)] = Field(default_factory=dict, description="GRPO parameters (any train key), over the shared ones.")
    evaluation: Annotated[dict[str, Any], SectionOf(EvaluateConfig)] = Field(
        default_factory=dict, description="Evaluation parameters (split, max_samples, max_new_tokens, batch_size...)."
    )

    def stage(self, algorithm: str, model_name: str | None = None) -> TrainConfig:
        """One stage's full, validated TrainConfig: the keys the user set at the top, then the stage's own."""
        shared = self.model_dump(exclude_unset=True, exclude={"action", "algorithm", "sft", "grpo", "evaluation"})
        shared = keys_read_by({**shared, "algorithm": algorithm})
        overrides = self.sft if algorithm == "sft" else self.grpo
        params = {**shared, "output_dir": str(Path(self.output_dir) / algorithm), **overrides, "algorithm": algorithm}
        if model_name is not None:
            params["model_name"] = model_name
        return nested(TrainConfig, params, algorithm)

    def evaluation_config(self, model_path: str) -> EvaluateConfig:
        return evaluation_of(self.model_dump(exclude_unset=True), self.evaluation, model_path)

    @model_validator(mode="after")
    def _stages_are_valid(self) -> PipelineConfig:
        self.stage("sft")
        self.stage("grpo", model_name=self.model_name)  # the SFT model does not exist yet: check the rest
        self.evaluation_config(self.model_name)
        return self
