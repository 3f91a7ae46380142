"""The fused LM head's vocabulary tile on CPU: 2,048 columns instead of TRL's 32,768.

TRL's chunked log-prob kernel (trl/kernels/chunked_logprob.py) projects [tokens, tile] logits at a time and runs
its log-softmax passes over each tile. Its 32,768-wide tile suits a GPU; on a CPU a [~500, 32768] fp32 tile
(64 MB) leaves the caches for every pass, a 2,048-wide one stays in them. Used where TRL's head still runs (the
module-path training forward, TRL's own forward); what it buys: the `ours-functional_forward+vocab_tile` row of
docs/performance.md. The log-probs are the same up to float rounding (an online log-sum-exp over other tiles).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hello_agents_rl.coupling import LM_HEAD_TILE
from hello_agents_rl.trainers.fast import switches

CPU_VOCAB_TILE = 2048


@contextmanager
def cpu_vocab_tile(device_type: str) -> Iterator[None]:
    """TRL's fused LM head with the CPU tile for the calls inside (restored after, also on error)."""
    if device_type != "cpu" or not switches.on("vocab_tile"):
        yield
        return
    import importlib

    module = importlib.import_module(LM_HEAD_TILE[0])
    before = getattr(module, LM_HEAD_TILE[1])
    setattr(module, LM_HEAD_TILE[1], CPU_VOCAB_TILE)
    try:
        yield
    finally:
        setattr(module, LM_HEAD_TILE[1], before)
