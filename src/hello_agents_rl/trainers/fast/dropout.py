"""A cheaper LoRA dropout on CPU: the same Bernoulli mask from a quarter of the random draws."""

from __future__ import annotations

import logging
from typing import Any

import torch

from hello_agents_rl.trainers.fast import switches
from hello_agents_rl.trainers.fast.verified import enabled, version_blocker

log = logging.getLogger(__name__)


class FastDropout(torch.nn.Module):
    """nn.Dropout(p) whose mask costs a quarter of the random draws: on CPU `bernoulli_` draws one 32-bit
    number per element, this draws one 64-bit number per four elements (15 random bits each).

    Each element is still dropped independently, with probability round(p * 2**15) / 2**15 (p = 0.05 ->
    0.049988), and survivors are scaled by 1 / (1 - that probability), so the expectation is exact. Eval
    mode is the identity, like nn.Dropout. A different random stream than nn.Dropout, not a different model.
    """

    BITS = 15

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = float(p)
        self.threshold = round(self.p * 2**self.BITS)
        self.scale = 1.0 / (1.0 - self.threshold / 2**self.BITS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.threshold == 0:
            return x
        return x * (self.keep_mask(x) * self.scale).to(x.dtype)

    def keep_mask(self, x: torch.Tensor) -> torch.Tensor:
        """The mask forward() applies, 1 (or True) where kept, for callers that fold `scale` in elsewhere: int16
        0/1, which multiplies a float tensor vectorised (switch `integer_dropout_mask`), else bool."""
        n = x.numel()
        words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()  # 63 random bits each
        lanes = words.view(torch.int16)[:n].view(x.shape) & (2**self.BITS - 1)
        if switches.on("integer_dropout_mask"):  # lanes - (threshold - 1) > 0 exactly where lanes >= threshold
            return (lanes - (self.threshold - 1)).clamp_(0, 1)
        return lanes >= self.threshold

    def extra_repr(self) -> str:
        return f"p={self.p}, quantised to {self.threshold}/2^{self.BITS}"


def use_fast_dropout(model: Any) -> int:
    """Swap every LoRA dropout of `model` (PEFT) for FastDropout, on CPU only; returns how many."""
    if not enabled():
        return 0
    reason = version_blocker()
    if reason:  # PEFT's layer layout is what we swap into: only on verified versions
        log.warning("FastDropout off: %s", reason)
        return 0
    swapped = 0
    for module in model.modules():
        dropouts = getattr(module, "lora_dropout", None)
        if not isinstance(dropouts, torch.nn.ModuleDict):
            continue
        for name, dropout in list(dropouts.items()):
            weight = getattr(module, "weight", None)
            if type(dropout) is torch.nn.Dropout and dropout.p > 0 and (weight is None or weight.device.type == "cpu"):
                fast_dropout = FastDropout(dropout.p)
                fast_dropout.train(dropout.training)
                dropouts[name] = fast_dropout
                swapped += 1
    return swapped
