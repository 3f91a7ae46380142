"""`action: export`: a run's adapter merged into its base, saved as a plain transformers model."""

from __future__ import annotations

from pydantic import Field

from hello_agents_rl.config.base import Base, ModelSource, WritableFolder


class ExportConfig(Base):
    """`action: export` -- merge a LoRA adapter into its base and save a plain transformers model with a card."""

    model_path: ModelSource = Field(..., description="A run's output_dir, its adapter/ folder, or any adapter folder.")
    output_dir: WritableFolder = Field(..., description="A new or empty folder for the merged model (safetensors) and its README.md.")
    overwrite_output_dir: bool = Field(
        False, description="Replace an earlier export in output_dir (only the files that export wrote; nothing else)."
    )
    trust_remote_code: bool = Field(False, description="Run the model repository's own Python code.")
