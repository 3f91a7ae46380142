"""Which learning rate LoRA GRPO wants on a real model, measured with the `search` action (issue 19, item 5).

    python benchmarks/lora_lr_search.py [--sft DIR] [--steps 20] [--rates 1e-5 3e-5 1e-4 3e-4]
                                        [--out outputs/lora_lr_search] [--doc docs/real_model.md] [--threads 2]

The start is the smollm2 demo's SFT model (SmolLM2-135M-Instruct with LoRA, taught by a demonstrator that forgets
the carry; `--sft` reuses one, e.g. `outputs/demo_real/sft/model`, else this script trains it as the demo does).
One grid search over `learning_rate`, every other key the demo's GRPO recipe, the objective held-out greedy accuracy
on the 250 test questions. A rate "learns" when GRPO gains >= 10 points over SFT and its final KL is >= 0.001 (the
doctor's "not learning" line); it "collapses" when the no-carry questions (which SFT gets right) drop by > 5 points
or the doctor reports a falling reward. PASS when the tool's LoRA default learning rate learns without collapse.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from real_model_common import smollm2_gguf, write_block

ROOT = Path(__file__).resolve().parents[1]
MARKERS = ("<!-- lora-lr:begin (benchmarks/lora_lr_search.py writes this block) -->", "<!-- lora-lr:end -->")
LEARNS_POINTS, MIN_KL, MAX_NO_CARRY_DROP = 10.0, 1e-3, 5.0
FALLING = ("reward_collapse", "reward_slide")


def carry_split(details: list[dict[str, Any]]) -> dict[str, float]:
    def mean(rows: list[dict[str, Any]]) -> float:
        return sum(r["correct"] for r in rows) / max(len(rows), 1)

    return {"all": mean(details), "carry": mean([r for r in details if r["carry"]]),
            "no_carry": mean([r for r in details if not r["carry"]])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sft", default="", help="an SFT model folder to start from (default: train one)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rates", type=float, nargs="+", default=[1e-5, 3e-5, 1e-4, 3e-4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="outputs/lora_lr_search")
    parser.add_argument("--doc", default="", help="write the table into this doc ('' = nowhere)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from hello_agents_rl.config import TrainConfig
    from hello_agents_rl.interfaces.tool import RLTrainingTool
    from hello_agents_rl.workflows import demo

    started, out, tool, recipe = time.time(), Path(args.out), RLTrainingTool(), demo.SMOLLM2
    sft_model = args.sft or demo.train_sft(smollm2_gguf(), out / "sft", recipe, args.seed)["model_path"]
    evaluation = {"dataset": "arithmetic", "split": "test", "max_samples": None, "batch_size": 125,
                  "max_new_tokens": recipe.max_new_tokens, "return_details": True}
    sft_eval = tool.run({"action": "evaluate", "model_path": sft_model, **evaluation})
    base = {
        "algorithm": "grpo", "model_name": sft_model, "dataset": "arithmetic", "use_lora": True,
        "max_steps": args.steps, "batch_size": recipe.grpo_batch_size, "num_generations": recipe.num_generations,
        "kl_coef": recipe.kl_coef, "temperature": recipe.temperature, "scale_rewards": recipe.scale_rewards,
        "lr_scheduler_type": recipe.grpo_lr_scheduler, "warmup_ratio": recipe.grpo_warmup_ratio,
        "max_new_tokens": recipe.max_new_tokens, "reward_type": "accuracy", "seed": args.seed,
        "save_steps": 10_000, "logging_steps": 5, "report_to": "none",
    }
    search = tool.run({"action": "search", "output_dir": str(out / "search"), "sampler": "grid",
                       "n_trials": len(args.rates), "pruner": "none", "objective": "accuracy", "base": base,
                       "space": {"learning_rate": args.rates}, "evaluation": evaluation, "seed": args.seed})
    if search.get("status") not in (None, "completed"):
        sys.exit(f"search failed: {json.dumps(search, default=str)[:2000]}")

    sft = carry_split(sft_eval["details"])
    rows = []
    for folder in sorted((out / "search").glob("trial-*")):
        train = json.loads((folder / "results.json").read_text())
        details = json.loads((folder / "evaluation.json").read_text())["details"]
        acc = carry_split(details)
        findings = train.get("diagnostics", [])
        gain, no_carry = 100 * (acc["all"] - sft["all"]), 100 * (acc["no_carry"] - sft["no_carry"])
        learns = gain >= LEARNS_POINTS and train["final_kl"] >= MIN_KL
        collapses = no_carry < -MAX_NO_CARRY_DROP or any(rule in f for f in findings for rule in FALLING)
        rows.append({"learning_rate": train["config"]["learning_rate"], **acc, "gain": gain,
                     "no_carry_change": no_carry, "final_kl": train["final_kl"], "mean_kl": train["mean_kl"],
                     "findings": findings, "learns": learns, "collapses": collapses})
    rows.sort(key=lambda r: r["learning_rate"])
    default = TrainConfig(algorithm="grpo", model_name=sft_model, use_lora=True).learning_rate
    figures = {"sft": sft, "rows": rows, "lora_default": default, "steps": args.steps,
               "wall_s": round(time.time() - started, 1), "cpu_s": round(sum(os.times()[:4]), 1)}
    (out / "figures.json").write_text(json.dumps(figures, indent=2))
    text = render(figures, args)
    print(text)
    at_default = [r for r in rows if abs(r["learning_rate"] - default) <= 1e-12]
    ok = bool(at_default) and at_default[0]["learns"] and not at_default[0]["collapses"]
    print(f"{'PASS' if ok else 'FAIL'} the LoRA default learning_rate {default:g} learns without collapse"
          + ("" if at_default else " (not in --rates)"))
    if args.doc:
        write_block(Path(args.doc), text, MARKERS)
    return 0 if ok else 1


def render(f: dict[str, Any], args: argparse.Namespace) -> str:
    pct = "{:.1%}".format
    rates = " ".join(f"{r:g}" for r in args.rates)
    lines = [
        f"`python benchmarks/lora_lr_search.py --steps {f['steps']} --rates {rates} --doc docs/real_model.md` "
        f"({f['wall_s'] / 60:.0f} min wall, {f['cpu_s'] / 60:.0f} min CPU, 2 cores): GRPO with LoRA from the "
        f"smollm2 demo's SFT model ({pct(f['sft']['all'])} held-out; carry {pct(f['sft']['carry'])}, no carry "
        f"{pct(f['sft']['no_carry'])}), {f['steps']} steps, one grid search:",
        "",
        "| learning_rate | held-out | carry | no carry | GRPO - SFT | final KL | learns | collapses |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in f["rows"]:
        lines.append(f"| {r['learning_rate']:g} | {pct(r['all'])} | {pct(r['carry'])} | {pct(r['no_carry'])} | "
                     f"{r['gain']:+.1f} | {r['final_kl']:.2g} | {'yes' if r['learns'] else 'no'} | "
                     f"{'yes' if r['collapses'] else 'no'} |")
    lines += ["", f"The tool's LoRA default for GRPO: {f['lora_default']:g}."]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
