"""The sampler's hand-written CPU kernels (kernels/*.cpp), compiled once per machine by torch's C++ extension loader.

Each kernel module is one source file (and the headers it shares with others); `build(name)` compiles it on first
use (g++ and ninja, ~30 s, cached under ~/.cache/torch_extensions, with -march=native: the cache is this machine's)
and every later process loads the cached build. Where a kernel cannot be built (no AVX-512, no compiler) its
caller keeps the torch code.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from pathlib import Path
from typing import Any

import torch

from hello_agents_rl import speedups

KERNELS = Path(__file__).with_name("kernels")
log = logging.getLogger(__name__)


@functools.cache
def cpuinfo() -> str:
    """/proc/cpuinfo's text ('' where there is none): the CPU's vendor and instruction sets."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def has_avx512() -> bool:
    return "avx512f" in cpuinfo()


def decode_step_kernels(x: torch.Tensor, switch: str) -> Any | None:
    """kernels/decode_step.cpp for operations on `x` where it applies: CPU fp32, no gradient, optimisation `switch`
    on, the kernels built; None: the torch operations."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or (x.requires_grad and torch.is_grad_enabled()):
        return None
    return build("decode_step")[0] if speedups.on(switch) else None


@functools.cache
def build(name: str) -> tuple[Any | None, str | None]:
    """kernels/<name>.cpp compiled and loaded, and None; or None and why it is not available on this machine."""
    if not has_avx512():
        return None, "this CPU has no AVX-512"
    try:
        from torch.utils.cpp_extension import load

        # the loader's version check looks at the sources and flags, not the headers: their hash goes in as a flag
        headers = hashlib.sha1(b"".join(h.read_bytes() for h in sorted(KERNELS.glob("*.h")))).hexdigest()[:16]
        module = load(f"hello_agents_rl_{name}", [str(KERNELS / f"{name}.cpp")], verbose=False,
                      extra_cflags=["-O3", "-march=native", "-fopenmp", f"-DKERNEL_HEADERS_{headers}"])
    except Exception as error:  # any build failure: the torch code is the fallback, not an error
        log.info("kernel %s not built (%s); the sampler keeps the torch code", name, error)
        return None, f"not built: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
    return module, None
