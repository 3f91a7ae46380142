"""The book's troubleshooting advice (section 11.4.3) as live rules over the logged metrics.

Each rule fires once per episode (when its condition starts holding for `patience` logs) with the
book's remedy and the current values (learning_rate and kl_coef as last logged: the scheduler and
adaptive KL move them), and re-arms once the condition clears. Remedies never contradict each other:
after a blow-up (KL above kl_high, a NaN/inf loss, a reward collapse or slide within the last `flat_window`
logs) a flat reward or a low KL never gets "raise learning_rate".
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hello_agents_rl.config import Thresholds
from hello_agents_rl.config.train import DEFAULT_LEARNING_RATES
from hello_agents_rl.rollouts.tool_guard import MAX_HUNG_CALLS, ToolStats


@dataclass
class Doctor:
    learning_rate: float
    kl_coef: float
    max_new_tokens: int
    thresholds: Thresholds = field(default_factory=Thresholds)
    tools: ToolStats | None = None  # a tool run's guard counts, read at every log
    use_lora: bool = False  # LoRA's learning rates sit ~10x above full fine-tuning's: the advice says which
    dynamic_sampling: str = "off"  # the remedy for groups with equal rewards depends on it
    findings: list[str] = field(default_factory=list)
    _streaks: dict[str, int] = field(default_factory=dict)
    _active: set[str] = field(default_factory=set)
    _rewards: deque = field(default_factory=lambda: deque(maxlen=64))
    _best_reward: float = -math.inf
    _best_format: float = -math.inf
    _logs: int = 0
    _blowup: tuple[int, str] | None = None  # (log number, what happened) of the latest blow-up

    def _lora_hint(self) -> str:
        lora = DEFAULT_LEARNING_RATES[("grpo", True)]
        if not self.use_lora or self.learning_rate >= lora / 3:
            return ""
        return (f"; with LoRA, GRPO learns near {lora:g}, ~10x full fine-tuning's rates "
                "(measured on SmolLM2: docs/real_model.md)")

    def _sampling_hint(self) -> str:
        if self.dynamic_sampling == "resample":
            return ", or raise dynamic_sampling_rounds (resample found too few prompts whose groups differ)"
        return (", or set dynamic_sampling: resample (each step refills its batch with prompts whose groups differ; "
                "skip only leaves such groups out of the compute)")

    @property
    def active(self) -> frozenset[str]:
        """The rules whose condition holds now (each reported once, when it started holding)."""
        return frozenset(self._active)

    def observe(self, step: int, logs: dict[str, float]) -> list[str]:
        """New findings for one log entry (also appended to `findings`)."""
        self._logs += 1
        t = self.thresholds
        kl, reward, loss = logs.get("kl"), logs.get("reward"), logs.get("loss")
        fmt = logs.get("format")
        calls, fails = logs.get("tools/call_frequency"), logs.get("tools/failure_frequency")  # tool runs only
        exhausted = logs.get("tools/turns_exhausted")
        out_of_budget = logs.get("tools/budget_exhausted")
        if reward is not None:
            self._rewards.append(reward)
            self._best_reward = max(self._best_reward, reward)
        self.learning_rate = _number(logs.get("learning_rate"), self.learning_rate)  # as scheduled now
        self.kl_coef = _number(logs.get("kl_coef"), self.kl_coef)  # as adaptive KL set it
        if blowup := self._blew_up(step, loss, kl, reward):
            self._blowup = (self._logs, blowup)
        recent = self._blowup[1] if self._blowup and self._logs - self._blowup[0] < t.flat_window else None
        lr = f"learning_rate (now {self.learning_rate:g})"
        beta = f"kl_coef (now {self.kl_coef:g})"
        # the same flat reward means opposite things: a calm policy needs a push, a blown-up one a smaller step
        flat_remedy = f"after {recent}: lower {lr}, raise {beta}" if recent else f"raise {lr}, lower {beta}"
        kl_low_remedy = (f"lower {beta} (not a higher learning_rate: {recent} lately)" if recent
                         else f"raise {lr} or lower {beta}{self._lora_hint()}")
        checks: list[tuple[str, bool, int, Callable[[], str]]] = [
            ("nonfinite", loss is not None and not math.isfinite(loss), 1,
             lambda: f"loss is {loss} at step {step}: lower {lr}, keep max_grad_norm on, check the reward for NaN"),
            ("kl_high", kl is not None and kl > t.kl_high, t.patience,
             lambda: f"KL {kl:.3g} > {t.kl_high} for {t.patience} logs: the policy is drifting from the reference; "
                     f"lower {lr} or raise {beta}"),
            ("kl_low", kl is not None and self._logs > t.warmup_logs and kl < t.kl_low, t.patience,
             lambda: f"KL {kl:.2g} < {t.kl_low} for {t.patience} logs: the policy is hardly changing; "
                     f"{kl_low_remedy}"),
            ("zero_variance", logs.get("frac_reward_zero_std", 0.0) >= 1.0, t.patience,
             lambda: f"every group had identical rewards for {t.patience} logs (reward {reward}): no learning "
                     "signal; the task is too hard or too easy for the model, or the reward is broken "
                     f"(check it with action create_reward), or raise temperature/num_generations{self._sampling_hint()}"),
            ("reward_flat", self._flat(), 1,
             lambda: f"reward flat at {reward:.3g} over {t.flat_window} logs: {flat_remedy}, "
                     "check the reward function, or improve the SFT model"),
            ("reward_collapse", reward is not None and self._best_reward - reward > t.collapse_drop, t.patience,
             lambda: f"reward fell from {self._best_reward:.3g} to {reward:.3g}: collapse or overfitting; "
                     f"lower {lr}, raise {beta}, or train fewer epochs"),
            ("reward_slide", self._slide() > t.slide_drop, 1,
             lambda: f"reward sliding: down {self._slide():.2g} over the last {t.slide_window} logs (to {reward:.3g}, "
                     f"best {self._best_reward:.3g}): the policy is unlearning what it had; lower {lr}, raise {beta}, "
                     "or stop earlier and keep the best checkpoint (save_steps)"),
            ("truncated", logs.get("completions/clipped_ratio", 0.0) > t.truncation_rate, t.patience,
             lambda: f"{logs['completions/clipped_ratio']:.0%} of completions hit max_new_tokens "
                     f"({self.max_new_tokens}): raise max_new_tokens or reward shorter answers (length_penalty)"),
            ("format_drop", fmt is not None and self._format_dropping(fmt, reward), t.patience,
             lambda: f"answer format rate fell to {fmt:.0%} while reward rises: use a combined reward "
                     f"with format terms, raise {beta}, or train fewer epochs"),
            ("tool_failures", bool(calls) and fails is not None and fails > t.tool_failure_rate, t.patience,
             lambda: f"{fails:.0%} of tool calls failed for {t.patience} logs: malformed calls or a failing tool; "
                     "read result['tools']['first_error'] and completions.jsonl, SFT on transcripts with "
                     "well-formed calls, or add tool_reward.failed_call_penalty"),
            ("turns_exhausted", exhausted is not None and exhausted > t.turns_exhausted_rate, t.patience,
             lambda: self._unanswered(exhausted or 0.0, out_of_budget or 0.0)),
            ("tool_never_called", calls is not None and calls == 0 and self._flat(), 1,
             lambda: f"no tool call in {t.flat_window} logs while reward stays flat at {reward:.3g}: the model "
                     "does not use its tools; SFT first on transcripts that call them (algorithm sft with tools), "
                     "raise temperature, or add tool_reward.call_bonus"),
        ]
        checks += self._hung_tools()
        new = []
        for name, holds, patience, message in checks:
            self._streaks[name] = self._streaks.get(name, 0) + 1 if holds else 0
            if not holds:
                self._active.discard(name)
            elif self._streaks[name] >= patience and name not in self._active:
                self._active.add(name)
                new.append(f"[step {step}] {message()}")
        if fmt is not None:
            self._best_format = max(self._best_format, fmt)
        self.findings.extend(new)
        return new

    def _unanswered(self, share: float, out_of_budget: float) -> str:
        """Rollouts that ended on a call: the remedy for the larger of the two causes."""
        if out_of_budget > share / 2:
            return (f"{share:.0%} of rollouts ended on a call, unanswered, {out_of_budget:.0%} because its result no "
                    f"longer fitted in max_new_tokens ({self.max_new_tokens}), the budget of the whole chain (every "
                    "call, every tool result and the answer): raise max_new_tokens (past the model's context length, "
                    "shorten the tool results instead)")
        return (f"{share:.0%} of rollouts ran out of tool turns (calling without answering): raise max_tool_turns "
                "(an agent's own limit: max_tool_iterations, or max_steps in hello-agents 1.0.0's ReActAgent) if the "
                "task needs more calls, else lower temperature or add tool_reward.failed_call_penalty")

    def _hung_tools(self) -> list[tuple[str, bool, int, Callable[[], str]]]:
        """One rule per tool whose calls time out: a hang is no learning problem, so no lr/KL remedy."""
        stats, limit = self.tools, self.thresholds.tool_hung_calls
        hung = dict(stats.hung) if stats is not None else {}
        return [(f"tool_hung:{name}", count >= limit, 1,
                 lambda name=name, count=count: (
                     f"tool {name!r} hung {count} times (no answer within tool_timeout {stats.timeout:g} s; "
                     f"{stats.still_running(name)} calls still running, and while {MAX_HUNG_CALLS} are its further "
                     "calls fail at once): raise tool_timeout if the tool is slow but sound, or fix the tool "
                     "(a network call or a lock without its own timeout, an input that makes it loop)"))
                for name, count in sorted(hung.items())]

    def _blew_up(self, step: int, loss: float | None, kl: float | None, reward: float | None) -> str | None:
        t = self.thresholds
        if loss is not None and not math.isfinite(loss):
            return f"a {loss} loss at step {step}"
        if kl is not None and not (kl <= t.kl_high):  # NaN counts
            return f"KL {kl:.3g} > {t.kl_high} at step {step}"
        if reward is not None and self._best_reward - reward > t.collapse_drop:
            return f"the reward's fall from {self._best_reward:.3g} to {reward:.3g}"
        if reward is not None and self._slide() > t.slide_drop:
            return f"the reward's slide to {reward:.3g}"
        return None

    def _slide(self) -> float:
        """How far the least-squares line through the last `slide_window` rewards falls across them (0 if it rises)."""
        n = self.thresholds.slide_window
        window = list(self._rewards)[-n:]
        if n < 2 or len(window) < n:
            return 0.0
        mean_x, mean_y = (n - 1) / 2, sum(window) / n
        slope = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(window)) / sum((x - mean_x) ** 2 for x in range(n))
        return max(0.0, -slope * (n - 1))

    def _flat(self) -> bool:
        window = list(self._rewards)[-self.thresholds.flat_window:]
        return len(window) == self.thresholds.flat_window and max(window) - min(window) < self.thresholds.flat_tolerance

    def _format_dropping(self, fmt: float, reward: float | None) -> bool:
        rising = reward is not None and len(self._rewards) > 1 and reward > self._rewards[0]
        return rising and self._best_format - fmt > self.thresholds.format_drop


def _number(value: object, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else default


def sft_learnt_nothing(final_loss: float, vocab_size: int, thresholds: Thresholds) -> str | None:
    """After SFT: a final loss still near a uniform guess over the vocabulary (ln V nats a token) is a model that learnt
    next to nothing of its examples; a run that "completed" so says why GRPO will then earn no reward."""
    chance = math.log(max(vocab_size, 2))
    if not math.isfinite(final_loss) or final_loss < thresholds.sft_chance_share * chance:
        return None
    return (f"SFT's final loss {final_loss:.3g} is still near a uniform guess over the {vocab_size}-token vocabulary "
            f"({chance:.3g}): the model learnt next to nothing of its examples; train longer (max_steps, num_epochs) "
            "or at a higher learning_rate (a model built from random weights, such as the tiny model, learns with "
            "use_lora: false and a rate near 3e-3)")
