"""The task protocol: one object owns what training, evaluation and the demos read of a task.

A run names its task with `dataset` (a built-in name, `reasoning_gym:<task>`, or `module:Class` for a task of the
user's own) and configures it with `dataset_config`, which the task's own schema (`Config`) validates. A task owns:

    rows(split, count, seed, system_prompt)  prompt, completion (its demonstrator's transcript, [] where it has none),
                                             ground_truth, question, and any column of its own
    tools()                                  the tools its questions are answered with (built-in names or
                                             module:function import strings); [] for plain answers
    environment()                            or a stateful environment class (TRL's environment_factory shape)
    system_prompt, max_tool_turns            its default prompt, and its stopping rule: tool rounds before the loop
                                             ends a rollout
    reward                                   its own reward, (completion, ground_truth, **row) -> float, where the
                                             task owns one; None: the run's reward_type judges it
    metrics(records)                         its figures over evaluated questions (each record: question,
                                             ground_truth, correct, and the calls made as (tool, argument) pairs)

A plain answer is a one-turn trajectory, so one protocol serves plain and tool-using tasks. The protocol imports no
torch or transformers: the config layer validates `dataset_config` through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.trajectory import called

SPLITS = ("train", "test")
Calls = set[tuple[str, str]]  # (tool, argument) pairs a rollout made, arguments stripped


class TaskConfig(BaseModel):
    """A task's `dataset_config`: a schema, so a misspelt key or a wrong type is refused naming it (this one: none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def share(default: float, of_what: str) -> Any:
    """A field that is a share in [0, 1] (a demonstrator's habit), strictly a number."""
    return Field(default, ge=0, le=1, strict=True, description=f"a number in [0, 1]: {of_what}")


Schema = TypeVar("Schema", bound=BaseModel)


def validated(schema: type[Schema], task: str, params: Any) -> Schema:
    """`params` as the task's schema reads them, or a ConfigError naming `dataset_config.KEY` and what it takes."""
    if not isinstance(params, dict):
        raise ConfigError(f"`dataset_config`: a mapping of the {task} task's parameters (got {params!r})")
    try:
        return schema.model_validate(params)
    except ValidationError as invalid:
        error = invalid.errors()[0]
        key = ".".join(str(part) for part in error["loc"][:1])
        fields = schema.model_fields
        if error["type"] == "extra_forbidden":
            has = f"it has: {', '.join(fields)}" if fields else "it takes no parameters; remove dataset_config"
            raise ConfigError(f"`dataset_config.{key}`: the {task} task has no such parameter ({has})") from None
        takes = fields[key].description if key in fields else ""
        raise ConfigError(f"`dataset_config.{key}`: {takes} (got {params.get(key)!r}: "
                          f"{error['msg'].removeprefix('Value error, ')})") from None


class Task:
    """A task's rows, tools, prompt, stopping rule, reward and metrics (see the module's docstring)."""

    name: ClassVar[str] = ""  # the `dataset` value that names it
    splits: ClassVar[tuple[str, ...]] = SPLITS
    Config: ClassVar[type[BaseModel]] = TaskConfig  # its `dataset_config`
    system_prompt: str | None = None  # a class's default; a task built from arguments (OpenEnv) sets its own
    max_tool_turns: ClassVar[int | None] = None  # None: the run's own (a plain-answer task has no tool rounds)
    own_checker: ClassVar[bool] = False  # its answers are judged by the task itself, never by `answer_checker`
    demonstrator: ClassVar[str] = ""  # what its demonstrator does, as the demos say it ("" where it has none)
    reward: Callable[..., float] | None = None
    row_columns: tuple[str, ...] = ()  # columns of its rows its reward or environment reads, beyond ground_truth

    def __init__(self, dataset_config: dict[str, Any] | None = None, dataset_path: str | None = None) -> None:
        self.config: Any = validated(self.Config, self.name or type(self).__name__, dataset_config or {})
        self.dataset_path = dataset_path  # where a task that reads files finds them

    def rows(self, split: str, count: int | None = None, seed: int = 42,
             system_prompt: str | None = None) -> Any:
        """A datasets.Dataset of the split: None = its whole set, N = N rows chosen by `seed`."""
        raise NotImplementedError(f"{type(self).__name__} gives no rows")

    def demonstrations(self, count: int, seed: int) -> Any:
        """`count` training rows with the demonstrator's transcripts, drawn by `seed` (what SFT imitates)."""
        return self.rows("train", count, seed, self.system_prompt)

    def tools(self) -> list[Any]:
        return []

    def environment(self) -> type | None:
        return None

    def metrics(self, records: Iterable[dict[str, Any]]) -> dict[str, float]:
        return {}

    def is_right(self, text: str, row: dict[str, Any], trajectory: Any = None) -> bool | None:
        """Evaluation's verdict where the task owns its reward: right when the answer earns its full 1.0; None where
        it has none (the run's answer_checker judges)."""
        if self.reward is None:
            return None
        from hello_agents_rl.rewards.build import RewardComponent  # the reward's own calling convention

        context = {k: v for k, v in row.items() if k not in ("prompt", "completion", "ground_truth")}
        if trajectory is not None:
            context["trajectory"] = trajectory
        return RewardComponent("task", self.reward, 1.0).term(text, row.get("ground_truth", ""), **context) >= 1.0

    def tokenizer_corpus(self) -> tuple[str, ...]:
        """Text a small model's tokenizer built for this task should merge on (its names, its sentences)."""
        return ()


HELD_OUT_EVERY = 5  # a task that holds out a share of its own items: every 5th is the test split's


def in_split(index: int, split: str, every: int = HELD_OUT_EVERY) -> bool:
    """Whether item `index` of a task's own list belongs to `split` (every `every`-th is held out for test)."""
    return (index % every == 0) == (split == "test")


def subsample(rows: Any, count: int | None, seed: int) -> Any:
    """At most `count` rows, by a seeded shuffle (not the first N)."""
    if count is not None and count < len(rows):
        return rows.shuffle(seed=seed).select(range(count))
    return rows


def calls_made(record: dict[str, Any]) -> Calls:
    """The (tool, argument) pairs of one evaluated question: its `calls` ([tool, argument, result], as an agent's
    Tools record them) or the tool calls of its `transcript` (the tool loop's messages; its `calls` is a count)."""
    if isinstance(record.get("calls"), list):
        return {(str(tool), str(argument).strip()) for tool, argument, *_ in record["calls"]}
    return {(str(name), str(value).strip()) for message in record.get("transcript", [])
            for name, arguments in map(called, message.get("tool_calls") or [])
            for value in (arguments or {}).values()}
