"""When the fast path may run at all: its switch, the library versions and the devices it was verified on.

Everything else in trainers/fast reads TRL/transformers/PEFT internals and was checked on these only; anywhere
else the run uses TRL's own code, says why in `fast_path`, until someone re-runs the checks and updates a table.
"""

from __future__ import annotations

import os
from importlib import metadata

ENV_SWITCH = "HELLO_AGENTS_FAST"  # 0/false/no/off: TRL's own code everywhere
# The releases whose internals the fast path was checked against (the overrides, PEFT's LoRA layers, generate's
# config merge; tests/test_fast_equivalence.py). Patch releases of the same minor are accepted; anything else runs
# plain TRL, with a warning, until someone re-runs the tests and updates this table.
VERIFIED_VERSIONS = {"trl": "1.16.0", "transformers": "5.24.0", "peft": "0.21.2"}
# Device types (torch.device.type) the fast path's tests have passed on. Another device (cuda, mps...) runs TRL's
# own code until benchmarks/gpu_check.sh has verified the fast path there and the type is added here.
VERIFIED_DEVICES = frozenset({"cpu"})
# Device types to run the fast path on although not in VERIFIED_DEVICES, comma-separated: how
# benchmarks/gpu_check.sh verifies one (HELLO_AGENTS_FAST_DEVICES=cuda).
DEVICES_UNDER_TEST = "HELLO_AGENTS_FAST_DEVICES"


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def version_blocker() -> str | None:
    """Why the installed libraries are not the verified ones (None: they are)."""
    from packaging.version import Version

    off = []
    for name, verified in VERIFIED_VERSIONS.items():
        try:
            installed = metadata.version(name)  # looked up now (not at import): what is really installed
        except metadata.PackageNotFoundError:  # e.g. no PEFT: nothing of it to be coupled to
            continue
        if Version(installed).release[:2] != Version(verified).release[:2]:
            off.append(f"{name} {installed}")
    if not off:
        return None
    verified = ", ".join(f"{n} {v}" for n, v in VERIFIED_VERSIONS.items())
    return f"{', '.join(off)} installed; the fast path is verified with {verified} (x.y.*)"


def device_blocker(device_type: str) -> str | None:
    """Why the fast path must not run on this device type (None: it was verified there)."""
    under_test = {d.strip() for d in os.environ.get(DEVICES_UNDER_TEST, "").split(",") if d.strip()}
    if device_type in VERIFIED_DEVICES or device_type in under_test:
        return None
    return f"not verified on {device_type}; benchmarks/gpu_check.sh verifies it"
