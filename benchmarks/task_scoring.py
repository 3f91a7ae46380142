"""Every installed reasoning-gym task through the tool's own rows and reward: is the SFT target of a row
(`Final Answer: <answer>`) right, is a corrupted answer wrong, and do other spellings of the answer get the
verdict the task's own checker (`score_answer`) gives them?

    PYTHONPATH=src python benchmarks/task_scoring.py [--rows 2] [--timeout 60] [--json out.json]

Uses only `parse`, `load` and `is_correct`, so the same script measures any version of the project. A task
whose rows take longer than --timeout seconds is listed as slow.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
import time
from typing import Any

# tasks that need a parameter to draw anything at all
CONFIGS = {"composite": {"datasets": [{"name": "chain_sum", "weight": 1, "config": {}},
                                      {"name": "spell_backward", "weight": 1, "config": {}}]}}


def spellings(answer: str) -> list[str]:
    """Other ways to write an answer: a value-equal number, a full stop after it (the checker decides)."""
    from fractions import Fraction

    found = [f"{answer}."]
    try:
        value = Fraction(answer.strip())
    except (ValueError, ZeroDivisionError):
        return found
    found.append(f"{answer}.0" if value.denominator == 1 and "." not in answer else f"{value.numerator}/{value.denominator}")
    return found


def corruptions(answer: str, other: str | None) -> list[str]:
    """Answers that should not get full marks: another row's answer, the answer with more after it, reversed."""
    return [c for c in (other, f"{answer} 0", answer[::-1], "0", "no idea") if c is not None and c != answer]


def _checker_and_entry(ref_json: str) -> tuple[Any, dict[str, Any]]:
    """The task's dataset object and the entry a row was made from (where the project keeps drawn entries, that
    one: some tasks draw another entry in another process)."""
    from reasoning_gym.composite import DatasetSpec
    from reasoning_gym.factory import create_dataset

    ref = json.loads(ref_json)
    params = dict(ref["params"])
    if isinstance(params.get("datasets"), list):
        params["datasets"] = [DatasetSpec(**spec) for spec in params["datasets"]]
    checker = create_dataset(ref["task"], seed=ref["seed"], **params)
    try:
        from hello_agents_rl.rewards.task_library import entry
    except ImportError:
        return checker, checker[ref["index"]]
    return checker, entry(ref_json)


def _full_marks(score: Any, entry: dict[str, Any], answer: str) -> bool:
    """The task's own verdict (or the project's rule where it departs): full marks."""
    try:
        return float(score(answer, entry)) >= 1.0
    except Exception:  # noqa: BLE001 - a checker that cannot read an answer gives it nothing
        return False


def _ours(row: dict[str, Any], answer: str) -> bool:
    """The project's verdict on `Final Answer: <answer>` for this row."""
    from hello_agents_rl.rewards import is_correct

    try:
        return bool(is_correct(f"Final Answer: {answer}", row["ground_truth"], row["task_ref"]))
    except Exception:  # noqa: BLE001 - counted as a wrong verdict when the checker says right
        return False


def check_task(name: str, rows: int) -> dict[str, Any]:
    """One task: its verdicts, and where they part from the task's own checker."""
    from hello_agents_rl.data.sources import load
    from hello_agents_rl.rewards import is_correct
    from hello_agents_rl.workflows.actions import parse

    try:  # where the project departs from a task's checker (docs/evaluation.md), its rule is the oracle
        from hello_agents_rl.rewards.correctness import OWN_RULES as own_rules
    except ImportError:
        own_rules = {}
    started = time.perf_counter()
    data = load(parse({"action": "load_dataset", "dataset": f"reasoning_gym:{name}", "split": "test",
                       "dataset_config": {"size": rows, **CONFIGS.get(name, {})}}))
    found: dict[str, Any] = {"task": name, "target_wrong": 0, "corrupt_right": 0, "no_corruption": 0,
                             "no_reference": 0, "disagree": []}
    for i, row in enumerate(data):
        checker, entry = _checker_and_entry(row["task_ref"])
        full_marks = functools.partial(_full_marks, own_rules.get(name, checker.score_answer), entry)
        ours = functools.partial(_ours, row)
        if entry["answer"] is None:  # the checker verifies any valid solution: there must be no target to imitate
            found["no_reference"] += 1
            found["target_wrong"] += bool(row["completion"])  # e.g. "Final Answer: None"
        elif not is_correct(row["completion"][0]["content"], row["ground_truth"], row["task_ref"]):
            found["target_wrong"] += 1
        other = data[(i + 1) % len(data)]["ground_truth"] if len(data) > 1 else None
        rejected = [c for c in corruptions(row["ground_truth"], other) if not full_marks(c)]
        if not rejected:
            found["no_corruption"] += 1
        elif ours(rejected[0]):
            found["corrupt_right"] += 1
        for spelling in spellings(row["ground_truth"]) if entry["answer"] is not None else ():
            if ours(spelling) != full_marks(spelling):
                found["disagree"].append(spelling)
    found["seconds"] = round(time.perf_counter() - started, 2)
    found["right"] = not (found["target_wrong"] or found["corrupt_right"] or found["disagree"] or found["no_corruption"])
    return found


def _too_long(signum: int, frame: Any) -> None:
    raise TimeoutError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--json")
    parser.add_argument("tasks", nargs="*")
    args = parser.parse_args()
    import reasoning_gym.factory

    signal.signal(signal.SIGALRM, _too_long)  # the main thread: an alarm interrupts even a pure-Python loop
    results = []
    for name in args.tasks or sorted(reasoning_gym.factory.DATASETS):
        signal.alarm(args.timeout)
        try:
            result = check_task(name, args.rows)
        except TimeoutError:
            result = {"task": name, "right": False, "error": f"slow: no result within {args.timeout} s"}
        except Exception as error:  # noqa: BLE001 - reported per task
            result = {"task": name, "right": False, "error": f"{type(error).__name__}: {error}"[:300]}
        finally:
            signal.alarm(0)
        results.append(result)
        print(json.dumps(result), file=sys.stderr, flush=True)

    def listed(test: Any) -> str:
        return " ".join(r["task"] for r in results if test(r)) or "none"

    print(f"{sum(r['right'] for r in results)} of {len(results)} tasks scored right (the SFT target gets full marks, "
          "a corrupted answer does not, other spellings get the checker's verdict)")
    print("right:", listed(lambda r: r["right"]))
    print("SFT target not right:", listed(lambda r: r.get("target_wrong")))
    print("a corrupted answer right:", listed(lambda r: r.get("corrupt_right")))
    print("a spelling judged otherwise than by the checker:", listed(lambda r: r.get("disagree")))
    print("no reference answer (the checker verifies a solution; no SFT target):", listed(lambda r: r.get("no_reference")))
    print("no corrupted answer the checker rejects:", listed(lambda r: r.get("no_corruption")))
    print("failed or slow:", listed(lambda r: "error" in r))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
