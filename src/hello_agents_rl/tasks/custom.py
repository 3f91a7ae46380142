"""User datasets: JSONL, CSV or a datasets.Dataset, with configurable column names.

Files are read line by line (not with datasets' loaders) so that a malformed row is reported
with its file and line number.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hello_agents_rl.errors import ConfigError
from hello_agents_rl.tasks.formatting import build_messages, format_solution

if TYPE_CHECKING:  # datasets loads only where rows are built: the config layer validates without it
    from datasets import Dataset


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # -sig: a byte-order mark (Excel, Notepad) is not text
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); re-save it as UTF-8") from None


def read_jsonl(path: Path) -> Iterator[tuple[Any, dict[str, Any]]]:
    """One JSON object per line, or (a .json file) one JSON array of objects, pretty-printed or not."""
    text = _read_text(path)
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        yield from _read_json_array(path, text)
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}:{number}: invalid JSON ({error.msg}); each line must be one JSON object") from None
        if not isinstance(record, dict):
            raise ConfigError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


def _read_json_array(path: Path, text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        records = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path}:{error.lineno}: invalid JSON ({error.msg})") from None
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise ConfigError(f"{path}: item {index} is {type(record).__name__}, expected a JSON object")
        yield f"item {index}", record


def read_csv(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.reader(io.StringIO(_read_text(path), newline=""))
    header = next(reader, None)
    if not header:
        return
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):  # DictReader would file extras under None and fill gaps with None
            raise ConfigError(
                f"{path}:{reader.line_num}: {len(row)} fields where the header has {len(header)}; a comma inside "
                'a value needs the value in double quotes ("1,000")'
            )
        yield reader.line_num, dict(zip(header, row))


def build_rows(
    records: Iterable[tuple[Any, dict[str, Any]]],
    question_column: str,
    answer_column: str,
    system_prompt: str | None,
    source: str,
) -> Dataset:
    """Records -> the shared schema: prompt, completion, ground_truth, question."""
    from hello_agents_rl.rewards import parse_ground_truth

    rows: dict[str, list[Any]] = {"prompt": [], "completion": [], "ground_truth": [], "question": []}
    for index, (where, record) in enumerate(records):
        for column in (question_column, answer_column):
            if column not in record:
                fix = ("add it to this row, or drop the row" if index else  # earlier rows had it: this row lacks it
                       "set question_column/answer_column to the right names")
                raise ConfigError(f"{source}:{where}: no column {column!r} (columns: {sorted(record)}); {fix}")
        for column in (question_column, answer_column):
            if record[column] is None or (isinstance(record[column], str) and not record[column].strip()):
                raise ConfigError(f"{source}:{where}: {column!r} is empty (null); give it a value or drop the row")
        truth = parse_ground_truth(record[answer_column])
        if truth is None:
            raise ConfigError(
                f"{source}:{where}: answer {str(record[answer_column])[-60:]!r} has no final number; "
                "end it with 'Final Answer: <number>', '#### <number>' or '\\boxed{<number>}', or give the number alone"
            )
        question = str(record[question_column])
        rows["question"].append(question)
        rows["prompt"].append(build_messages(question, system_prompt))
        rows["completion"].append(_completion(record, f"{source}:{where}")
                                  or [{"role": "assistant", "content": format_solution(record[answer_column])}])
        rows["ground_truth"].append(_canonical(truth))
    if not rows["question"]:
        raise ConfigError(f"{source}: no examples found; the dataset is empty")
    from datasets import Dataset

    return Dataset.from_dict(rows)


def _completion(record: dict[str, Any], where: str) -> list[dict[str, Any]] | None:
    """A row's own `completion`, what SFT imitates: a text, or a transcript of assistant turns (with `tool_calls`)
    and `tool` results; None without one. Each call's arguments become a JSON string: as dicts, Arrow would give
    every call the keys of every other tool, set to null."""
    completion = record.get("completion")
    if completion is None or completion == "" or completion == []:
        return None
    if isinstance(completion, str):
        return [{"role": "assistant", "content": completion}]
    fix = ("give `completion` as a text, or a list of messages: assistant turns (content, tool_calls) and "
           "tool results (role tool, name, content)")
    if not isinstance(completion, list):
        raise ConfigError(f"{where}: `completion` is {type(completion).__name__}; {fix}")
    messages = []
    for index, message in enumerate(completion):
        if not isinstance(message, dict) or message.get("role") not in ("assistant", "tool"):
            raise ConfigError(f"{where}: `completion` message {index} is not an assistant or tool message; {fix}")
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", call) if isinstance(call, dict) else None
            if not isinstance(function, dict) or not function.get("name"):
                raise ConfigError(f"{where}: `completion` message {index} has a tool call without a name; "
                                  'write each as {"function": {"name": ..., "arguments": {...}}}')
            arguments = function.get("arguments", {})
            calls.append({"type": "function", "function": {"name": function["name"], "arguments": (
                arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False))}})
        messages.append({"role": message["role"], "content": str(message.get("content") or ""),
                         **({"tool_calls": calls} if calls else {}),
                         **({"name": str(message["name"])} if message.get("name") else {})})
    return messages


def _canonical(value: Fraction) -> str:
    """A Fraction as the plain number a person writes: 72, 0.75, 1/3."""
    if value.denominator == 1:
        return str(value.numerator)
    decimal = repr(float(value))
    return decimal if Fraction(decimal) == value else str(value)


def load_file(path: str, question_column: str, answer_column: str, system_prompt: str | None) -> Dataset:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"`dataset`: file {path!r} not found; give a .jsonl or .csv path, 'gsm8k' or 'arithmetic'")
    readers = {".jsonl": read_jsonl, ".json": read_jsonl, ".csv": read_csv}
    if file.suffix.lower() not in readers:
        raise ConfigError(f"`dataset`: {path!r} is not .jsonl or .csv; convert it, or pass a datasets.Dataset")
    return build_rows(readers[file.suffix.lower()](file), question_column, answer_column, system_prompt, str(file))


def from_dataset(data: Dataset, question_column: str, answer_column: str, system_prompt: str | None) -> Dataset:
    if "prompt" in data.column_names and "ground_truth" in data.column_names:
        return data  # already in our schema (e.g. the demo's own arithmetic data)
    return build_rows(enumerate(data, start=1), question_column, answer_column, system_prompt, "dataset row")
