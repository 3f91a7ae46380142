"""The speed table (docs/performance.md's `speed` block), from the GRPO speed benchmarks' own results (issue 22's targets).

    python benchmarks/speed_readme.py --record RUNS.json [RUNS.json ...] --commands CMD [CMD ...]
    python benchmarks/speed_readme.py            # docs/speed.json -> the README block only

RUNS.json: the --json of benchmarks/real_model.py (SmolLM2 workloads) or benchmarks/grpo_throughput.py (the tiny
model), each with the command that produced it. tests/test_readme.py fails when the README block and
docs/speed.json disagree; the roofline tables are in docs/performance.md, written by the benchmarks themselves.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "speed.json"
MODEL = {"4x4": "SmolLM2-135M, 4 prompts x 4 completions x 128 tokens",  # the README's rows, in this order
         "8x8": "SmolLM2-135M, 8 prompts x 8 completions x 128 tokens", "small": "tiny Qwen3, 4 x 4 x 32 tokens, one thread"}
BASELINE = {"trl": "plain TRL", "trl_gc": "plain TRL, gradient checkpointing"}


def speedup_targets() -> dict[str, tuple[str, float]]:
    """workload -> (baseline variant, at least this many times its completions/s): the benchmarks' own TARGETS."""
    import grpo_throughput
    import real_model

    return {workload: (baseline, threshold) for workload, what, baseline, _, threshold
            in real_model.TARGETS + grpo_throughput.TARGETS if what == "speedup"}


def record(files: list[Path], commands: list[str]) -> dict:
    targets = speedup_targets()
    out = {}
    for path, command in zip(files, commands):
        runs = [r for r in json.loads(path.read_text()) if "failed" not in r]
        for workload in dict.fromkeys(r["workload"] for r in runs):
            if workload not in targets:
                continue
            baseline, target = targets[workload]
            by = {v: [r for r in runs if r["workload"] == workload and r["variant"] == v] for v in ("ours", baseline)}
            if not all(by.values()):
                continue
            raw = {v: {k: statistics.median(r[k] for r in rs) for k in ("completions_per_s", "s_per_step", "peak_rss_mb")}
                   for v, rs in by.items()}
            med = {v: {k: round(x, 3) for k, x in figures.items()} for v, figures in raw.items()}
            out[workload] = {"baseline": baseline, "target": target, "rounds": len(by["ours"]), "command": command,
                             "host": by["ours"][0].get("host"),
                             "ratio": round(raw["ours"]["completions_per_s"] / raw[baseline]["completions_per_s"], 2),
                             "rss_ratio": round(raw["ours"]["peak_rss_mb"] / raw[baseline]["peak_rss_mb"], 2),
                             "ours": med["ours"], "base": med[baseline],
                             "per_round": [round(o["completions_per_s"] / b["completions_per_s"], 2)
                                           for o, b in zip(by["ours"], by[baseline])]}
    return out


def render_readme(recorded: dict) -> str:
    from roofline import cpu_line

    lines = ["| workload | ours: completions/s, s/step | baseline | baseline: completions/s, s/step | ratio "
             "(per round) | target | peak RSS ratio | measured on |", "|---|---|---|---|---|---|---|---|"]
    for workload in MODEL:
        if workload not in recorded:
            continue
        r = recorded[workload]
        ratio = r["ratio"]
        verdict = "PASS" if ratio >= r["target"] else "FAIL"
        lines.append(f"| {MODEL[workload]} | {r['ours']['completions_per_s']:.3g}, {r['ours']['s_per_step']:.3g} "
                     f"| {BASELINE[r['baseline']]} | {r['base']['completions_per_s']:.3g}, {r['base']['s_per_step']:.3g} "
                     f"| **{ratio:.2f}x** ({', '.join(f'{x:.2f}' for x in r['per_round'])}) "
                     f"| >= {r['target']:g}x: {verdict} "
                     f"| {r['rss_ratio']:.2f}x | {cpu_line(r.get('host'))} |")
    commands = list(dict.fromkeys(r["command"] for r in recorded.values()))
    return ("\n".join(lines) + "\n\nMedians over rounds, variants alternating, each run its own process. Commands: "
            + "; ".join(f"`{c}`" for c in commands) + ". Roofline tables (each phase against the machine's own "
            "limits, measured in the same run): below.\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", nargs="*", type=Path, default=[])
    parser.add_argument("--commands", nargs="*", default=[])
    args = parser.parse_args()
    if args.record:
        if len(args.commands) != len(args.record):
            parser.error("one --commands entry per --record file")
        RECORD.write_text(json.dumps(record(args.record, args.commands), indent=2) + "\n", encoding="utf-8")
    from readme_blocks import write_from_record

    print(write_from_record("speed", render_readme, RECORD))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
