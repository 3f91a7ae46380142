"""Names that moved between the library versions this package supports (pyproject.toml's ranges).

Every place where one supported release spells a thing differently from another goes through here, so the
rest of the package is written against one spelling: the newest (the lock's). Each helper looks at the
installed library itself, never at a version number, so a backport or a patch release is handled too.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any


@cache
def _training_argument_names() -> frozenset[str]:
    from transformers import TrainingArguments

    return frozenset(f.name for f in dataclasses.fields(TrainingArguments))


def checkpointing_argument(enabled: bool) -> dict[str, bool]:
    """Gradient checkpointing as TrainingArguments takes it: `activation_checkpointing` from transformers 5.18
    on (`gradient_checkpointing` is its deprecated alias there), `gradient_checkpointing` before."""
    names = _training_argument_names()
    key = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return {key: enabled}


def model_is_checkpointing(model: Any) -> bool:
    """Whether gradient checkpointing is on in a transformers model: `is_activation_checkpointing` from 5.18 on,
    `is_gradient_checkpointing` before (reading the old name on 5.18+ warns that it is deprecated)."""
    if hasattr(type(model), "is_activation_checkpointing"):
        return bool(model.is_activation_checkpointing)
    return bool(getattr(model, "is_gradient_checkpointing", False))
