"""Several processes (`accelerate launch`, `torchrun`): who writes, who waits, what every rank returns.

Rank 0 alone prints, logs and writes files; every rank trains on its own share of the prompts
and returns rank 0's result. See docs/scaling.md.
"""

from __future__ import annotations

import os
from typing import Any


def is_main_process() -> bool:
    """Global rank 0 (or the only process). Read from the launcher's environment, so it works
    before any process group exists (checking the output folder, the CLI's last print)."""
    return int(os.environ.get("RANK", "0")) == 0


def world_size() -> int:
    """Processes in the run, from the launcher's environment (1 when run directly)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def saves_collectively(trainer: Any) -> bool:
    """DeepSpeed and FSDP hold (or may hold) weight shards on each rank: gathering them to save needs every rank."""
    return bool(getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False))


def wait_for_everyone(trainer: Any) -> None:
    if trainer.accelerator.num_processes > 1:
        trainer.accelerator.wait_for_everyone()


def from_main_process(trainer: Any, value: Any) -> Any:
    """Rank 0's value on every rank (only rank 0 saw the logs the result is made from)."""
    if trainer.accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value if trainer.is_world_process_zero() else None]
    broadcast_object_list(box, from_process=0)
    return box[0]
