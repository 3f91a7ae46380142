"""The Python side of benchmarks/gpu_check.sh: one subcommand per part that is not a test or a benchmark of its own.

    python benchmarks/gpu_check_parts.py versions [--dry-run]   # part 1: versions against pyproject's ranges, device, bf16
    python benchmarks/gpu_check_parts.py configs WORKDIR        # part 2: LoRA, full and vLLM colocate training arguments
    python benchmarks/gpu_check_parts.py fsdp WORKDIR [--dry-run] # part 5's check of what the FSDP2 run left
    python benchmarks/gpu_check_parts.py wheels WHEELS_TXT DIR  # which gathered wheels to install here (stdout)

Imports this package from the path (PYTHONPATH=src), never through the start-up hook, which an environment
without an install does not have. Each subcommand prints one summary line last and exits non-zero on failure.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
REPORTED = ["torch", "transformers", "trl", "peft", "accelerate", "datasets", "pydantic"]


def _declared() -> dict[str, str]:
    """pyproject.toml's dependencies: name -> the requirement string."""
    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {Requirement(d).name.lower(): d for d in deps}


def versions(dry_run: bool) -> int:
    """Part 1: every installed dependency inside its declared range; the device; bf16 works on it. A missing one
    is listed, not failed: the image lacks some that these parts never import (optuna: the search only)."""
    import torch
    from packaging.requirements import Requirement

    from hello_agents_rl.trainers.fast.verified import version_blocker

    problems, missing = [], []
    for name, requirement in _declared().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if not Requirement(requirement).specifier.contains(installed, prereleases=True):
            problems.append(f"{name} {installed} outside {requirement}")
    found = ", ".join(f"{n} {metadata.version(n)}" for n in REPORTED if _installed(n))
    print(f"python {sys.version.split()[0]}; {found}")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        device = f"{torch.cuda.device_count()} x {props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}"
        bf16 = torch.cuda.is_bf16_supported()
        where = "cuda"
    else:
        device, bf16, where = "CPU", True, "cpu"
        if not dry_run:
            problems.append("no CUDA device visible")
    x = torch.randn(64, 64, device=where, dtype=torch.bfloat16)
    bf16_ok = bool(torch.isfinite(x @ x).all())
    if not (bf16 and bf16_ok):
        problems.append("bf16 unsupported")
    gate = version_blocker()
    print(f"device: {device}; bf16 matmul {'ok' if bf16_ok else 'FAILED'}")
    print(f"fast path versions: {'verified' if gate is None else gate}")
    print(f"[versions] {'ok' if not problems else '; '.join(problems)}"
          + (f"; not installed: {', '.join(missing)}" if missing else ""))
    return 1 if problems else 0


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def configs(workdir: Path) -> int:
    """Part 2: the training arguments TRL and transformers accept for LoRA, full fine-tuning and vLLM colocate."""
    from hello_agents_rl.config import TrainConfig
    from hello_agents_rl.models import pick_device_dtype
    from hello_agents_rl.trainers.build import training_arguments

    device, dtype = pick_device_dtype()
    bf16 = str(dtype) == "torch.bfloat16"
    base = dict(model_name="Qwen/Qwen3-0.6B", dataset="arithmetic", report_to=["none"], max_new_tokens=256)
    made = []
    for name, extra in [("lora", {"use_lora": True, "gradient_checkpointing": True}),
                        ("full", {"use_lora": False}), ("sft", {"algorithm": "sft"})]:
        cfg = TrainConfig(**base, output_dir=str(workdir / name), **extra)
        args = training_arguments(cfg, device, bf16)
        made.append(f"{name}: {type(args).__name__} bf16={args.bf16}")
    # vLLM colocate, constructed only: validation asks for vLLM installed, which the image need not have
    cfg = TrainConfig(**base, output_dir=str(workdir / "vllm")).model_copy(
        update={"use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": 384})
    args = training_arguments(cfg, device, bf16)
    assert args.use_vllm and args.vllm_mode == "colocate" and args.vllm_max_model_length == 384
    made.append(f"vllm colocate: max_model_length {args.vllm_max_model_length}, "
                f"gpu_memory_utilization {args.vllm_gpu_memory_utilization}")
    print(f"[configs] ok on {device}: " + "; ".join(made))
    return 0


def fsdp(workdir: Path, dry_run: bool) -> int:
    """Part 5's verdict: FSDP in use, transformers saw it while loading, the final save complete. On CPU (a dry
    run) accelerate trains with plain data parallel instead of FSDP; the rest holds there too."""
    rows = [json.loads(line) for line in (workdir / "dump/seen-rank0.jsonl").read_text().splitlines()]
    setup = next(r["value"] for r in rows if r["kind"] == "setup")
    loads = [r["value"] for r in rows if r["kind"] == "load"]
    run = workdir / "run"
    checks = {
        "FSDP in use": setup["fsdp"] or ("no (CPU: data parallel)" if dry_run else False),
        "transformers saw FSDP at load": bool(loads) and all(load["fsdp"] for load in loads),
        "adapter saved": (run / "adapter/adapter_model.safetensors").is_file(),
        "merged model saved": (run / "model/model.safetensors").is_file(),
        "no staging folder left": not list(run.glob(".final*")),
        "result completed": json.loads((run / "results.json").read_text())["status"] == "completed",
    }
    print(f"[fsdp2] {setup['distributed_type']} on {setup['device']}: "
          + "; ".join(f"{k}: {v}" for k, v in checks.items()))
    return 0 if all(checks.values()) else 1


def wheels(listing: Path, folder: Path) -> int:
    """The gathered wheels to install in this environment: all but an `if-older` one whose package is here
    already at its version or newer."""
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version

    only_if_older = {canonicalize_name(line.split("==")[0]) for line in listing.read_text().splitlines()
                     if line.strip().endswith("if-older")}
    for wheel in sorted(folder.glob("*.whl")):
        name, version, *_ = parse_wheel_filename(wheel.name)
        if name in only_if_older and _installed(name) and Version(metadata.version(name)) >= version:
            continue
        print(wheel)
    return 0


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "versions":
        return versions("--dry-run" in args)
    if command == "configs":
        return configs(Path(args[0]))
    if command == "fsdp":
        return fsdp(Path(args[0]), "--dry-run" in args)
    if command == "wheels":
        return wheels(Path(args[0]), Path(args[1]))
    raise SystemExit(f"unknown part {command!r}; see {__doc__}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
