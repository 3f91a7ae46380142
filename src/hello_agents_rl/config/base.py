"""What every action's config shares: the base model, bounded counts, how numbers are read, how errors read."""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from hello_agents_rl.config.their_names import OUR_KEY_FOR
from hello_agents_rl.errors import ConfigError, did_you_mean
from hello_agents_rl.paths import local_path_problem, writable_problem

# Far beyond any real run, and inside the int32 the libraries below keep steps and sizes in.
MAX_COUNT = 2**31 - 1
MAX_SEED = 2**32 - 1  # numpy's seeds are 32-bit
Count = Annotated[int, Field(le=MAX_COUNT)]


def require(problem: str | None) -> None:
    if problem:
        raise ValueError(problem)


def checked(problem: Callable[[str], str | None]) -> AfterValidator:
    """A field validator from a `value -> what is wrong, or None` check."""

    def check(value: str) -> str:
        require(problem(value))
        return value

    return AfterValidator(check)


@dataclass(frozen=True)
class PathRole:
    """Field metadata: the key names something on disk. A caller that confines paths (the MCP server's --root)
    finds every such key here, at any depth, instead of keeping its own list of key names.

    kind: `path` is always a path; `model` is a hub id or a local path (paths.looks_like_local_path); `dataset`
    is a built-in name, a task, a hub id or a file; `storage` is a database URL; `parameters` is a library's own
    parameters (a task's dataset_config), any nested string of which the library may open as a file; `task_ref`
    is a reasoning-gym row's reference (JSON), whose `params` are such parameters."""

    kind: Literal["path", "model", "dataset", "storage", "parameters", "task_ref"] = "path"


@dataclass(frozen=True)
class SectionOf:
    """Field metadata: a dict (or list of dicts) holding another config's keys. shape: `section` (a dict of its
    keys: a pipeline stage, search's base), `space` (key -> choices or a range), `rows` (a list of such dicts)."""

    model: type[BaseModel]
    shape: Literal["section", "space", "rows"] = "section"


LocalPath = Annotated[str, PathRole()]
ModelSource = Annotated[str, checked(local_path_problem), PathRole("model")]  # a hub id, or a path that exists
WritableFolder = Annotated[str, checked(writable_problem), PathRole()]
WritableFile = Annotated[str, checked(lambda value: writable_problem(value, "file")), PathRole()]


class Base(BaseModel):
    # allow_inf_nan=False: "inf"/"nan" (numbers or strings) are refused for every float key
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, validate_assignment=True, allow_inf_nan=False)

    action: str = Field("train", description="What to do: one of the actions in hello_agents_rl.workflows.actions.ACTIONS.")


_NUMBER_READERS = {kind: TypeAdapter(kind, config=ConfigDict(allow_inf_nan=False)) for kind in (int, float)}


def read_number(value: Any, kind: type) -> int | float | None:
    """`value` read as an int or float key reads it (YAML's unquoted 1e-3 arrives as the string '1e-3': 0.001),
    or None when it is no finite number of that kind. A bool is never a number here."""
    if isinstance(value, bool):
        return None
    try:
        return _NUMBER_READERS[kind].validate_python(value)
    except ValidationError:
        return None


def numeric_kinds(annotation: Any) -> list[type]:
    """The number types a field accepts: [int], [float], or [] for a key that is not a number."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) is not Annotated else ()
    plain = {typing.get_args(arg)[0] if typing.get_origin(arg) is Annotated else arg for arg in args or (annotation,)}
    return [kind for kind in (int, float) if kind in plain]  # Count | None: the Annotated int counts as int


def first_error(error: ValidationError, model: type[BaseModel]) -> str:
    """The first problem pydantic found, as `key`: what is wrong (got value). key: what the key means."""
    details = error.errors()[0]
    message = details["msg"].removeprefix("Value error, ")
    if not details["loc"]:  # a whole-model check (the reward) already names its key
        return message
    key = ".".join(str(part) for part in details["loc"])
    given = details.get("input")
    shown = "" if isinstance(given, dict) else f" (got {given!r})"
    field = model.model_fields.get(str(details["loc"][0]))
    hint = f". {details['loc'][0]}: {field.description}" if field is not None and field.description else ""
    return f"`{key}`: {message}{shown}{hint}"


def nested(model: type[BaseModel], params: dict[str, Any], section: str) -> Any:
    """A section of another config (search's base, a pipeline stage) validated as `model`; keys named `section.key`."""
    known = list(model.model_fields)
    unknown = [key for key in params if key not in known]
    if unknown:
        raise ValueError("; ".join(f"`{section}.{key}`: unknown parameter{suggestion(key, known)}" for key in unknown))
    try:
        return model(**params)
    except ValidationError as error:
        raise ValueError(f"`{section}`: " + first_error(error, model)) from None


def suggestion(key: str, known: list[str]) -> str:
    """'; did you mean `x`?': our key for TRL's or PEFT's name of it, else the closest known name."""
    ours = OUR_KEY_FOR.get(key)
    if ours in known:
        return f"; did you mean `{ours}`? (TRL's `{key}` is our `{ours}`)"
    return did_you_mean(key, known)


def section_hint(key: str, value: Any, known: list[str]) -> str:
    """'; it is the `step` reward's parameter...': a reward or tool-shaping parameter given at the top level."""
    from hello_agents_rl.config.checks import nested_key_home  # the reward layer knows its own parameters

    home = nested_key_home(key)
    if home is None or home[0] not in known:
        return ""
    section, term = home
    where = ("" if section == "tool_reward" else
             f" (read with reward_type {term}, or in a combined reward's {term} component)")
    return f"; it is the `{term}` reward's parameter: write {json.dumps({section: {key: value}}, default=str)}{where}"


def validate(model: type[BaseModel], params: dict[str, Any]) -> Any:
    """Validate parameters against one action's model; raise ConfigError naming every unknown key and the fix."""
    action = params.get("action", "train")
    known = list(model.model_fields)
    unknown = [key for key in params if key not in known]
    if unknown:
        each = "; ".join(f"`{key}`: unknown parameter for action {action!r}"
                         f"{section_hint(key, params[key], known) or suggestion(key, known)}" for key in unknown)
        raise ConfigError(f"{each} (run `hello-agents-rl {action} --help` for the list)")
    for key, value in params.items():  # NaN slips through pydantic's gt/ge checks
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"`{key}`: must be a finite number (got {value})")
    try:
        return model(**params)
    except ValidationError as error:
        raise ConfigError(first_error(error, model)) from None


def describe_fields(model: type[BaseModel]) -> list[tuple[str, str, str]]:
    """(name, default, description) rows: for the README table, CLI help and tool schema."""
    rows = []
    for name, field in model.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default
        rows.append((name, "required" if field.is_required() else repr(default), field.description or ""))
    return rows
