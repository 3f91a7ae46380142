"""When the fast path may run at all: its switch, the library versions and the devices it was verified on.

Everything else in trainers/fast reads TRL/transformers/PEFT internals and was checked on these only; anywhere
else the run uses TRL's own code, says why in `fast_path`, until someone re-runs the checks and updates a table.
"""

from __future__ import annotations

import os
from importlib import metadata

from hello_agents_rl.trainers.fast.switches import ENV_SWITCH, enabled

__all__ = ["ENV_SWITCH", "enabled", "device_blocker", "version_blocker"]

# The releases whose internals the fast path was checked against (the overrides, PEFT's LoRA layers, generate's
# config merge), the two ends of the supported ranges: on the lock CI runs tests/test_fast_equivalence.py and the
# whole suite; on the oldest set (requirements-oldest.txt, .ci/oldest-set) the fast suite, and the GPU check's dry
# run runs the equivalence test's bf16 step and run record. Patch releases of a listed minor are accepted; any
# other release runs plain TRL, with a warning, until someone re-runs those tests there and adds it here.
VERIFIED_VERSIONS = {"trl": ("1.16.0",), "transformers": ("5.17.0", "5.24.0"), "peft": ("0.18.0", "0.21.2")}
# Device types (torch.device.type) the fast path runs on, and the evidence each rests on. Another device runs
# TRL's own code until that evidence exists for it there: tests/test_fast_equivalence.py passing on the device
# (the bf16 whole step against TRL's), which benchmarks/gpu_check.sh's part 3 runs. Its pass opens the gate for
# the rest of that run only (part 4's throughput, through DEVICES_UNDER_TEST); a device joins this table once
# such a run's summary is recorded in docs/scaling.md. No GPU has run it yet.
DEVICE_EVIDENCE = {"cpu": "tests/test_fast_equivalence.py, every CI run"}
VERIFIED_DEVICES = frozenset(DEVICE_EVIDENCE)
# Device types to run the fast path on although not in VERIFIED_DEVICES, comma-separated: set by the equivalence
# test for the device it compares on, and by benchmarks/gpu_check.sh after that test passed there.
DEVICES_UNDER_TEST = "HELLO_AGENTS_FAST_DEVICES"


def version_blocker() -> str | None:
    """Why the installed libraries are not the verified ones (None: they are)."""
    from packaging.version import Version

    off = []
    for name, verified in VERIFIED_VERSIONS.items():
        try:
            installed = metadata.version(name)  # looked up now (not at import): what is really installed
        except metadata.PackageNotFoundError:  # e.g. no PEFT: nothing of it to be coupled to
            continue
        if Version(installed).release[:2] not in {Version(v).release[:2] for v in verified}:
            off.append(f"{name} {installed}")
    if not off:
        return None
    return f"{', '.join(off)} installed; the fast path is verified with {verified_versions_text()}"


def verified_versions_text() -> str:
    """`trl 1.16.*; transformers 5.17.* or 5.24.*; ...`: what the fast path was verified with."""
    return "; ".join(f"{name} " + " or ".join(".".join(v.split(".")[:2]) + ".*" for v in versions)
                     for name, versions in VERIFIED_VERSIONS.items())


def device_blocker(device_type: str) -> str | None:
    """Why the fast path must not run on this device type (None: it was verified there)."""
    under_test = {d.strip() for d in os.environ.get(DEVICES_UNDER_TEST, "").split(",") if d.strip()}
    if device_type in VERIFIED_DEVICES or device_type in under_test:
        return None
    return (f"not verified on {device_type}: tests/test_fast_equivalence.py has not passed there "
            "(benchmarks/gpu_check.sh runs it on a GPU)")
