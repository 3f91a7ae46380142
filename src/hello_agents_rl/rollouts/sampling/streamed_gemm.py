"""The decode step's own fp32 GEMM (native/streamed_gemm.cpp): a frozen weight packed into 16-column panels and
streamed with a software prefetch, for the few rows (<= 16) of a 4x4 decode step.

MKL's packed GEMM at 16 rows reads each panel and then computes on it, one after the other, so it streams weights
at about half the machine's read bandwidth (docs/performance.md, gemm-limits); this kernel computes on one line
while the next ones are on their way (docs/performance.md, item 16, for its rates). Built once per machine by
torch's C++ extension loader (g++ and ninja, ~30 s, cached under ~/.cache/torch_extensions); where it cannot be
built (no AVX-512, no compiler) the sampler keeps MKL's kernel.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import torch

SOURCE = Path(__file__).with_name("native") / "streamed_gemm.cpp"
PANEL = 16  # output columns per panel: the kernel's register width
# above this many rows per call MKL's GEMM is faster (session 12, 2-core Xeon: 1.3x ours at 8 rows, 1.15x at 16,
# 0.94x at 32, 0.73x at 64)
MAX_ROWS = 16
log = logging.getLogger(__name__)


def has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@functools.cache
def kernels() -> tuple[Any | None, str | None]:
    """The compiled module and None, or None and why it is not available on this machine."""
    if not has_avx512():
        return None, "this CPU has no AVX-512"
    try:
        from torch.utils.cpp_extension import load

        module = load("hello_agents_rl_streamed_gemm", [str(SOURCE)], verbose=False,
                      extra_cflags=["-O3", "-march=native", "-fopenmp"])
    except Exception as error:  # any build failure: MKL's kernel is the fallback, not an error
        log.info("streamed GEMM not built (%s); the sampler uses MKL's", error)
        return None, f"not built: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
    return module, None


def fits(weight: torch.Tensor, rows: int) -> bool:
    """Whether this kernel applies: a decode step's rows, a panel-aligned weight, the kernel built."""
    return rows <= MAX_ROWS and weight.shape[0] % PANEL == 0 and kernels()[0] is not None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """weight [N, K] -> panels [N / 16, K, 16] (a copy, the weight's bytes)."""
    return kernels()[0].pack(weight.contiguous())


def linear(x: torch.Tensor, panels: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] -> x W^T + b [..., N] for W packed by `pack`."""
    flat = x.reshape(-1, x.shape[-1])
    y = kernels()[0].linear(flat if flat.is_contiguous() else flat.contiguous(), panels, bias)
    return y.view(*x.shape[:-1], y.shape[-1])
