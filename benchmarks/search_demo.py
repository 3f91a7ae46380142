"""A search that finds something real: GRPO's learning_rate and kl_coef on the demo's task, offline.

    OMP_NUM_THREADS=1 python benchmarks/search_demo.py [--config configs/search_demo.yaml] [--output-dir outputs/search_demo]

1. trains the demo's SFT model (the demo's own recipe and seed 0: the imperfect demonstrator, 600 steps);
2. trains GRPO from it with the demo's hand-picked learning_rate 1e-4 and kl_coef 0.05, everything else as
   the search's base, and scores it like every trial (greedy, the 250 held-out questions);
3. runs `action: search` from configs/search_demo.yaml (TPE, median pruner) over learning_rate and kl_coef;
4. writes the table, the hand-picked accuracy and the wall times into docs/search.md, and Optuna's plots
   into docs/ (search_history.png, search_importance.png).
Exit status 1 if the search's best is below the hand-picked accuracy or the search took over 10 minutes.
A rerun into the same --output-dir continues the search (the study is in <output-dir>/search/study.db).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HAND_PICKED = {"learning_rate": 1e-4, "kl_coef": 0.05}  # demo.Recipe: grpo_learning_rate, kl_coef
MAX_SEARCH_S = 600  # issue 13: the search finds it in 10 minutes on 2 CPU cores (the SFT model is its input)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "search_demo.yaml"))
    parser.add_argument("--output-dir", default="outputs/search_demo")
    parser.add_argument("--no-docs", action="store_true", help="Do not write docs/ (a trial run).")
    args = parser.parse_args()

    from hello_agents.tools import RLTrainingTool

    from hello_agents_rl.models import build_tiny_model
    from hello_agents_rl.workflows.demo import FULL, evaluate, train_sft

    started = time.time()
    out = Path(args.output_dir)
    params = yaml.safe_load(Path(args.config).read_text(encoding="utf-8"))
    params.update(action="search", output_dir=str(out / "search"))

    sft_model = out / "sft" / "model"
    if not (out / "sft" / "results.json").is_file():  # a rerun continues the search from the same SFT model
        print("== 1/3 the demo's SFT model (imperfect demonstrations)", flush=True)
        train_sft(str(build_tiny_model(out / "tiny", seed=0)), out / "sft", FULL, 0)
    params["base"]["model_name"] = str(sft_model)
    sft_s = time.time() - started

    print(f"== 2/3 GRPO with the demo's hand-picked {HAND_PICKED}", flush=True)
    from hello_agents_rl.config import SearchConfig

    search_cfg = SearchConfig(**{k: v for k, v in params.items()})
    hand = out / "hand_picked"
    if not (hand / "results.json").is_file():
        RLTrainingTool().run({**search_cfg.base, **HAND_PICKED, "action": "train", "output_dir": str(hand)})
    hand_eval = RLTrainingTool().run(search_cfg.evaluation_config(str(hand / "model")).model_dump())
    hand_s = time.time() - started - sft_s

    print(f"== 3/3 search: {params['sampler']}, {params['n_trials']} trials over {list(params['space'])}", flush=True)
    search_started = time.time()
    result = RLTrainingTool().run(params)
    search_s = time.time() - search_started
    best = result["best"]
    best_split = evaluate(str(Path(best["output_dir"]) / "model"), FULL, 0)  # by carry, as the demo reports
    hand_split = evaluate(str(hand / "model"), FULL, 0)
    summary = {
        "hand_picked": {**HAND_PICKED, "accuracy": hand_eval["accuracy"], **_carry(hand_split)},
        "best": {**best, **_carry(best_split)},
        "search_beats_or_ties_hand_picked": best["value"] >= hand_eval["accuracy"],
        "seconds": {"sft": round(sft_s, 1), "hand_picked": round(hand_s, 1), "search": round(search_s, 1),
                    "total": round(time.time() - started, 1), "cpu": round(_cpu_seconds(), 1)},
        "trials": result["trials"],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    text = markdown(result, summary, args)
    print(text, flush=True)
    if not args.no_docs:
        write_docs(text, result)
    # exit status 1 when a target is missed: the search lost to the hand-picked settings, or took too long
    raise SystemExit(0 if summary["search_beats_or_ties_hand_picked"] and search_s <= MAX_SEARCH_S else 1)


def _cpu_seconds() -> float:
    """This process's CPU time: with other jobs on the machine, wall time alone overstates the cost."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _carry(evaluation: dict) -> dict:
    return {"accuracy_carry": evaluation["accuracy_carry"], "accuracy_no_carry": evaluation["accuracy_no_carry"]}


def markdown(result: dict, summary: dict, args: argparse.Namespace) -> str:
    from hello_agents_rl.workflows.search_report import format_table

    hand, best, seconds = summary["hand_picked"], summary["best"], summary["seconds"]
    verdict = "at least as good as" if summary["search_beats_or_ties_hand_picked"] else "WORSE than"
    return "\n".join([
        f"`OMP_NUM_THREADS=1 python benchmarks/search_demo.py --output-dir {args.output_dir}`, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, on this project's 2-core machine "
        f"(shared with other jobs). Objective: greedy accuracy on the 250 held-out questions.",
        "",
        format_table(result["trials"]),
        "",
        "| held-out accuracy (greedy, 250 questions) | learning_rate | kl_coef | all | carry | no carry |",
        "|---|---:|---:|---:|---:|---:|",
        f"| the demo's hand-picked GRPO settings | {hand['learning_rate']:g} | {hand['kl_coef']:g} | "
        f"{hand['accuracy']:.1%} | {hand['accuracy_carry']:.1%} | {hand['accuracy_no_carry']:.1%} |",
        f"| the search's best (trial {best['trial']}) | {best['params']['learning_rate']:.3g} | "
        f"{best['params']['kl_coef']:.3g} | **{best['value']:.1%}** | {best['accuracy_carry']:.1%} | "
        f"{best['accuracy_no_carry']:.1%} |",
        "",
        f"The search's best is {verdict} the hand-picked settings. Wall time: SFT {seconds['sft']:.0f} s, "
        f"hand-picked GRPO {seconds['hand_picked']:.0f} s, search {seconds['search']:.0f} s "
        f"({len(result['trials'])} trials), total {seconds['total']:.0f} s ({seconds['cpu']:.0f} CPU seconds).",
    ])


def write_docs(text: str, result: dict) -> None:
    for plot in result["plots"]:
        shutil.copyfile(plot, DOCS / f"search_{Path(plot).name}")
    from readme_blocks import write_block

    write_block("search-demo", text + "\n", DOCS / "search.md")


if __name__ == "__main__":
    main()
