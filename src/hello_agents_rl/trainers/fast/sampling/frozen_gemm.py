"""Products with a frozen fp32 weight, packed once for the CPU kernel that is fastest on this CPU's vendor.

MKL runs its AVX-512 code only on Intel CPUs; on others (AMD EPYC: docs/performance.md's `kernels` block) it takes
slower generic code, while oneDNN's JIT kernels dispatch on the instruction set alone: there oneDNN on a weight
packed for it is 2-3x MKL's rate at a decode step's 16 rows and 1.1-1.3x at a training chunk's ~600. On Intel
MKL's packed GEMM is as fast or faster (docs/performance.md's `kernels-intel` block), so it stays there. The same
products up to float rounding either way.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import torch

from hello_agents_rl.trainers.fast import switches

# MKL's packing pays at the sampler's rows (a batch per decode step); on a scoring forward's thousands F.linear's own
# packing amortises, and packing once buys nothing measurable there
MKL_PACK_MAX_ROWS = 256


@functools.cache
def cpu_vendor() -> str:
    """The x86 vendor string ('GenuineIntel', 'AuthenticAMD', ...) from /proc/cpuinfo, '' where unknown."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    for line in cpuinfo.splitlines():
        if line.startswith("vendor_id"):
            return line.split(":", 1)[1].strip()
    return ""


def choose_kernel(vendor: str, rows: int) -> str | None:
    """'onednn', 'mkl' or None (F.linear as it is) for a frozen fp32 weight multiplied ~`rows` rows at a time."""
    if not switches.on("packed_weights"):
        return None
    if vendor not in ("", "GenuineIntel") and switches.on("onednn_gemm") and torch.backends.mkldnn.is_available():
        return "onednn"
    return "mkl" if torch._C.has_mkl and rows <= MKL_PACK_MAX_ROWS else None


class PackedWeight:
    """x W^T + b for a frozen weight W [out, in], packed once for `kernel` at ~`rows` rows per call (a hint:
    other row counts give the same products). Holds its own copy in the kernel's layout."""

    def __init__(self, weight: torch.Tensor, rows: int, kernel: str) -> None:
        with torch.no_grad():
            weight = weight.detach()
            if kernel == "onednn":
                self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
            elif kernel == "mkl":
                self.packed = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
                self.weight = weight  # MKL's call wants the plain weight beside its packed copy
            else:
                raise ValueError(f"unknown kernel {kernel!r}: 'onednn' or 'mkl'")
        self.kernel, self.rows = kernel, rows

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.kernel == "onednn":
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, bias, "none", [], "")
        return torch.ops.mkl._mkl_linear(x, self.packed, self.weight, bias, self.rows)


def packable(weight: torch.Tensor) -> bool:
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and weight.dim() == 2


def pack(weight: torch.Tensor, rows: int) -> PackedWeight | None:
    """The weight packed for this CPU's fastest kernel at ~`rows` rows per call, or None where F.linear is it."""
    kernel = choose_kernel(cpu_vendor(), rows) if packable(weight) else None
    return PackedWeight(weight, rows, kernel) if kernel else None


class _FrozenProduct(torch.autograd.Function):
    """x [..., in] -> x W^T + b [..., out] with W frozen: the forward on W packed, the input's gradient on W^T
    packed (grad_x = grad_y W); no gradient for W or b."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, forward: PackedWeight, backward: PackedWeight,
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.backward_weight = backward
        return forward(x, bias)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        return ctx.backward_weight(grad.contiguous()), None, None, None


class FrozenLinear:
    """A frozen fp32 weight for the training forward: x W^T + b with the input's gradient, both products on
    oneDNN's packed kernel (built only where choose_kernel picks it; MKL's packing buys nothing at these rows)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, rows: int) -> None:
        self.forward = PackedWeight(weight, rows, "onednn")
        self.backward = PackedWeight(weight.t().contiguous(), rows, "onednn")
        self.bias = bias

    @classmethod
    def for_training(cls, weight: torch.Tensor, bias: torch.Tensor | None, rows: int) -> FrozenLinear | None:
        if packable(weight) and not weight.requires_grad and choose_kernel(cpu_vendor(), rows) == "onednn":
            return cls(weight, bias, rows)
        return None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() or not x.requires_grad:
            return self.forward(x, self.bias)
        return _FrozenProduct.apply(x, self.forward, self.backward, self.bias)
