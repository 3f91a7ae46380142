"""The search's report: the trials table, the best config as YAML `hello-agents-rl train --config` takes,
plots and report.md (docs/search.md)."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import FrozenTrial, TrialState

from hello_agents_rl.config import SearchConfig, TrainConfig
from hello_agents_rl.outputs import atomic_write_json, json_ready


def counted(study: optuna.Study) -> int:
    """Trials that count towards n_trials: finished ones; a killed or interrupted trial does not (it is retried)."""
    return sum(
        t.state in (TrialState.COMPLETE, TrialState.PRUNED) or (t.state == TrialState.FAIL and "fail_reason" in t.user_attrs)
        for t in study.get_trials(deepcopy=False)
    )


def report(study: optuna.Study, cfg: SearchConfig, storage_url: str, status: str) -> dict[str, Any]:
    out = Path(cfg.output_dir)
    trials = study.get_trials(deepcopy=True)
    rows = [trial_row(t, trials) for t in trials]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    result: dict[str, Any] = {
        "status": status,
        "study_name": cfg.study_name,
        "storage": storage_url,
        "output_dir": str(out),
        "objective": cfg.objective,
        "n_trials": counted(study),
        "trials": rows,
    }
    if complete:
        best = study.best_trial
        best_cfg = cfg.trial_config(best.params, best.number).model_copy(update={"output_dir": str(out / "best")})
        write_yaml(out / "best_config.yaml", config_for_yaml(best_cfg), header=_best_header(best, cfg))
        result["best"] = {
            "trial": best.number,
            "value": best.value,
            "params": best.params,
            "output_dir": best.user_attrs.get("output_dir"),
            "config_path": str(out / "best_config.yaml"),
        }
    result["plots"] = plot(study, out)
    write_text(out / "report.md", markdown(result, cfg))
    result["report_path"] = str(out / "report.md")
    atomic_write_json(out / "results.json", result)
    print(format_table(rows), flush=True)
    return result


def trial_row(trial: FrozenTrial, trials: list[FrozenTrial]) -> dict[str, Any]:
    # Optuna's retry callback records, on each retry, the trials it repeats (retry_history)
    retries = [t.number for t in trials if trial.number in t.system_attrs.get("retry_history", [])]
    if trial.state == TrialState.PRUNED:
        note = f"pruned at step {trial.user_attrs.get('pruned_at_step', trial.last_step)}"
        note += f" ({trial.user_attrs['pruned_on']})" if "pruned_on" in trial.user_attrs else ""
    elif trial.state == TrialState.FAIL and "fail_reason" in trial.user_attrs:
        note = trial.user_attrs["fail_reason"]
    elif trial.state == TrialState.FAIL:
        note = "killed or interrupted" + (f"; retried as trial {retries[0]}" if retries else "")
    else:
        note = ""
    if trial.system_attrs.get("failed_trial") is not None:
        note = (note + "; " if note else "") + f"retry of trial {trial.system_attrs['retry_history'][-1]}"
    return {
        "number": trial.number,
        "state": trial.state.name.lower(),
        "params": trial.params,
        "value": trial.value if trial.state == TrialState.COMPLETE else None,  # a pruned trial's is its last report
        "duration_s": round(trial.duration.total_seconds(), 1) if trial.duration else None,
        "note": note,
        "output_dir": trial.user_attrs.get("output_dir"),
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    keys = sorted({key for row in rows for key in row["params"]})
    head = ["trial", *keys, "objective", "duration (s)", "state", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        params = [_fmt(row["params"].get(key)) for key in keys]
        value = "" if row["value"] is None else f"{row['value']:.4f}"
        duration = "" if row["duration_s"] is None else f"{row['duration_s']:.0f}"
        lines.append("| " + " | ".join([str(row["number"]), *params, value, duration, row["state"], row["note"]]) + " |")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return "" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)


def plot(study: optuna.Study, out: Path) -> list[str]:
    """Optuna's own matplotlib plots; importance needs two finished trials that differ, so it may be skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as oplt

    written = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for name, draw in (("history.png", oplt.plot_optimization_history), ("importance.png", oplt.plot_param_importances)):
            try:
                axes = draw(study)
            except (ValueError, RuntimeError) as error:  # e.g. fewer than two complete trials
                print(f"[search] {name} skipped: {error}", flush=True)
                continue
            figure = axes.figure
            figure.set_size_inches(7, 4)
            figure.tight_layout()
            figure.savefig(out / name, dpi=100)
            plt.close(figure)
            written.append(str(out / name))
    return written


def markdown(result: dict[str, Any], cfg: SearchConfig) -> str:
    lines = [
        f"# Search `{cfg.study_name}` ({cfg.sampler}, objective: {cfg.objective}, maximised)",
        "",
        f"Storage: `{result['storage']}` (browse it live: `optuna-dashboard {result['storage']}`). "
        f"Status: {result['status']}, {result['n_trials']} of {cfg.n_trials} trials finished.",
        "",
        format_table(result["trials"]),
        "",
    ]
    if "best" in result:
        best = result["best"]
        lines += [
            f"Best: trial {best['trial']}, {cfg.objective} {best['value']:.4f}, {best['params']}; "
            f"train it again with `hello-agents-rl train --config {best['config_path']}`.",
            "",
        ]
    lines += [f"![{Path(p).stem}]({Path(p).name})" for p in result["plots"]]
    return "\n".join(lines) + "\n"


# ---- configs as YAML that `hello-agents-rl train --config` takes as is ----


def config_for_yaml(cfg: TrainConfig) -> dict[str, Any]:
    """The keys the user (or the trial) set; a callable (a tool, a reward) by its qualified name "module.qualname"."""
    return json_ready(cfg.model_dump(exclude_unset=True))


def write_yaml(path: Path, values: dict[str, Any], header: str = "") -> None:
    write_text(path, header + yaml.safe_dump(values, sort_keys=False, allow_unicode=True))


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # two workers may write it at once: each write is whole


def _best_header(best: FrozenTrial, cfg: SearchConfig) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    return (
        f"# Best trial {best.number} of study {cfg.study_name!r} ({cfg.objective} {best.value:.4f}), {when} UTC.\n"
        f"# Train it again: hello-agents-rl train --config <this file>\n"
    )
