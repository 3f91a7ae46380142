"""The answer checkers (`answer_checker`): which answers equal the ground truth. One table; the reward and
evaluation read the same entry.

- `number` (the default): the final number, compared exactly as a rational (rewards.parsing.same_number).
- `math_verify`: Hugging Face's math-verify, what TRL's `accuracy_reward` and open-r1 use: LaTeX and plain
  expressions (`\\frac{1}{2}` = 0.5, `\\boxed{(x+1)^2}` = x^2+2x+1, intervals, sets, percentages). An extra:
  pip install 'hello-agents-rl[math]'.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.rewards.parsing import MARKER_RE, same_number

MATH_INSTALL = "pip install 'hello-agents-rl[math]'"
PARSE_TIMEOUT_S, VERIFY_TIMEOUT_S = 5, 5  # math-verify's own alarms, as TRL sets them (main thread only)
_MARKERS = ("\\boxed", "$", "\\(", "\\[")


def math_verify_problem() -> str | None:
    """Why math_verify cannot be used here (None: it can)."""
    if find_spec("math_verify") is None:
        return f"`answer_checker`: math_verify needs the math-verify package; {MATH_INSTALL}"
    return None


def _library() -> Any:
    if problem := math_verify_problem():
        raise ConfigError(problem)
    import math_verify

    return math_verify


def _timeouts() -> tuple[int | None, int | None]:
    """math-verify times out with signal.alarm, which works in the main thread only: elsewhere none (as TRL)."""
    if threading.current_thread() is threading.main_thread():
        return PARSE_TIMEOUT_S, VERIFY_TIMEOUT_S
    for name in ("math_verify.parser", "math_verify.grader"):  # its "timeout is disabled" warning, every call
        logging.getLogger(name).setLevel(logging.ERROR)
    return None, None


def gold_text(ground_truth: object) -> str:
    """The ground truth as math-verify reads it: LaTeX as given; anything else (a number, `(1, 3]`, `x^2+1`, the
    last line of a worked answer after `####` or `Final Answer:`) read as one math expression."""
    text = str(ground_truth).strip()
    if any(marker in text for marker in _MARKERS):
        return text
    markers = list(MARKER_RE.finditer(text))
    if markers:  # a worked answer: what follows its last marker, on that line
        text = (text[markers[-1].end():].strip().splitlines() or [""])[0]
    return f"${text.strip(' .')}$"


def math_verify_equal(completion: str, ground_truth: object) -> bool:
    """math-verify's verdict: the completion's answer (LaTeX or an expression) equals the ground truth's."""
    library = _library()
    parse_timeout, verify_timeout = _timeouts()
    gold = library.parse(gold_text(ground_truth), parsing_timeout=parse_timeout)
    if not gold:
        return False  # an unreadable truth never passes (as the number checker)
    answer = library.parse(str(completion or ""), parsing_timeout=parse_timeout)
    return bool(answer) and bool(library.verify(gold, answer, timeout_seconds=verify_timeout))


CHECKERS: dict[str, Callable[[str, object], bool]] = {"number": same_number, "math_verify": math_verify_equal}
