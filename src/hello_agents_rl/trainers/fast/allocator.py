"""glibc's allocator told to keep freed memory for reuse instead of handing it back to the kernel (CPU runs).

By default glibc serves every block above 128 KiB (a threshold that grows to at most 32 MiB) by a fresh `mmap`
and trims the top of its heap back to the kernel once enough is free, so a GRPO step's activations, freed and
allocated again in every layer, cost page faults and zero-filled pages over and over (tests/test_fast_switches.py
counts them).
With the mmap threshold at its 32 MiB maximum and no trimming, freed blocks go back to the heap and are reused
(what jemalloc/tcmalloc, which PyTorch's CPU tuning guide recommends, do by default). Blocks above that ceiling (the
training LM head's [tokens, vocab] buffers, ~100 MB for a 4-completion group) would still be mapped afresh on every
call and page-faulted page by page (tens of ms per 100 MB), so mmap is off and they come from the heap too.
Cost: the process keeps its peak heap resident after the peak has passed, instead of returning it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

from hello_agents_rl.trainers.fast import switches

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -2, -3, -4  # glibc's <malloc.h> parameters
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's ceiling on 64-bit (4 * 1024 * 1024 * sizeof(long))
TOP_PAD = 64 * 2**20  # grow the heap in steps of this much: fewer brk calls
_applied: list[bool] = []


def keep_freed_memory(big_blocks_from_heap: bool = True) -> str | None:
    """Set the thresholds once per process; None if applied, else why not (not glibc, switched off).
    big_blocks_from_heap=False leaves blocks above the ceiling to mmap (the tests' comparison)."""
    if not switches.on("malloc_reuse"):
        return "switched off"
    if _applied:
        return None
    if not sys.platform.startswith("linux"):
        return f"not glibc ({sys.platform})"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return "no glibc mallopt (another C library)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) \
        and mallopt(M_TOP_PAD, TOP_PAD)
    if ok and big_blocks_from_heap:  # blocks above the ceiling from the heap too: reused, not remapped
        ok = mallopt(M_MMAP_MAX, 0)
    if not ok:
        return "mallopt refused the settings"
    _applied.append(True)
    return None
