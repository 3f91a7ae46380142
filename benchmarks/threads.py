"""How many torch threads a small model's run should take on a laptop that is doing other things too.

    python benchmarks/threads.py [--steps 80] [--busy 2] [--rounds 2]

SFT of the tiny model (`hello-agents-rl tiny-model`, the demo's task) for --steps steps, each run its own process,
with torch's default thread count, with the package's pick (`models/loading.py: pick_threads`), and with the
default count waiting passively (OMP_WAIT_POLICY=PASSIVE: threads sleep instead of spinning), first on idle cores
and then beside --busy processes that spin on the CPU (a browser, a build: a laptop's other work). Rounds
alternate the settings. Prints each run's wall seconds and default's time over each setting's (best rounds idle,
medians busy); the pick holds (PASS) when it costs at most 30% on idle cores (>= 0.7x default, best against best:
default's own runs there jump several-fold when anything else wakes up) and gains at least 1.5x beside busy ones.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = """
import sys, time
from hello_agents_rl.tasks.arithmetic import make_dataset
from hello_agents_rl.models import build_tiny_model
from hello_agents_rl.workflows.actions import run
out, steps = sys.argv[1], int(sys.argv[2])
model = build_tiny_model(out + "/tiny", seed=0)
rows = make_dataset("train", steps * 16, 0, carry_error=0.7)
started = time.monotonic()
run({"action": "train", "algorithm": "sft", "model_name": str(model), "dataset": rows, "output_dir": out + "/sft",
     "max_steps": steps, "batch_size": 16, "use_lora": False, "save_steps": 10000, "logging_steps": steps,
     "report_to": "none"})
print("seconds", time.monotonic() - started)
"""
SPIN = "while True: pass"


SETTINGS = {  # name -> environment: torch's default count, the package's pick, the default count waiting passively
    "default": {"HELLO_AGENTS_THREADS": "default"},
    "picked": {},
    "passive": {"HELLO_AGENTS_THREADS": "default", "OMP_WAIT_POLICY": "PASSIVE"},
}


def one_run(steps: int, setting: str) -> float:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env.update(SETTINGS[setting])
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([sys.executable, "-c", CHILD, folder, str(steps)], capture_output=True, text=True,
                              env=env, timeout=3600)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return float(done.stdout.split("seconds")[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--busy", type=int, default=2, help="spinning processes beside the busy runs")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    lines, verdicts = [], []
    for condition in ("idle", "busy"):
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(args.busy if condition == "busy" else 0)]
        try:
            times: dict[str, list[float]] = {name: [] for name in SETTINGS}
            for _ in range(args.rounds):
                for name in SETTINGS:
                    times[name].append(one_run(args.steps, name))
                    print(f"{condition} {name} {times[name][-1]:.1f} s", flush=True)
        finally:
            for spinner in spinners:
                spinner.kill()
            time.sleep(1)
        typical = {name: (min if condition == "idle" else statistics.median)(t) for name, t in times.items()}
        lines.append(f"{condition}: " + ", ".join(f"{name} " + "/".join(f"{x:.1f}" for x in t) + " s" for name, t in times.items()) + "; default/x: "
                     + ", ".join(f"{name} {typical['default'] / m:.2f}x" for name, m in typical.items()))
        ratio = typical["default"] / typical["picked"]
        need = 0.7 if condition == "idle" else 1.5
        verdicts.append(f"{'PASS' if ratio >= need else 'FAIL'} {condition}: picked {ratio:.2f}x default "
                        f"(needed >= {need}x)")
    print(f"tiny-model SFT, {args.steps} steps, each run its own process; busy: {args.busy} spinning processes")
    print("\n".join(lines + verdicts))


if __name__ == "__main__":
    main()
