"""Reward functions for GRPO on math word problems.

Rewards are pure functions ``score(completion, ground_truth, **params) -> float``.
``build_reward`` validates a user config into a :class:`Reward`; ``to_trl_reward``
adapts one to TRL's ``GRPOTrainer`` reward-function calling convention.
"""

from __future__ import annotations

import difflib
import inspect
import math
import numbers
import re
import statistics
import traceback
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable, NoReturn

from hello_agents_rl.errors import ConfigError

# --- parsing -----------------------------------------------------------------

# A sign only counts when it is not a binary operator ("10 - 3" is not -3).
_NUM = (
    r"(?:(?<![\w)])(?P<sign>[-+\u2212]))?\$?"
    r"(?P<mag>(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+)"
    r"(?:/(?P<den>[0-9]+)(?![0-9]|\.[0-9]|/))?"
)
_NUM_RE = re.compile(_NUM)
_NUM_FULL_RE = re.compile(r"\s*" + _NUM + r"\s*%?\s*\.?\s*")
_MARKER_RE = re.compile(
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
    markers = list(_MARKER_RE.finditer(text))
    ends = [m.start() for m in markers[1:]] + [len(text)]  # a segment stops at the next marker
    for marker, end in reversed(list(zip(markers, ends))):
        value = _number_after(text[marker.end():end])
        if value is not None:
            return value
    numbers_ = _numbers(text)
    return numbers_[-1] if numbers_ else None


def parse_ground_truth(ground_truth: object) -> Fraction | None:
    """int, float, Fraction, Decimal, numeric str, or a GSM8K answer "... #### N"."""
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
        return parse_number(text.rsplit("####", 1)[-1])
    return None


def is_correct(completion: str, ground_truth: object) -> bool:
    predicted, truth = extract_answer(completion), parse_ground_truth(ground_truth)
    return predicted is not None and truth is not None and predicted == truth


_FINAL_ANSWER_RE = re.compile(r"final\s*answer\s*\**\s*[:\uff1a]", re.IGNORECASE)
ANSWER_FORMAT = "Final Answer: <number>"  # what every prompt of this project asks the model to end with


def follows_format(completion: str) -> bool:
    """The answer is stated as the prompts ask: a last 'Final Answer:' followed by a number on its line.

    GSM8K's '####', '\\boxed{}' or a bare last number still let the reward read an answer, but they are not
    the format asked for: the format rate, the doctor's format-drop rule and the reports use this.
    """
    text = _clean(completion)
    markers = list(_FINAL_ANSWER_RE.finditer(text))
    return bool(markers) and _number_after(text[markers[-1].end():]) is not None


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


# --- reward terms ------------------------------------------------------------


def accuracy_score(completion: str, ground_truth: object, **_: Any) -> float:
    return 1.0 if is_correct(completion, ground_truth) else 0.0


def length_penalty_score(
    completion: str, ground_truth: object = None, target_length: int = 200, **_: Any
) -> float:
    """In [-1, 0]: characters beyond ``target_length``, relative to it (no tokenizer)."""
    overshoot = max(0, len(completion.strip()) - target_length)
    return -min(1.0, overshoot / target_length)


def step_score(
    completion: str, ground_truth: object, step_bonus: float = 0.1, max_steps: int = 5, **_: Any
) -> float:
    # Gated on correctness: shaping must never make a wrong answer outscore a right one.
    if not is_correct(completion, ground_truth):
        return 0.0
    return step_bonus * min(count_steps(completion), max_steps)


REWARD_TYPES: dict[str, Callable[..., float]] = {
    "accuracy": accuracy_score,
    "length_penalty": length_penalty_score,
    "step": step_score,
}
# Params each built-in term accepts, with defaults.
_PARAMS: dict[str, dict[str, Any]] = {
    "accuracy": {},
    "length_penalty": {"target_length": 200},
    "step": {"step_bonus": 0.1, "max_steps": 5},
}
_TOP_LEVEL_TYPES = (*REWARD_TYPES, "combined")


def _call(fn: Callable[..., Any], completion: str, ground_truth: object, kwargs: dict) -> Any:
    # Custom callables without **kwargs only get the keyword arguments they name.
    try:
        sig = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        sig = ()
    if sig and not any(p.kind is p.VAR_KEYWORD for p in sig):
        names = {p.name for p in sig}
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    return fn(completion, ground_truth, **kwargs)


@dataclass(frozen=True)
class RewardComponent:
    name: str
    fn: Callable[..., float]
    weight: float
    params: dict = field(default_factory=dict, hash=False)

    def term(self, completion: str, ground_truth: object, **context: Any) -> float:
        value = _call(self.fn, completion, ground_truth, {**context, **self.params})
        if isinstance(value, (bool, str, bytes)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise TypeError(f"reward {self.name!r} returned {value!r}; it must return a finite number")
        return float(value)


@dataclass(frozen=True)
class Reward:
    name: str
    components: tuple[RewardComponent, ...]

    def score(self, completion: str, ground_truth: object, **context: Any) -> float:
        """Weighted sum of the component terms."""
        return sum(c.weight * c.term(completion, ground_truth, **context) for c in self.components)

    def score_components(self, completion: str, ground_truth: object, **context: Any) -> dict[str, float]:
        """RAW (unweighted) term per component name, for logging."""
        return {c.name: c.term(completion, ground_truth, **context) for c in self.components}

    __call__ = score


# --- configuration -----------------------------------------------------------


def _fail(key: str, problem: str, fix: str) -> NoReturn:
    raise ConfigError(f"{key}: {problem}. Fix: {fix}")


def _did_you_mean(word: str, options: Any) -> str:
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _number(key: str, value: object, minimum: float, integer: bool = False) -> Any:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and integer:
        ok = float(value).is_integer()
    if not ok or not math.isfinite(float(value)) or value < minimum:
        kind = "an integer" if integer else "a finite number"
        _fail(key, f"got {value!r}", f"use {kind} >= {minimum}")
    return int(value) if integer else float(value)


def _check_params(key: str, kind: str, params: dict) -> dict:
    allowed = _PARAMS[kind]
    for name in params:
        if name not in allowed:
            hint = _did_you_mean(name, allowed)
            _fail(f"{key}.{name}", f"unknown parameter for {kind!r}",
                  f"{hint}{kind!r} accepts {sorted(allowed) or 'no parameters'}")
    out = {**allowed, **params}
    if "target_length" in out:
        out["target_length"] = _number(f"{key}.target_length", out["target_length"], 1, integer=True)
    if "step_bonus" in out:
        out["step_bonus"] = _number(f"{key}.step_bonus", out["step_bonus"], 0)
    if "max_steps" in out:
        out["max_steps"] = _number(f"{key}.max_steps", out["max_steps"], 1, integer=True)
    return out


def _component(key: str, spec: object) -> RewardComponent:
    if not isinstance(spec, dict):
        _fail(key, f"expected a dict, got {type(spec).__name__}",
              'write it as {"type": "accuracy", "weight": 1.0}')
    spec = dict(spec)
    kind = spec.pop("type", None)
    if kind is None:
        _fail(f"{key}.type", "missing", f"add one of {list(REWARD_TYPES)} or a callable")
    if not callable(kind) and not (isinstance(kind, str) and kind in REWARD_TYPES):
        _fail(f"{key}.type", f"unknown type {kind!r}",
              f"{_did_you_mean(kind, REWARD_TYPES)}use one of {list(REWARD_TYPES)} or a callable")
    if "weight" not in spec:
        _fail(f"{key}.weight", "missing", 'add e.g. "weight": 1.0')
    weight = spec.pop("weight")
    if callable(kind):
        weight = _number(f"{key}.weight", weight, -math.inf)  # custom terms: user's choice
        return RewardComponent(getattr(kind, "__name__", "custom"), kind, weight, spec)
    # Built-in terms: a negative weight turns a reward into a penalty (or vice versa).
    weight = _number(f"{key}.weight", weight, 0)
    return RewardComponent(kind, REWARD_TYPES[kind], weight, _check_params(key, kind, spec))


def _check_guarantee(key: str, components: tuple[RewardComponent, ...]) -> None:
    """A correct answer never scores below a wrong one (built-in terms only).

    wrong <= 0 (accuracy 0, step gated to 0, length term <= 0) and
    correct >= A - L, so we need L <= A. Equality is allowed: at the extreme a correct
    answer at >= 2x target_length ties a wrong short one (score 0), never below it.
    Custom callables are outside the guarantee; a config with no accuracy term but a
    custom term is assumed to carry correctness in the custom term and is not checked.
    """
    weights = lambda fn: sum(Fraction(c.weight) for c in components if c.fn is fn)  # noqa: E731
    acc, pen = weights(accuracy_score), weights(length_penalty_score)
    custom = any(c.fn not in REWARD_TYPES.values() for c in components)
    if pen > acc and not (acc == 0 and custom):
        _fail(key, f"length_penalty weight {float(pen)} exceeds accuracy weight {float(acc)}: "
              "a correct but long answer would score below a wrong short one",
              "lower the length_penalty weight to at most the accuracy weight")


def build_reward(
    reward_type: str | Callable[..., float] = "accuracy", reward_config: dict | None = None
) -> Reward:
    """Validate ``reward_type``/``reward_config`` into a :class:`Reward` (raises ConfigError)."""
    config = {} if reward_config is None else reward_config
    if not isinstance(config, dict):
        _fail("reward_config", f"expected a dict, got {type(config).__name__}", "use a mapping or omit it")
    if callable(reward_type):
        comp = _component("reward_type", {**config, "type": reward_type, "weight": 1.0})
        return Reward(comp.name, (comp,))
    kind = reward_type.strip().lower() if isinstance(reward_type, str) else reward_type
    if kind not in _TOP_LEVEL_TYPES:
        _fail("reward_type", f"unknown reward type {reward_type!r}",
              f"{_did_you_mean(kind, _TOP_LEVEL_TYPES)}use one of {list(_TOP_LEVEL_TYPES)} or a callable")
    if kind == "combined":
        specs = config.get("components")
        extra = set(config) - {"components"}
        if extra:
            _fail(f"reward_config.{sorted(extra)[0]}", "unknown key for 'combined'",
                  "put per-term params inside reward_config.components[i]")
        if not isinstance(specs, list) or not specs:
            _fail("reward_config.components", f"must be a non-empty list, got {specs!r}",
                  'e.g. [{"type": "accuracy", "weight": 1.0}]')
        comps = []
        for i, spec in enumerate(specs):
            c = _component(f"reward_config.components[{i}]", spec)
            # Duplicate names get a suffix ("accuracy_2") so score_components keeps both.
            name, k = c.name, 1
            while name in {o.name for o in comps}:
                k, name = k + 1, f"{c.name}_{k + 1}"
            comps.append(RewardComponent(name, c.fn, c.weight, c.params))
    else:
        params = dict(config)
        comps = [RewardComponent("accuracy", accuracy_score, 1.0, {})]
        if kind == "length_penalty":
            weight = params.pop("penalty_weight", 0.5)
            _number("reward_config.penalty_weight", weight, 0)
            comps.append(_component("reward_config", {"type": kind, "weight": weight, **params}))
        elif kind == "step":
            comps.append(_component("reward_config", {"type": kind, "weight": 1.0, **params}))
        elif params:
            _check_params("reward_config", "accuracy", params)
    components = tuple(comps)
    _check_guarantee("reward_config", components)
    return Reward(kind, components)


# --- TRL adapter -------------------------------------------------------------


def _completion_text(completion: object) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        msgs = [m for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        return "\n".join(map(_completion_text, msgs or completion))
    if isinstance(completion, dict):  # a message, or a multimodal part {"type": "text", ...}
        return _completion_text(completion.get("content", completion.get("text", "")))
    return completion if isinstance(completion, str) else str(completion)


def safe_score(reward: Reward, completion: str, ground_truth: object, **context: Any) -> tuple[float | None, str | None]:
    """(score, None), or (None, the traceback) when the reward raised or gave no finite number (a str, a list...)."""
    try:
        return reward.score(completion, ground_truth, **context), None
    except Exception:  # noqa: BLE001 - one bad completion must not kill the run
        return None, traceback.format_exc()


def to_trl_reward(reward: Reward, failure_reward: float | None = None) -> Callable[..., list[float | None]]:
    """Wrap ``reward`` as a TRL GRPOTrainer reward function (``__name__`` = reward.name).

    A completion whose scoring raises or returns None/NaN/inf gets ``failure_reward``;
    ``adapter.failures`` counts them and ``adapter.first_failure`` keeps the first traceback.
    """
    needs_truth = any(c.fn in REWARD_TYPES.values() for c in reward.components)

    def adapter(prompts: Any = None, completions: Any = None, completion_ids: Any = None,
                **kwargs: Any) -> list[float]:
        completions = list(completions or [])
        truths = kwargs.pop("ground_truth", None)
        if truths is None and needs_truth:
            _fail("ground_truth", "the dataset has no 'ground_truth' column",
                  "add a ground_truth column holding each problem's answer")
        n = len(completions)
        columns = {k: v for k, v in kwargs.items() if isinstance(v, list) and len(v) == n}
        if isinstance(prompts, list) and len(prompts) == n:
            columns["prompt"] = prompts  # per-row context for custom callables
        scores = []
        for i, completion in enumerate(completions):
            context = {k: v[i] for k, v in columns.items()}
            value, failure = safe_score(reward, _completion_text(completion),
                                        truths[i] if truths is not None else None, **context)
            if failure:
                adapter.failures += 1
                adapter.first_failure = adapter.first_failure or failure
            # None: TRL leaves the completion out of its group's mean and std and gives it advantage 0
            scores.append(failure_reward if value is None else value)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and n:  # the doctor watches format correctness beside the reward
            log_metric("format", sum(follows_format(_completion_text(c)) for c in completions) / n)
        return scores

    adapter.failures = 0  # type: ignore[attr-defined]
    adapter.first_failure = None  # type: ignore[attr-defined]
    adapter.__name__ = adapter.__qualname__ = reward.name
    return adapter


def group_advantages(rewards: list[float | None], num_generations: int, scale: bool = False) -> list[float]:
    """r - mean(group) per consecutive group of ``num_generations``; / (std + 1e-4) if scale.

    std is the sample standard deviation (as torch.std in TRL); 0 for a group of one. A None reward (the
    reward failed) is left out of its group's mean and std and gets advantage 0, as in TRL.
    """
    if num_generations < 1 or len(rewards) % num_generations:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {num_generations}")
    out: list[float] = []
    for start in range(0, len(rewards), num_generations):
        group = rewards[start:start + num_generations]
        scored = [float(r) for r in group if r is not None]
        mean = statistics.fmean(scored) if scored else 0.0
        std = statistics.stdev(scored) if len(scored) > 1 else 0.0
        out.extend(0.0 if r is None else (r - mean) / (std + 1e-4) if scale else r - mean for r in group)
    return out


def score_completions(cfg: Any) -> dict[str, Any]:
    """`action: create_reward`: score completions (and group advantages) with the configured reward."""
    reward = build_reward(cfg.reward_type, cfg.reward_config)
    truths = cfg.ground_truth if isinstance(cfg.ground_truth, list) else [cfg.ground_truth] * len(cfg.completions)
    scored = [safe_score(reward, c, t) for c, t in zip(cfg.completions, truths)]
    scores = [cfg.reward_failure_value if value is None else value for value, _ in scored]  # None: left out
    result: dict[str, Any] = {"status": "completed", "reward_type": reward.name, "scores": scores}
    failures = [failure for _, failure in scored if failure]
    if failures:  # the same treatment as in training: scored reward_failure_value, counted, first error shown
        result.update(reward_failures=len(failures), first_failure=failures[0])
    if len(reward.components) > 1 and not failures:
        parts = [reward.score_components(c, t) for c, t in zip(cfg.completions, truths)]
        result["components"] = {name: [p[name] for p in parts] for name in parts[0]} if parts else {}
    if cfg.num_generations:
        result["advantages"] = group_advantages(scores, cfg.num_generations)
    return result
