"""The decode step's own fp32 GEMM (kernels/streamed_gemm.cpp): a frozen weight packed into 16-column panels and
streamed with a software prefetch, for a decode step's rows (<= 64: 4x4's 16, 8x8's 64).

MKL's packed GEMM at 16 rows reads each panel and then computes on it, one after the other, so it streams weights
at about half the machine's read bandwidth (docs/performance.md, gemm-limits); this kernel computes on one line
while the next ones are on their way (docs/performance.md, item 16, for its rates). Built once per machine
(native.py); where it cannot be built the sampler keeps MKL's kernel.
"""

from __future__ import annotations

from typing import Any

import torch

from hello_agents_rl.rollouts.sampling import native

PANEL = 16  # output columns per panel: the kernel's register width
# above this many rows per call MKL's GEMM is faster (benchmarks/gemm_kernels.py's sweep: docs/performance.md)
MAX_ROWS = 64


def kernels() -> tuple[Any | None, str | None]:
    """The compiled module and None, or None and why it is not available on this machine."""
    return native.build("streamed_gemm")


def fits(weight: torch.Tensor, rows: int) -> bool:
    """Whether this kernel applies: a decode step's rows, a panel-aligned weight, the kernel built."""
    return rows <= MAX_ROWS and weight.shape[0] % PANEL == 0 and kernels()[0] is not None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] -> panels [N / 16, K, 16] (a copy, the weight's bytes)."""
    return kernels()[0].pack(weight.contiguous())


def merge_and_pack(weights: list[torch.Tensor], loras: list[list[tuple[torch.Tensor, torch.Tensor, float]]]
                   ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The weights [N_i, K] with their LoRA deltas merged (W + (B A) s) and concatenated [sum N_i, K], and their
    panels, in one pass; None where that does not apply (the kernel not built, a part's N_i not a multiple of 16,
    more than one adapter on a part, anything but fp32)."""
    module = kernels()[0]
    tensors = list(weights) + [t for parts in loras for a, b, _ in parts for t in (a, b)]
    if (module is None or len({w.shape[1] for w in weights}) != 1 or any(len(parts) > 1 for parts in loras)
            or any(t.dtype != torch.float32 or t.device.type != "cpu" or t.dim() != 2 for t in tensors)
            or any(w.shape[0] % PANEL for w in weights)):
        return None
    a = [parts[0][0].detach() if parts else None for parts in loras]
    b = [parts[0][1].detach() if parts else None for parts in loras]
    scales = [parts[0][2] if parts else 0.0 for parts in loras]
    return tuple(module.merge_and_pack([w.detach() for w in weights], a, b, scales))


def linear(x: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] -> x W^T + b [..., N] for W packed by `pack`."""
    flat = x.reshape(-1, x.shape[-1])
    y = kernels()[0].linear(flat if flat.is_contiguous() else flat.contiguous(), panels, bias)
    return y.view(*x.shape[:-1], y.shape[-1])
