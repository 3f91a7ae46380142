"""The demo's report: two plots and a short markdown page a person wants to read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hello_agents_rl.outputs import METRICS

SUBSETS = (("accuracy", "all"), ("accuracy_carry", "carry"), ("accuracy_no_carry", "no carry"))
RUNS = (("demonstrator", "demonstrations"), ("sft", "SFT"), ("grpo", "GRPO"))


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The per-step training logs of metrics.jsonl (not the final summary line, not evaluations)."""
    file = Path(path)
    if not file.is_file():
        return []
    entries = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [e for e in entries if "train_runtime" not in e and not any(k.startswith("eval_") for k in e)]


def plot_grpo_curves(metrics: list[dict[str, Any]], path: Path) -> Path:
    """Reward rising while KL stays small: the book's picture of healthy GRPO (section 11.4.3)."""
    keys = (("reward", "mean reward (accuracy)"), ("kl", "KL to the SFT model"))
    return plot_curves(metrics, keys, path, "GRPO training")


def plot_accuracy(results: dict[str, Any], path: Path) -> Path:
    """Held-out accuracy by subset, demonstrations vs SFT vs GRPO."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / len(RUNS)
    for i, (run, label) in enumerate(RUNS):
        values = [results[run][key] * 100 for key, _ in SUBSETS]
        bars = axis.bar([x + (i - 1) * width for x in range(len(SUBSETS))], values, width, label=label)
        axis.bar_label(bars, fmt="%.0f", fontsize=8)
    axis.set_xticks(range(len(SUBSETS)), [name for _, name in SUBSETS])
    axis.set_ylabel("held-out accuracy (%)")
    axis.set_ylim(0, 119)
    axis.legend(loc="upper center", ncol=len(RUNS), fontsize=8, frameon=False)
    axis.set_title("Before (SFT) and after (GRPO), 250 held-out questions")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def markdown_table(results: dict[str, Any]) -> str:
    lines = ["| held-out accuracy (greedy) | all | carry | no carry |", "|---|---:|---:|---:|"]
    for run, label in RUNS:
        lines.append(f"| {label} | " + " | ".join(f"{results[run][key]:.1%}" for key, _ in SUBSETS) + " |")
    return "\n".join(lines)


def pick_samples(sft: list[dict[str, Any]], grpo: list[dict[str, Any]], n: int = 3) -> list[tuple[dict, dict]]:
    """n carry questions GRPO fixed (spread over the range), one it still misses, one without a carry."""
    pairs = list(zip(sft, grpo))
    fixed = [p for p in pairs if p[0].get("carry") and not p[0]["correct"] and p[1]["correct"]]
    missed = [p for p in pairs if not p[1]["correct"]]
    plain = [p for p in pairs if not p[0].get("carry") and p[0]["correct"] and p[1]["correct"]]
    spread = [fixed[i * len(fixed) // n] for i in range(n)] if len(fixed) >= n else fixed
    return spread + missed[len(missed) // 2 :][:1] + plain[len(plain) // 2 :][:1]


MODEL_NAMES = {"tiny": "A ~1M-parameter Qwen3", "smollm2": "SmolLM2-135M-Instruct"}  # the demo's `model` values


def write_report(out: Path, results: dict[str, Any], sft_details: list[dict], grpo_details: list[dict]) -> Path:
    out = Path(out)
    curves = plot_grpo_curves(read_metrics(out / "grpo" / METRICS), out / "grpo_curves.png")
    bars = plot_accuracy(results, out / "accuracy.png")
    gain = (results["grpo"]["accuracy"] - results["sft"]["accuracy"]) * 100
    recipe = results.get("recipe", {})
    model = MODEL_NAMES.get(recipe.get("model", "tiny"), recipe.get("model"))
    lora = ", LoRA" if recipe.get("use_lora") else ""
    lines = [
        "# SFT imitates, GRPO improves: the demo",
        "",
        f"{model}{lora} was trained by SFT on `What is A + B?` from a demonstrator that forgets the carry "
        f"{recipe.get('carry_error', 0.7):.0%} of the time, then trained with GRPO (reward: right final answer, "
        f"KL penalty {recipe.get('kl_coef')}). Seed {results.get('seed')}, wall time {results['wall_time_s']:.0f} s.",
        "",
        markdown_table(results),
        "",
        f"GRPO - SFT: **{gain:+.1f} points** on all 250 held-out questions "
        f"(carry {(results['grpo']['accuracy_carry'] - results['sft']['accuracy_carry']) * 100:+.1f}, "
        f"no carry {(results['grpo']['accuracy_no_carry'] - results['sft']['accuracy_no_carry']) * 100:+.1f}).",
    ]
    k = recipe.get("pass_at_k", 0)
    if k and f"pass_at_{k}_carry" in results["sft"]:
        lines += [
            "",
            "Why RL can do better: sampled at temperature 1, the SFT model finds the right carry answer within "
            f"{k} tries on {results['sft'][f'pass_at_{k}_carry']:.0%} of the carry questions; "
            "GRPO makes that answer its first choice.",
        ]
    lines += ["", f"![accuracy]({bars.name})", "", f"![GRPO reward and KL]({curves.name})", ""]
    lines += ["## Same questions, before and after", ""]
    for before, after in pick_samples(sft_details, grpo_details):
        tag = "carry" if before.get("carry") else "no carry"
        lines += [
            f"**{before['question']}** ({tag}; answer {before['ground_truth']})",
            "",
            f"- SFT {'✓' if before['correct'] else '✗'} `{before['completion']}`",
            f"- GRPO {'✓' if after['correct'] else '✗'} `{after['completion']}`",
            "",
        ]
    lines += [
        "## Files",
        "",
        f"- SFT model: `{results['sft']['model_path']}`; GRPO model: `{results['grpo']['model_path']}` "
        "(plain transformers folders)",
        "- training logs: `sft/metrics.jsonl`, `grpo/metrics.jsonl`; TensorBoard: `tensorboard --logdir "
        f"{out}`",
        "- numbers: `results.json`; hyper-parameters: `results.json` -> `recipe`",
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def plot_curves(metrics: list[dict[str, Any]], keys: tuple[tuple[str, str], ...], path: Path, title: str) -> Path:
    """One panel per (metric key, label) over the logged steps: the pipeline report's training curves."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers and CI
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(keys), 1, figsize=(6, 1.8 * len(keys) + 0.6), sharex=True, squeeze=False)
    for axis, (key, label) in zip(axes[:, 0], keys):
        points = [(e["step"], e[key]) for e in metrics if isinstance(e.get(key), (int, float))]
        if points:
            axis.plot(*zip(*points), marker="o", markersize=3)
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    axes[0, 0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_accuracy_bars(accuracies: dict[str, float], path: Path) -> Path:
    """Held-out accuracy per model (base, SFT, GRPO)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(5, 3.2))
    bars = axis.bar(list(accuracies), [value * 100 for value in accuracies.values()], color="#4c72b0")
    axis.bar_label(bars, fmt="%.1f", fontsize=8)
    axis.set_ylabel("accuracy (%)")
    axis.set_ylim(0, 105)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
