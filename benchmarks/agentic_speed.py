"""A tool-use GRPO run on FastGRPOTrainer against plain TRL, on the same work (issue 11, point 6).

    python benchmarks/agentic_speed.py --model outputs/demo_tools/sft/model [--steps 10] [--threads 1]

Each arm runs in a fresh process: the tool demo's GRPO stage (calculator, the same prompts, seed, steps and
settings) with HELLO_AGENTS_FAST=1 (the fast sampler, which runs every turn of TRL's tool loop) and with
HELLO_AGENTS_FAST=0 (TRL's own code throughout). It prints each arm's training time (wall) and the process's
CPU seconds (the fair measure on a machine shared with other jobs), the rollout path it reports, and the
ratios. Target: the fast arm is not slower.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ARM = """
import json, sys
from hello_agents_rl.workflows import actions
from hello_agents_rl.workflows.demo_tool_use import Recipe, grpo_params
from pathlib import Path
recipe = Recipe(grpo_steps=int(sys.argv[3]))
result = actions.run(grpo_params(sys.argv[1], Path(sys.argv[2]), recipe, seed=0))
print("RESULT " + json.dumps({"train_runtime_s": result["train_runtime_s"], "rollouts": result["tools"]["rollouts"],
                               "reward": result["average_reward"]}))
"""


def run_arm(model: str, out: Path, steps: int, fast: bool) -> dict:
    import resource

    env = {**os.environ, "HELLO_AGENTS_FAST": "1" if fast else "0"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", ARM, model, str(out), str(steps)], env=env, capture_output=True,
                          text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next(out for out in done.stdout.splitlines() if out.startswith("RESULT "))
    # CPU seconds of the whole process: on a shared machine the wall clock depends on the neighbours
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {**json.loads(line.removeprefix("RESULT ")), "process_cpu_s": round(cpu, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="an SFT'd tool model, e.g. the tool demo's sft/model")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output-dir", default="outputs/agentic_speed")
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    root = Path(args.output_dir)
    arms = {name: run_arm(args.model, root / name, args.steps, fast) for name, fast in (("fast", True), ("trl", False))}
    for name, arm in arms.items():
        print(f"{name:>5}: {arm['train_runtime_s']:7.1f} s wall, {arm['process_cpu_s']:7.1f} s CPU (process) for "
              f"{args.steps} steps, mean reward {arm['reward']:.3f}, rollouts: {arm['rollouts']}")
    ratio = arms["trl"]["process_cpu_s"] / arms["fast"]["process_cpu_s"]
    wall = arms["trl"]["train_runtime_s"] / arms["fast"]["train_runtime_s"]
    verdict = "PASS" if ratio >= 1.0 else "FAIL"
    print(f"plain TRL / fast: {ratio:.2f}x CPU, {wall:.2f}x wall "
          f"({verdict}: the tool-use run may not be slower than plain TRL)")
    (root / "summary.json").write_text(json.dumps({"arms": arms, "speedup": ratio}, indent=2))
    return 0 if ratio >= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
