"""benchmarks/gpu_check.sh's own logic: which gathered wheels it installs, and its deadline. Its parts run in CI
as a dry run (.ci/oldest-set: offline, from an environment holding only what the GPU image holds)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ["versions", "configs", "equivalence", "grpo_step", "fsdp2", "demo"]


def test_if_older_wheels_are_installed_only_over_an_older_copy(tmp_path: Path) -> None:
    listing = tmp_path / "wheels.txt"
    listing.write_text("trl==1.16.0\npeft==99.0 if-older\nsafetensors==0.0.1 if-older\n")
    folder = tmp_path / "whl"
    folder.mkdir()
    names = ["trl-1.16.0-py3-none-any.whl", "peft-99.0-py3-none-any.whl", "safetensors-0.0.1-py3-none-any.whl"]
    for name in names:
        (folder / name).touch()
    chosen = subprocess.run([sys.executable, ROOT / "benchmarks" / "gpu_check_parts.py", "wheels", listing, folder],
                            capture_output=True, text=True, check=True).stdout.split()
    assert metadata.version("safetensors") > "0.0.1"  # installed here, and newer than that wheel: kept as is
    assert sorted(Path(c).name for c in chosen) == sorted(names[:2])


def test_every_part_reports_in_order_within_the_deadline(tmp_path: Path) -> None:
    """Past the deadline no part starts, and each still says so on its own line, in order; $OUT stays small."""
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "OUT": str(out), "WORK": str(tmp_path / "work"),
           "WHEELS": str(tmp_path / "none")}
    done = subprocess.run(["bash", ROOT / "benchmarks" / "gpu_check.sh", "--dry-run", "--deadline", "10"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines[:-1]] == PARTS and all(line.startswith("SKIP") for line in lines[:-1])
    assert lines[-1].startswith("total ") and "0 failed" in lines[-1]
    assert (out / "summary.txt").read_text().splitlines() == lines
    assert len([p for p in out.rglob("*") if p.is_file()]) <= 8
