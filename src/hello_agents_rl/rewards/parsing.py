"""Answer parsing: the model's final number, the ground truth's, and what the reports read (format, steps)."""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal
from fractions import Fraction

# A sign only counts when it is not a binary operator ("10 - 3" is not -3).
_NUM = (
    r"(?:(?<![\w)])(?P<sign>[-+\u2212]))?\$?"
    r"(?P<mag>(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)"
    r"(?:/(?P<den>[0-9]+)(?![0-9]|\.[0-9]|/))?"
)
_NUM_RE = re.compile(_NUM)
_NUM_FULL_RE = re.compile(r"\s*" + _NUM + r"\s*%?\s*\.?\s*")
MARKER_RE = re.compile(
    r"final\s*answer\s*\**\s*[:\uff1a]"
    r"|#{4}(?=[ \t]*[-+\u2212$]?\.?[0-9])"  # GSM8K "#### 72", not a markdown heading
    r"|\\boxed\s*\{"
    r"|(?:the\s+)?answer\s+is\b"
    r"|answer\s*\**\s*[:\uff1a]",
    re.IGNORECASE,
)
# "Final Answer: 48 + 24 = 72" -> skip the expression, keep the result.
_EXPR_EQ_RE = re.compile(r"(?:[0-9\s.,+\-*/\u00d7\u00f7x()$]+=\s*)+")
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]*?)\s*\}\s*\{\s*([^{}]*?)\s*\}")
_JUNK_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffd]")


def _to_fraction(m: re.Match[str]) -> Fraction | None:
    try:
        value = Fraction(m.group("mag").replace(",", ""))
        if m.group("den") is not None:
            value /= int(m.group("den"))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None  # x/0, or digit strings beyond int()'s size limit
    return -value if m.group("sign") in ("-", "\u2212") else value


def _clean(text: object) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return ""
    text = _JUNK_RE.sub(" ", text.replace("\r", "\n"))
    return _FRAC_RE.sub(r"\1/\2", text)


def parse_number(text: str) -> Fraction | None:
    """Parse one whole number token ("1,234.50", "$18", "3/4", "50%" -> 50); else None."""
    m = _NUM_FULL_RE.fullmatch(_clean(text))
    return _to_fraction(m) if m else None


def _numbers(text: str) -> list[Fraction]:
    return [v for v in map(_to_fraction, _NUM_RE.finditer(text)) if v is not None]


def numbers_in(text: str) -> list[Fraction]:
    """Every number in a text, in order ("1,234", "$5", "3/4", "-2" as a sign, not "10 - 3")."""
    return _numbers(_clean(text))


def _number_after(segment: str) -> Fraction | None:
    # Only the first non-empty line after a marker: a marker with no number there is not an answer.
    line = segment.lstrip(" \t\n*").split("\n", 1)[0]
    expr = _EXPR_EQ_RE.match(line)
    if expr and re.search(r"[0-9]", expr.group()) and (after := _numbers(line[expr.end():])):
        return after[0]
    return next(iter(_numbers(line)), None)


def extract_answer(completion: str) -> Fraction | None:
    """Return the model's final numeric answer, or None.

    Which number wins: the first number after the LAST explicit marker
    ("Final Answer:", "####", "\\boxed{", "The answer is", "answer:"), because models
    restate intermediate results and change their mind before concluding. If that
    marker line is an expression ("Final Answer: 48 + 24 = 72") the result after
    the last "=" wins. A marker with no number on its first non-empty line after it
    falls back to the previous marker; with no usable marker the LAST number in the text wins (the GSM8K
    convention). Control characters and U+FFFD are treated as spaces. Never raises.
    """
    text = _clean(completion)
    marked = _marked_answer(text)
    if marked is not None:
        return marked
    numbers_ = _numbers(text)
    return numbers_[-1] if numbers_ else None


def _marked_answer(text: str) -> Fraction | None:
    """The number after the last marker that has one (see extract_answer), or None; `text` is cleaned."""
    markers = list(MARKER_RE.finditer(text))
    ends = [m.start() for m in markers[1:]] + [len(text)]  # a segment stops at the next marker
    for marker, end in reversed(list(zip(markers, ends))):
        value = _number_after(text[marker.end():end])
        if value is not None:
            return value
    return None


def parse_ground_truth(ground_truth: object) -> Fraction | None:
    """int, float, Fraction, Decimal, a number alone, or a worked answer ending in a marker the reward reads
    ("... #### 72", "... Final Answer: 72", "\\boxed{72}", "the answer is 72"). Unlike a completion, a worked
    answer without a marker is not read: its last number is too often not the answer meant."""
    if isinstance(ground_truth, bool):
        return None  # True is an int, but never a meant answer
    if isinstance(ground_truth, numbers.Rational):
        return Fraction(ground_truth)
    if isinstance(ground_truth, (float, Decimal, numbers.Real)):
        value = float(ground_truth)
        # repr keeps 0.1 == Fraction(1, 10) instead of the binary expansion.
        return Fraction(repr(value)) if math.isfinite(value) else None
    if isinstance(ground_truth, (str, bytes)):
        text = _clean(ground_truth)
        alone = parse_number(text)
        return alone if alone is not None else _marked_answer(text)
    return None


def same_number(completion: str, ground_truth: object) -> bool:
    """The completion's final number equals the ground truth's (exact rational comparison)."""
    predicted, truth = extract_answer(completion), parse_ground_truth(ground_truth)
    return predicted is not None and truth is not None and predicted == truth


FINAL_ANSWER_RE = re.compile(r"final\s*answer\s*\**\s*[:\uff1a]", re.IGNORECASE)
ANSWER_FORMAT = "Final Answer: <number>"  # what every prompt of this project asks the model to end with


def follows_format(completion: str, text_answer: bool = False) -> bool:
    """The answer is stated as the prompts ask: a last 'Final Answer:' followed by a number on its line, or,
    for a task whose answer is text (`text_answer`: a reasoning-gym row), by any answer at all.

    GSM8K's '####', '\\boxed{}' or a bare last number still let the reward read an answer, but they are not
    the format asked for: the format rate, the doctor's format-drop rule and the reports use this.
    """
    text = _clean(completion)
    markers = list(FINAL_ANSWER_RE.finditer(text))
    if not markers:
        return False
    after = text[markers[-1].end():]
    return bool(after.strip(" \t\n*`")) if text_answer else _number_after(after) is not None


# lhs starts at a digit (capped: linear time on degenerate output); the rhs is a lookahead
# so chains "a + b = c + d = e" count twice.
_STEP_RE = re.compile(
    r"(?P<lhs>[0-9](?:[0-9 \t+\-*/\u00d7\u00f7x()$%^]|[.,](?=[0-9])){0,80})"
    r"=(?=[ \t]*(?P<rhs>[-\u2212]?\$?[0-9](?:[0-9]|[.,](?=[0-9]))*))"
)


def count_steps(completion: str) -> int:
    """Distinct computations "a <op> b = c" (digits on both sides of "=").

    Counts distinct normalised computations rather than lines, so restating the same
    step (or padding with newlines) earns nothing extra.
    """
    return len({re.sub(r"\s", "", f"{lhs}={rhs}") for lhs, rhs in arithmetic_steps(completion)})


def arithmetic_steps(completion: str) -> list[tuple[str, str]]:
    """Every computation "a <op> b = c" as (lhs, rhs) text, in order (restated ones included)."""
    steps = []
    for m in _STEP_RE.finditer(_clean(completion)):
        lhs = m.group("lhs").strip()
        if re.search(r"[+\-*/\u00d7\u00f7x^]", lhs):
            steps.append((lhs, m.group("rhs")))
    return steps
