"""The fast path's hand-written CPU kernels (*.cpp here), compiled once per kind of machine by torch's extension loader.

Each kernel module is one source file (and the headers it shares with others); `build(name)` compiles it on first
use (g++ and ninja, ~30 s) with -march=native, and every later process loads that build. So that a build is only
ever loaded by a machine that can run it, its folder is keyed by the sources, the headers, the flags, the CPU's
instruction-set flags and the compiler (`machine_key`): a home folder shared by machines with different CPUs keeps
one build per kind. Where a kernel cannot be built or loaded (no AVX-512, no compiler, a build that fails, a build
lock held past `LOCK_TIMEOUT_S`) its caller keeps the torch code, and `status()` says why (results.json:
fast_path.kernels).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from hello_agents_rl.trainers.fast import switches

KERNELS = Path(__file__).parent
CFLAGS = ["-O3", "-march=native", "-fopenmp"]
# A first build takes ~30 s; a lock held for longer belongs to a process that is stuck or slower than we wait for.
LOCK_TIMEOUT_S = 300.0
log = logging.getLogger(__name__)
_status: dict[str, str] = {}  # kernel -> "built" or why not, for this process


@functools.cache
def cpuinfo() -> str:
    """/proc/cpuinfo's text ('' where there is none): the CPU's vendor and instruction sets."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def has_avx512() -> bool:
    return "avx512f" in cpuinfo()


def compiler() -> str:
    """The C++ compiler torch's loader will call ($CXX, else c++), as its --version names it; '' if none answers."""
    try:
        run = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return run.stdout.splitlines()[0] if run.returncode == 0 and run.stdout else ""


def machine_key(cxx: str) -> str:
    """What a build depends on beyond what torch's loader checks: the CPU's instruction sets and the compiler."""
    flags = next((line for line in cpuinfo().splitlines() if line.startswith("flags")), "")
    isa = " ".join(sorted(set(flags.partition(":")[2].split())))
    sources = b"".join(p.read_bytes() for p in sorted([*KERNELS.glob("*.h"), *KERNELS.glob("*.cpp")]))
    text = f"{isa}\n{cxx}\n{CFLAGS}\n{torch.__version__}\n{sys.version_info[:2]}".encode()
    return hashlib.sha1(text + sources).hexdigest()[:16]


def build_root() -> Path:
    """$HELLO_AGENTS_CACHE/kernels (default ~/.cache/hello_agents_rl/kernels)."""
    return Path(os.environ.get("HELLO_AGENTS_CACHE") or "~/.cache/hello_agents_rl").expanduser() / "kernels"


def decode_step_kernels(x: torch.Tensor, switch: str) -> Any | None:
    """decode_step.cpp for operations on `x` where it applies: CPU fp32, no gradient, optimisation `switch` on, the
    kernels built; None: the torch operations."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or (x.requires_grad and torch.is_grad_enabled()):
        return None
    return build("decode_step")[0] if switches.on(switch) else None


def status() -> dict[str, str]:
    """Each kernel this process asked for: 'built', or why it runs the torch code instead."""
    return dict(sorted(_status.items()))


@functools.cache
def build(name: str) -> tuple[Any | None, str | None]:
    """<name>.cpp compiled and loaded, and None; or None and why it is not available on this machine."""
    module, why = _build(name)
    _status[name] = "built" if module is not None else why or "not built"
    if why:
        log.warning("kernel %s: %s; the fast path keeps the torch code there", name, why)
    return module, why


def _build(name: str) -> tuple[Any | None, str | None]:
    if not has_avx512():
        return None, "this CPU has no AVX-512"
    cxx = compiler()
    if not cxx:
        return None, f"no C++ compiler answers ({os.environ.get('CXX', 'c++')} --version failed)"
    from filelock import FileLock, Timeout

    folder = build_root() / f"{name}-{machine_key(cxx)}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        # Our lock is the OS's (released when its holder dies); torch's own is a file that a killed build leaves
        # behind, and every later load would wait on it forever. Under ours, a torch lock file is such a leftover.
        with FileLock(folder / "owner.lock", timeout=LOCK_TIMEOUT_S):
            (folder / "lock").unlink(missing_ok=True)
            return _load(name, folder), None
    except Timeout:
        return None, f"another process has held the build lock {folder / 'owner.lock'} for over {LOCK_TIMEOUT_S:.0f} s"
    except Exception as error:  # noqa: BLE001 - any build or load failure: the torch code is the fallback, not an error
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return None, f"not built: {first}"


def _load(name: str, folder: Path) -> Any:
    from torch.utils.cpp_extension import load

    return load(f"hello_agents_rl_{name}", [str(KERNELS / f"{name}.cpp")], extra_cflags=CFLAGS,
                build_directory=str(folder), verbose=False)
