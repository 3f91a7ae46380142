"""The decode step's own fp32 GEMM (kernels/streamed_gemm.cpp): a frozen weight packed into 16-column panels and
streamed with a software prefetch, for a decode step's rows (<= 64: 4x4's 16, 8x8's 64).

MKL's packed GEMM at 16 rows reads each panel and then computes on it, one after the other, so it streams weights
at about half the machine's read bandwidth (docs/performance.md, gemm-limits); this kernel computes on one line
while the next ones are on their way (docs/performance.md's `kernels` blocks give its rates). Built once per machine
(trainers/fast/kernels); where it cannot be built the sampler keeps MKL's kernel.
"""

from __future__ import annotations

from typing import Any

import torch

from hello_agents_rl.trainers.fast import kernels

PANEL = 16  # output columns per panel: the kernel's register width
# above this many rows per call MKL's GEMM is faster (benchmarks/gemm_kernels.py's sweep: docs/performance.md)
MAX_ROWS = 64


def built() -> tuple[Any | None, str | None]:
    """The compiled module and None, or None and why it is not available on this machine."""
    return kernels.build("streamed_gemm")


def fits(weight: torch.Tensor, rows: int) -> bool:
    """Whether this kernel applies: a decode step's rows, a panel-aligned weight, the kernel built."""
    return rows <= MAX_ROWS and weight.shape[0] % PANEL == 0 and built()[0] is not None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] -> panels [N / 16, K, 16] (a copy, the weight's bytes)."""
    return built()[0].pack(weight.contiguous())


def linear(x: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] -> x W^T + b [..., N] for W packed by `pack`."""
    flat = x.reshape(-1, x.shape[-1])
    y = built()[0].linear(flat if flat.is_contiguous() else flat.contiguous(), panels, bias)
    return y.view(*x.shape[:-1], y.shape[-1])
