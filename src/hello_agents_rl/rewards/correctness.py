"""Is an answer right? The final number equals the ground truth's (every numeric task), or, for a row whose
`task_ref` names a reasoning-gym entry, that task's own `score_answer` gives full marks to the answer as written:
the library's checker, never a rewrite of it, and no value-equal spelling it does not accept itself. The entry is
the one drawn for the row (rewards/task_library.py), found by (task, parameters, seed, index).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from hello_agents_rl.rewards.checkers import CHECKERS
from hello_agents_rl.rewards.parsing import FINAL_ANSWER_RE
from hello_agents_rl.rewards.task_library import entry, generator

_BOXED_RE = re.compile(r"\\boxed\s*\{")


def _same_text(answer: str | None, entry: dict[str, Any]) -> float:
    return float(answer is not None and answer.strip().lower() == str(entry["answer"]).lower())


# Where a task's own checker gives full marks to answers that are wrong, and what decides instead; each entry is
# listed in docs/evaluation.md, and the test of every task fails once the library's checker no longer needs it.
OWN_RULES: dict[str, Callable[[str | None, dict[str, Any]], float]] = {
    "game_of_life_halting": _same_text,  # it compares bool(answer) with bool("False"): any text gets full marks
}


def task_score(ref: str, answer: str | None) -> float:
    """The task's own checker on `answer` (the text as read, a grid or a list written out): 0..1. A checker that
    cannot read an answer (it raises) gives it nothing, as for an answer it rejects."""
    parsed = json.loads(ref)
    drawn = entry(ref)
    task = drawn.get("metadata", {}).get("source_dataset", parsed["task"])  # a composite's row: its sub-task
    if task in OWN_RULES:
        return OWN_RULES[task](answer, drawn)
    checker = generator(parsed["task"], json.dumps(parsed["params"], sort_keys=True), parsed["seed"])
    try:
        return float(checker.score_answer(answer, drawn))
    except Exception:  # noqa: BLE001 - the answer is the model's, whatever it is; the test of every task checks
        return 0.0     # that each checker reads its own answers


_WRAPPERS = ("**", "__", "`", "$")  # markdown emphasis, code or maths around the whole answer
_FENCE_RE = re.compile(r"\A```[\w+-]*[ \t]*\n(?P<body>.*)\n```\Z", re.DOTALL)


def unwrapped(answer: str) -> str:
    """The answer without a markdown wrapper around all of it (bold, code, a code fence, maths)."""
    while True:
        fence = _FENCE_RE.match(answer)
        wrapper = next((w for w in _WRAPPERS if len(answer) > 2 * len(w) and answer.startswith(w)
                        and answer.endswith(w)), None)
        if fence:
            answer = fence.group("body").strip()
        elif wrapper:
            answer = answer[len(wrapper):-len(wrapper)].strip()
        else:
            return answer


def readings(answer: str | None) -> list[str | None]:
    """What the checker is shown: the answer as written, then without its markdown wrapper when it has one --
    the one reading beyond the text itself (docs/evaluation.md); a grid of `*` keeps its own reading first."""
    if answer is None:
        return [None]
    bare = unwrapped(answer)
    return [answer] if bare == answer or not bare else [answer, bare]


def text_answer(completion: str) -> str | None:
    """The answer a task's checker is given: all that follows the last "Final Answer:" (every line of it: a grid,
    a move list, a sentence), else the content of the last \\boxed{...}, else the last non-empty line; stripped of
    the white space around it."""
    text = str(completion or "").replace("\r\n", "\n")
    finals = list(FINAL_ANSWER_RE.finditer(text))
    if finals:
        answer = text[finals[-1].end():]
    elif (boxed := _last_boxed(text)) is not None:
        answer = boxed
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        answer = lines[-1] if lines else ""
    return answer.strip() or None


def _last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...}, braces inside it balanced; None without one."""
    starts = list(_BOXED_RE.finditer(text))
    if not starts:
        return None
    depth, begin = 1, starts[-1].end()
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i]
    return text[begin:]


def is_correct(completion: str, ground_truth: object, task_ref: str | None = None, checker: str = "number") -> bool:
    """Right: the task's own checker gives full marks to the answer as written (partial credit would break the
    reward's bound), or, with no task, the run's answer checker (rewards/checkers.py: by default the final number
    equals the ground truth's). An unreadable answer or truth is never right."""
    if task_ref:
        return any(task_score(task_ref, answer) >= 1.0 for answer in readings(text_answer(completion)))
    return CHECKERS[checker](completion, ground_truth)
