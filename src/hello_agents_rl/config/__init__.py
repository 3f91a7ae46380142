"""Every action's parameters: validated, typed, with one documented default each.

The pydantic models here are the single source of truth: the tool's parameter schema, the CLI help and
the README table are generated from them (`describe_fields`). The schema only: validating a config loads
no model and imports no torch or transformers; what needs them is checked in trainers/preflight.py.
"""

from hello_agents_rl.config.base import MAX_COUNT, describe_fields, numeric_kinds, read_number, validate
from hello_agents_rl.config.data import DataConfig, LoadDatasetConfig, split_problem
from hello_agents_rl.config.doctor import Thresholds
from hello_agents_rl.config.evaluate import CompareConfig, EvaluateConfig
from hello_agents_rl.config.export import ExportConfig
from hello_agents_rl.config.pipeline import PipelineConfig
from hello_agents_rl.config.reward import CreateRewardConfig
from hello_agents_rl.config.search import SearchConfig
from hello_agents_rl.config.train import SCHEDULERS, ModelConfig, TrainConfig

__all__ = [
    "MAX_COUNT", "SCHEDULERS", "CompareConfig", "CreateRewardConfig", "DataConfig", "EvaluateConfig", "ExportConfig",
    "LoadDatasetConfig", "ModelConfig", "PipelineConfig", "SearchConfig", "Thresholds", "TrainConfig",
    "describe_fields", "numeric_kinds", "read_number", "split_problem", "validate",
]
