"""Evaluation's rollout loop: plain and tool-using questions alike, batched, greedy or sampled.

Training's rollouts are TRL's (GRPOTrainer's tool loop, or the fast sampler); this loop serves evaluation and
returns the same trajectory contract (trajectory.py), so both are scored alike.

Per row, `samples` trajectories: the prompt rendered with the row's tools (TRL's `apply_chat_template(...,
tools=...)`; none for a plain question), then turns. Each turn generates every live trajectory as left-padded
batches of `batch_size` rows (`samples` trajectories each), reads tool calls with TRL's `parse_response`, runs the
guarded tools, appends their results with TRL's own `_get_tool_suffix_ids` (token concatenation, no
re-tokenisation) and goes on -- at most `max_tool_turns` tool rounds and `max_new_tokens` tokens for the whole
trajectory, as in training. A plain question has no tools to call, so it ends after one turn: a one-turn trajectory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hello_agents_rl.coupling import borrowed_blocker
from hello_agents_rl.rollouts.tool_guard import ToolStats, guard, guarded_environment
from hello_agents_rl.rollouts.tool_registry import probe_environment, public_methods
from hello_agents_rl.trajectory import Trajectory, read_trajectory


@dataclass
class Rollout:
    ids: list[int]  # prompt + everything so far (model tokens and tool results)
    prompt_len: int
    tools: dict[str, Callable[..., Any]]  # by name; empty for a plain question
    schemas: list[Callable[..., Any]]  # what the prompt rendered: TRL's parser reads calls against them
    messages: list[dict[str, Any]] = field(default_factory=list)  # assistant turns and tool results
    model_tokens: int = 0  # tokens the model generated, each turn's EOS included
    done: bool = False
    truncated: bool = False  # the last turn ran out of budget before its EOS

    @property
    def trajectory(self) -> Trajectory:
        return read_trajectory(self.messages)

    @property
    def answer_tokens(self) -> int:
        """The model's tokens without the EOS that ended the trajectory (what evaluation reports)."""
        return self.model_tokens - (0 if self.truncated else 1)


def roll_out(
    model: Any,
    tokenizer: Any,
    rows: Any,
    max_new_tokens: int = 256,
    batch_size: int = 32,
    *,
    temperature: float = 0.0,
    samples: int = 1,
    seed: int = 0,
    enable_thinking: bool = False,
    tools: list[Callable[..., Any]] | tuple = (),
    environment: type | None = None,
    max_tool_turns: int = 0,
    stats: ToolStats | None = None,
) -> list[list[Rollout]]:
    """`samples` rollouts per row (rows carry a chat `prompt`), greedy at temperature 0; tools guarded into `stats`
    (whose `timeout` is the tool time limit)."""
    import torch

    stats = stats if stats is not None else ToolStats()
    with_tools = bool(tools) or environment is not None
    template = _tool_template(tokenizer) if with_tools else None
    kwargs = {"enable_thinking": enable_thinking}
    guarded = [guard(t, stats) for t in tools]
    if environment is not None:  # a reset failing on the first rows is a ConfigError; later, a counted failure
        probe_environment(environment, rows, "evaluation data")
    env_class = guarded_environment(environment, stats) if environment is not None else None
    rollouts = [_start(tokenizer, row, guarded, env_class, template, kwargs) for row in rows for _ in range(samples)]
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) | {tokenizer.eos_token_id}
    torch.manual_seed(seed)
    model.eval()
    per_batch = batch_size * samples  # a row's samples are generated side by side, as num_return_sequences would
    for turn in range(max_tool_turns + 1):
        live = [r for r in rollouts if not r.done]
        for start in range(0, len(live), per_batch):
            batch = live[start : start + per_batch]
            budget = max(max_new_tokens - min(len(r.ids) - r.prompt_len for r in batch), 1)
            turns = generate_turn(model, tokenizer, [r.ids for r in batch], budget, eos_ids, temperature)
            for r, new in zip(batch, turns):
                new = new[: max(max_new_tokens - (len(r.ids) - r.prompt_len), 0)]  # the trajectory's budget
                r.messages.append(_read_turn(tokenizer, r, new, eos_ids))
                r.ids += new
                r.model_tokens += len(new)
                r.truncated = not new or new[-1] not in eos_ids
                calls = r.messages[-1].get("tool_calls")
                if not calls or turn == max_tool_turns or r.truncated:
                    r.done = True  # an answer, the last allowed round, or out of budget
                    continue
                results = [_call(r.tools, call) for call in calls]
                suffix = _suffix_ids(tokenizer, template, kwargs, results)
                if len(r.ids) + len(suffix) - r.prompt_len > max_new_tokens:
                    r.done = True  # TRL drops a tool result that would overflow the budget, and stops
                    continue
                r.messages += results
                r.ids += suffix
    return [rollouts[i : i + samples] for i in range(0, len(rollouts), samples)]


def generate_turn(
    model: Any,
    tokenizer: Any,
    sequences: list[list[int]],
    max_new_tokens: int,
    eos_ids: set[int],
    temperature: float = 0.0,
) -> list[list[int]]:
    """One turn for every sequence as one left-padded batch; each new turn ends at its first EOS (kept)."""
    import torch

    device = next(model.parameters()).device
    width = max(map(len, sequences))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], device=device)  # (batch, width)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=device)  # (batch, width)
    decoding = ({"do_sample": True, "temperature": temperature, "top_p": 1.0} if temperature > 0
                else {"do_sample": False, "temperature": None, "top_p": None})
    with torch.no_grad():
        output = model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                pad_token_id=pad, top_k=None, **decoding)  # (batch, width + up to max_new_tokens)
    turns = []
    for row in output[:, width:].tolist():  # after the first EOS come pad tokens
        end = next((i for i, t in enumerate(row) if t in eos_ids), None)
        turns.append(row if end is None else row[: end + 1])
    return turns


def _tool_template(tokenizer: Any) -> str | None:
    """The chat template TRL's tool loop renders with (None: the model's own), the response parser added."""
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        is_chat_template_prefix_preserving,
    )

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)
    return None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)


def _start(tokenizer: Any, row: Any, tools: list[Callable[..., Any]], env_class: type | None, template: str | None,
           kwargs: dict[str, Any]) -> Rollout:
    """A rollout's prompt tokens and tools; an environment is one instance per rollout, reset with the row."""
    prompt = [dict(m) for m in row["prompt"]]
    callables = list(tools)
    if env_class is not None:
        instance = env_class()
        observation = instance.reset(**row)
        if isinstance(observation, str):
            prompt[-1]["content"] = prompt[-1]["content"] + observation
        callables += [getattr(instance, name) for name in public_methods(env_class)]
    ids = tokenizer.apply_chat_template(prompt, tools=callables or None, chat_template=template,
                                        add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs)
    return Rollout(list(ids), len(ids), {c.__name__: c for c in callables}, callables)


def _read_turn(tokenizer: Any, rollout: Rollout, new: list[int], eos_ids: set[int]) -> dict[str, Any]:
    """The assistant message of a turn: TRL's parser where tools can be called, else the decoded text."""
    if not rollout.schemas:  # a plain question: no template parser needed (any model works)
        answer = new[:-1] if new and new[-1] in eos_ids else new
        return {"role": "assistant", "content": tokenizer.decode(answer, skip_special_tokens=True)}
    from trl.chat_template_utils import parse_response

    if not new:
        return {"role": "assistant", "content": ""}
    return parse_response(tokenizer, new, prefix=rollout.ids, tools=rollout.schemas)


def _call(tools: dict[str, Callable[..., Any]], call: dict[str, Any]) -> dict[str, Any]:
    """Run one parsed call the way TRL's loop does: any exception becomes an {'error': ...} tool message."""
    function = call.get("function", {})
    name = function.get("name", "unknown")
    try:
        if name not in tools:
            raise ValueError(f"Tool {name} not found.")
        result = tools[name](**(function.get("arguments") or {}))
    except Exception as error:  # noqa: BLE001 - a failed call, as in training
        result = {"error": str(error)}
    return {"role": "tool", "name": name, "content": result if isinstance(result, list) else str(result)}


def _suffix_ids(tokenizer: Any, chat_template: str | None, kwargs: dict[str, Any], tool_messages: list[dict]
                ) -> list[int]:
    """TRL's own tool-result tokens (GRPOTrainer._get_tool_suffix_ids, listed in coupling.py) on a stand-in for the
    trainer: the tokens training appends, so that evaluation sees the same."""
    from trl import GRPOTrainer

    if blocker := borrowed_blocker():
        raise RuntimeError(f"evaluating with tools needs TRL's tool-result tokenizer: {blocker} (see coupling.py)")
    shim = SimpleNamespace(processing_class=tokenizer, _tokenizer=tokenizer, chat_template=chat_template,
                           chat_template_kwargs=kwargs, _is_vlm=False)
    return GRPOTrainer._get_tool_suffix_ids(shim, tool_messages)
