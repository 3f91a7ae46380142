"""The book's whole flow as one action: evaluate the base, SFT, evaluate, GRPO from SFT, evaluate, report."""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path
from typing import Any

from hello_agents_rl.config import EvaluateConfig, PipelineConfig
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.evaluation.metrics import comparison_markdown
from hello_agents_rl.evaluation.run import run as evaluate
from hello_agents_rl.outputs import atomic_write_json, plan_output_dir
from hello_agents_rl.trainers.preflight import check_vllm_device
from hello_agents_rl.trainers.run import train

RESULTS_FILE = "training_results.json"
CURVES = (("reward", "reward"), ("kl", "KL"), ("loss", "loss"), ("learning_rate", "learning rate"))


def run_pipeline(cfg: PipelineConfig) -> dict[str, Any]:
    started = time.time()
    root = Path(cfg.output_dir)
    evaluations: dict[str, dict[str, Any]] = {}

    def evaluate_stage(name: str, model_path: str) -> None:
        print(f"== evaluate {name}: {model_path}", flush=True)
        eval_cfg: EvaluateConfig = cfg.evaluation_config(model_path).model_copy(update={"return_details": True})
        evaluations[name] = evaluate(eval_cfg)

    for stage in (cfg.stage("sft"), cfg.stage("grpo", model_name=cfg.model_name)):  # refuse now, not after an hour
        check_vllm_device(stage)
        plan_output_dir(stage.output_dir, stage.resume_from_checkpoint, stage.overwrite_output_dir)
    if (root / RESULTS_FILE).is_file() and not cfg.overwrite_output_dir:
        raise ConfigError(f"`output_dir`: {root} holds a finished pipeline ({RESULTS_FILE}); choose another "
                          "output_dir or set overwrite_output_dir: true")
    evaluate_stage("base", cfg.model_name)
    print("== SFT", flush=True)
    sft = train(cfg.stage("sft"))
    evaluate_stage("sft", sft["model_path"])
    print("== GRPO from the SFT model", flush=True)
    grpo = train(cfg.stage("grpo", model_name=sft["output_dir"]))
    evaluate_stage("grpo", grpo["model_path"])

    table = [{"model": name, **{k: v for k, v in result.items() if k != "details"}} for name, result in evaluations.items()]
    results = {
        "status": "completed",
        "output_dir": str(root),
        "comparison": table,
        "sft": sft,
        "grpo": grpo,
        "diagnostics": sft["diagnostics"] + grpo["diagnostics"],
        "wall_time_s": round(time.time() - started, 1),
    }
    results["report"] = str(write_report(root, results, evaluations))
    atomic_write_json(root / RESULTS_FILE, results)
    return results


def write_report(root: Path, results: dict[str, Any], evaluations: dict[str, dict[str, Any]]) -> Path:
    """report.md and a self-contained report.html (plots embedded) beside training_results.json."""
    from hello_agents_rl.workflows.report import plot_accuracy_bars, plot_curves, read_metrics

    plots = {
        "sft_curves.png": plot_curves(read_metrics(Path(results["sft"]["output_dir"]) / "metrics.jsonl"),
                                      CURVES[2:], root / "sft_curves.png", "SFT"),
        "grpo_curves.png": plot_curves(read_metrics(Path(results["grpo"]["output_dir"]) / "metrics.jsonl"),
                                       CURVES, root / "grpo_curves.png", "GRPO"),
        "accuracy.png": plot_accuracy_bars({name: r["accuracy"] for name, r in evaluations.items()}, root / "accuracy.png"),
    }
    findings = results["diagnostics"] or ["none: the run looked healthy"]
    samples = _samples(evaluations)
    markdown = "\n".join([
        "# SFT -> GRPO pipeline report",
        "",
        comparison_markdown(results["comparison"]),  # with the tool columns when evaluated with tools
        *[f"![{name}]({name})" for name in plots],
        "",
        "## Training doctor",
        *[f"- {f}" for f in findings],
        "",
        "## Sample answers (same questions)",
        *samples,
    ])
    (root / "report.md").write_text(markdown + "\n", encoding="utf-8")
    (root / "report.html").write_text(_html(markdown, plots), encoding="utf-8")
    return root / "report.md"


def _samples(evaluations: dict[str, dict[str, Any]], n: int = 3) -> list[str]:
    names = list(evaluations)
    details = [evaluations[name]["details"] for name in names]
    lines = []
    for i in range(min(n, len(details[0]))):
        lines.append(f"**Q:** {details[0][i]['question']} (answer {details[0][i]['ground_truth']})\n")
        for name, rows in zip(names, details):
            mark = "right" if rows[i]["correct"] else "wrong"
            lines.append(f"- {name} ({mark}): `{rows[i]['completion'][:300]}`")  # with tools: after the last call
        lines.append("")
    return lines


def _html(markdown: str, plots: dict[str, Path]) -> str:
    """Markdown shown as preformatted text plus the plots inlined: one file that opens anywhere."""
    images = "".join(
        f'<h3>{html.escape(name)}</h3><img alt="{html.escape(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(path.read_bytes()).decode()}"/>'
        for name, path in plots.items()
    )
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>hello-agents-rl report</title></head>"
            f"<body><pre>{html.escape(markdown)}</pre>{images}</body></html>\n")
