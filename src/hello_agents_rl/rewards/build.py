"""Building a reward from a config: `reward_type`, `reward_config` and, in a tool run, `tool_reward`.

`build_reward` checks every key against the term table (`terms.TERMS`) and checks one bound over all the
built-in terms, tool shaping included: a wrong answer never outscores a right one. Errors are ConfigErrors
naming the key, what is wrong and the fix.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NoReturn

from hello_agents_rl.errors import ConfigError, did_you_mean
from hello_agents_rl.rewards.checkers import CHECKERS
from hello_agents_rl.rewards.terms import REWARD_NAMES, TERM_OF, TERMS, TOOL_REWARD_KEYS, Term, accuracy_score
from hello_agents_rl.trajectory import read_trajectory


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


def answer_text(completion: object) -> str:
    """Where the answer is read: a plain completion, or the assistant's messages after the last tool result."""
    if isinstance(completion, list):  # TRL's messages: [{"role": "assistant", "content": ...}, {"role": "tool"...}]
        messages = [m for m in completion if isinstance(m, dict)]
        tool_results = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
        after = messages[tool_results[-1] + 1:] if tool_results else messages
        assistant = [m for m in after if m.get("role") == "assistant"]
        return "\n".join(map(answer_text, assistant or ([] if tool_results else completion)))
    if isinstance(completion, dict):  # a message, or a multimodal part {"type": "text", ...}
        return answer_text(completion.get("content", completion.get("text", "")) or "")
    return completion if isinstance(completion, str) else str(completion)


@dataclass(frozen=True)
class Reward:
    """A weighted sum of terms. `max_tool_turns` is set in a tool run: completions are trajectories, and custom
    terms may also name `trajectory` (the messages) and `tool_stats`."""

    name: str
    components: tuple[RewardComponent, ...]
    max_tool_turns: int | None = None

    @property
    def needs_truth(self) -> bool:
        return any(TERM_OF[c.fn].needs_truth for c in self.components if c.fn in TERM_OF)

    def _inputs(self, completion: object, context: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self.max_tool_turns is not None:
            context = {"trajectory": completion, "tool_stats": read_trajectory(completion).stats(), **context}
        return answer_text(completion), context

    def score(self, completion: object, ground_truth: object, **context: Any) -> float:
        """Weighted sum of the component terms."""
        text, context = self._inputs(completion, context)
        return sum(c.weight * c.term(text, ground_truth, **context) for c in self.components)

    def score_components(self, completion: object, ground_truth: object, **context: Any) -> dict[str, float]:
        """RAW (unweighted) term per component name, for logging."""
        text, context = self._inputs(completion, context)
        return {c.name: c.term(text, ground_truth, **context) for c in self.components}

    __call__ = score


def _fail(key: str, problem: str, fix: str) -> NoReturn:
    end = " " if problem.endswith("?") else ". "  # a did-you-mean ends the problem
    raise ConfigError(f"`{key}`: {problem}{end}Fix: {fix}")


def _number(key: str, value: object, minimum: float, integer: bool = False) -> Any:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and integer:
        ok = float(value).is_integer()
    if not ok or not math.isfinite(float(value)) or value < minimum:
        kind = "an integer" if integer else "a finite number"
        _fail(key, f"got {value!r}", f"use {kind} >= {minimum}")
    return int(value) if integer else float(value)


def _check_params(key: str, kind: str, params: dict) -> dict:
    allowed = TERMS[kind].params
    for name in params:
        if name not in allowed:
            _fail(f"{key}.{name}", f"unknown parameter for {kind!r}{did_you_mean(name, allowed)}",
                  f"{kind!r} accepts {sorted(allowed) or 'no parameters'}")
    return {name: _number(f"{key}.{name}", params.get(name, p.default), p.minimum, p.integer)
            for name, p in allowed.items()}


_COMPONENT_TYPES = tuple(name for name in REWARD_NAMES if name in TERMS)


def _component(key: str, spec: object) -> RewardComponent:
    if not isinstance(spec, dict):
        _fail(key, f"expected a dict, got {type(spec).__name__}",
              'write it as {"type": "accuracy", "weight": 1.0}')
    spec = dict(spec)
    kind = spec.pop("type", None)
    if kind is None:
        _fail(f"{key}.type", "missing", f"add one of {list(_COMPONENT_TYPES)} or a callable")
    if not callable(kind) and not (isinstance(kind, str) and kind in _COMPONENT_TYPES):
        _fail(f"{key}.type", f"unknown type {kind!r}{did_you_mean(kind, _COMPONENT_TYPES)}",
              f"use one of {list(_COMPONENT_TYPES)} or a callable")
    if "weight" not in spec:
        _fail(f"{key}.weight", "missing", 'add e.g. "weight": 1.0')
    weight = spec.pop("weight")
    if callable(kind):
        weight = _number(f"{key}.weight", weight, -math.inf)  # custom terms: user's choice
        return RewardComponent(getattr(kind, "__name__", "custom"), kind, weight, spec)
    # Built-in terms: a negative weight turns a reward into a penalty (or vice versa).
    weight = _number(f"{key}.weight", weight, 0)
    return RewardComponent(kind, TERMS[kind].fn, weight, _check_params(key, kind, spec))


def _combined(config: dict) -> list[RewardComponent]:
    specs = config.get("components")
    extra = set(config) - {"components"}
    if extra:
        _fail(f"reward_config.{sorted(extra)[0]}", "unknown key for 'combined'",
              "put per-term params inside reward_config.components[i]")
    if not isinstance(specs, list) or not specs:
        _fail("reward_config.components", f"must be a non-empty list, got {specs!r}",
              'e.g. [{"type": "accuracy", "weight": 1.0}]')
    comps: list[RewardComponent] = []
    for i, spec in enumerate(specs):
        c = _component(f"reward_config.components[{i}]", spec)
        # Duplicate names get a suffix ("accuracy_2") so score_components keeps both.
        name, k = c.name, 1
        while name in {o.name for o in comps}:
            k, name = k + 1, f"{c.name}_{k + 1}"
        comps.append(RewardComponent(name, c.fn, c.weight, c.params))
    return comps


def _shorthand(kind: str, config: dict) -> list[RewardComponent]:
    """reward_type: <term> is accuracy (weight 1) plus that term."""
    params = dict(config)
    comps = [RewardComponent("accuracy", accuracy_score, 1.0, {})]
    if kind == "accuracy":
        _check_params("reward_config", kind, params)
        return comps
    term = TERMS[kind]
    weight = params.pop(term.weight_key, term.default_weight) if term.weight_key else term.default_weight
    if term.weight_key:
        _number(f"reward_config.{term.weight_key}", weight, 0)
    return [*comps, _component("reward_config", {"type": kind, "weight": weight, **params})]


def _tool_shaping(tool_reward: dict[str, Any], max_tool_turns: int) -> list[RewardComponent]:
    if not isinstance(tool_reward, dict):
        _fail("tool_reward", f"expected a dict, got {type(tool_reward).__name__}", "e.g. {call_bonus: 0.1}")
    comps = []
    for name, weight in tool_reward.items():
        if name not in TOOL_REWARD_KEYS:
            _fail(f"tool_reward.{name}", f"unknown key{did_you_mean(name, TOOL_REWARD_KEYS)}",
                  f"use {' or '.join(TOOL_REWARD_KEYS)}")
        params = {"max_tool_turns": max_tool_turns} if TERMS[name].per_tool_turn else {}
        comps.append(RewardComponent(name, TERMS[name].fn, _number(f"tool_reward.{name}", weight, 0), params))
    return comps


def _check_bound(key: str, components: list[RewardComponent], max_tool_turns: int = 1) -> None:
    """A right answer never scores below a wrong one, over the built-in terms.

    Each term gives a wrong answer at most `bound[0]` and a right one at least `bound[1]` per unit of weight, so
    the sums must satisfy wrong <= right. Equality is allowed: at the extreme a right answer ties a wrong one,
    never below it. Custom callables are outside the guarantee; a reward with no accuracy term but a custom
    one is taken to carry correctness in the custom term and is not checked.
    """
    built_in = [(c, TERM_OF[c.fn]) for c in components if c.fn in TERM_OF]
    if len(built_in) < len(components) and not any(c.fn is accuracy_score and c.weight for c in components):
        return

    def turns(term: Term) -> int:
        return max_tool_turns if term.per_tool_turn else 1

    # What each term costs a right answer against a wrong one, in units of score; accuracy's cost is negative.
    costs = [(c, Fraction(c.weight) * (term.bound[0] - term.bound[1]) * turns(term)) for c, term in built_in]
    budget = -sum(cost for _, cost in costs if cost < 0)
    spent = [(c, cost) for c, cost in costs if cost > 0]
    if sum(cost for _, cost in spent) <= budget:
        return
    parts = [f"{c.name} {c.weight:g}" + (f" x max_tool_turns {max_tool_turns}" if turns(TERM_OF[c.fn]) > 1 else "")
             for c, _ in spent]
    total = f" = {float(sum(cost for _, cost in spent)):g}" if len(parts) > 1 else ""
    _fail(key, f"{' + '.join(parts)}{total} exceeds the accuracy weight {float(budget):g}: a wrong answer could "
          "outscore a right one", f"lower {', '.join(sorted({c.name for c, _ in spent}))} so that they sum to at "
          f"most {float(budget):g}")


def _checked_by(component: RewardComponent, answer_checker: str) -> RewardComponent:
    """A built-in term that reads the ground truth, told which checker decides a right answer."""
    term = TERM_OF.get(component.fn)
    if term is None or not term.needs_truth or answer_checker == "number":
        return component
    return RewardComponent(component.name, component.fn, component.weight,
                           {**component.params, "answer_checker": answer_checker})


def build_reward(
    reward_type: str | Callable[..., float] = "accuracy",
    reward_config: dict | None = None,
    tool_reward: dict[str, Any] | None = None,
    max_tool_turns: int | None = None,
    answer_checker: str = "number",
) -> Reward:
    """Validate a reward config into a :class:`Reward` (raises ConfigError).

    `max_tool_turns` makes it a tool run's reward (see `with_tool_shaping`); `tool_reward` needs it.
    `answer_checker` (rewards/checkers.py) decides right answers for the built-in terms that read the truth.
    """
    if answer_checker not in CHECKERS:
        _fail("answer_checker", f"unknown checker {answer_checker!r}{did_you_mean(answer_checker, CHECKERS)}",
              f"use one of {list(CHECKERS)}")
    config = {} if reward_config is None else reward_config
    if not isinstance(config, dict):
        _fail("reward_config", f"expected a dict, got {type(config).__name__}", "use a mapping or omit it")
    if callable(reward_type):
        comp = _component("reward_type", {**config, "type": reward_type, "weight": 1.0})
        reward = Reward(comp.name, (comp,))
    else:
        name = reward_type.strip().lower() if isinstance(reward_type, str) else reward_type
        if name not in REWARD_NAMES:
            _fail("reward_type", f"unknown reward type {reward_type!r}{did_you_mean(name, REWARD_NAMES)}",
                  f"use one of {list(REWARD_NAMES)} or a callable")
        comps = _combined(config) if name == "combined" else _shorthand(name, config)
        _check_bound("reward_config", comps)
        reward = Reward(name, tuple(_checked_by(c, answer_checker) for c in comps))
    if max_tool_turns is None:
        if tool_reward:
            _fail("tool_reward", "it shapes tool calls and this run has none", "drop it, or give `tools`")
        return reward
    return with_tool_shaping(reward, tool_reward or {}, max_tool_turns)


def with_tool_shaping(reward: Reward, tool_reward: dict[str, Any], max_tool_turns: int) -> Reward:
    """The reward of a tool run: the answer is read after the last tool result; `tool_reward` (call_bonus,
    failed_call_penalty) adds terms checked within the same bound as `reward_config`'s."""
    shaping = _tool_shaping(tool_reward, max_tool_turns)
    if shaping:
        _check_bound("tool_reward", [*reward.components, *shaping], max_tool_turns)
    return Reward(reward.name, (*reward.components, *shaping), max_tool_turns)
