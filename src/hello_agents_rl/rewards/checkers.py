"""The answer checkers (`answer_checker`): which answers equal the ground truth. One table; the reward and
evaluation read the same entry.

- `number` (the default): the final number, compared exactly as a rational (rewards.parsing.same_number).
- `math_verify`: Hugging Face's math-verify, what TRL's `accuracy_reward` and open-r1 use: LaTeX and plain
  expressions (`\\frac{1}{2}` = 0.5, `\\boxed{(x+1)^2}` = x^2+2x+1, intervals, sets, percentages). An extra:
  pip install 'hello-agents-rl[math]'.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.util import find_spec

from hello_agents_rl import bounded
from hello_agents_rl.errors import ConfigError
from hello_agents_rl.rewards.parsing import MARKER_RE, same_number

MATH_INSTALL = "pip install 'hello-agents-rl[math]'"
PARSE_TIMEOUT_S, VERIFY_TIMEOUT_S = 5, 5  # math-verify's own alarms, as TRL sets them (main thread only)
CHECK_SECONDS = 2 * PARSE_TIMEOUT_S + VERIFY_TIMEOUT_S + 1  # the hard bound: both parses and the verify, and a margin
_MARKERS = ("\\boxed", "$", "\\(", "\\[")
_log = logging.getLogger(__name__)


def math_verify_problem() -> str | None:
    """Why math_verify cannot be used here (None: it can)."""
    if find_spec("math_verify") is None:
        return f"`answer_checker`: math_verify needs the math-verify package; {MATH_INSTALL}"
    return None


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
    """math-verify's verdict: the completion's answer (LaTeX or an expression) equals the ground truth's. Runs in a
    worker process with a hard bound (hello_agents_rl/bounded.py), in any thread: an answer that would not end
    (`\\boxed{9^{9^{9^{9}}}}`) holds the GIL in big-integer work, past math-verify's own alarms, and would stall
    every other caller. Past the bound it is wrong, as a math-verify time-out is, and so is an answer whose check
    crashes a fresh worker."""
    if problem := math_verify_problem():
        raise ConfigError(problem)
    try:
        return bool(bounded.call(f"{__name__}:_math_verify_here", str(completion or ""), gold_text(ground_truth),
                                 bound=CHECK_SECONDS, preload=("math_verify",)))
    except bounded.Overran:
        _log.warning("math_verify: an answer took longer than %g s to check; scored as wrong (%.60r...)",
                     CHECK_SECONDS, str(completion))
        return False
    except bounded.WorkerDied as died:  # a fresh checker crashed on this answer: wrong, as a time-out is
        _log.warning("math_verify: checking an answer ended its process (%s); scored as wrong (%.60r...)", died,
                     str(completion))
        return False


def _math_verify_here(completion: str, gold_text: str) -> bool:
    """In the worker's main thread, where math-verify's own alarms work."""
    import math_verify

    for name in ("math_verify.parser", "math_verify.grader"):  # it logs each time-out's whole input
        logging.getLogger(name).setLevel(logging.CRITICAL)
    gold = math_verify.parse(gold_text, parsing_timeout=PARSE_TIMEOUT_S)
    if not gold:
        return False  # an unreadable truth never passes (as the number checker)
    answer = math_verify.parse(completion, parsing_timeout=PARSE_TIMEOUT_S)
    return bool(answer) and bool(math_verify.verify(gold, answer, timeout_seconds=VERIFY_TIMEOUT_S))


CHECKERS: dict[str, Callable[[str, object], bool]] = {"number": same_number, "math_verify": math_verify_equal}
