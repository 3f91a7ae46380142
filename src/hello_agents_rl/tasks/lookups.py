"""The multi-step tool task: questions about generated people, cities and companies that take 2 to 4 dependent
tool calls, each call's argument read from the question or from an earlier call's result.

An embedded knowledge base, drawn from fixed seeds, one per split, so that the held-out questions are about
entities never seen in training (memorising facts cannot answer them). One tool looks an entity up by name
(`lookup`), the calculator adds; `weather` is a distractor (config `distractors`). Question kinds, by the calls
they take:

    2: the population of the city where P lives        lookup(P) -> city C; lookup(C) -> population
    3: the age of the founder of the company P works at lookup(P) -> company E; lookup(E) -> founder F;
                                                        lookup(F) -> age
    4: that founder's age plus P's age                  ... then calculator("<F's age> + <P's age>")

The imperfect demonstrator (SFT's data) has two habits of its own: it skips the first lookup and guesses
(`guess_rate`), or it stops one call early and answers the last number it has read (`early_stop_rate`, per
chain length: the longer the chain, the likelier). Greedy SFT takes its majority habit at each step; GRPO, rewarded
for the right final answer, has to find the whole chain in its samples.
"""

from __future__ import annotations

import functools
import json
import random
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, field_validator

from hello_agents_rl.tasks.base import Calls, Task, TaskConfig, calls_made, share, subsample, validated
from hello_agents_rl.tasks.formatting import build_messages

SYSTEM_PROMPT = "Answer with the tools. End with 'Final Answer: <number>'."
_KB_SEEDS = {"train": 7001, "test": 7002}  # fixed: the held-out entities never move with the run's seed
# people, cities, companies. Training's are many, so that SFT's examples rarely meet one entity twice: with 240
# people each seen ~80 times, the tiny model remembered their facts instead of reading the results, and on held-out
# entities answered numbers it had not read (docs/agentic.md).
_SIZES = {"train": (6000, 600, 600), "test": (240, 60, 60)}
_SYLLABLES = ("ka", "lo", "mi", "ra", "ven", "tor", "sa", "bel", "dun", "fi", "gar", "hol", "ist", "jo", "kel",
              "mar", "nor", "pel", "quin", "ros", "sul", "tam", "ul", "vor", "wen", "yal", "zed", "bri", "cor", "dal")
TEST_QUESTIONS = 250


_LENGTHS = (2, 3, 4)
_EARLY_STOP = {2: 0.3, 3: 0.55, 4: 0.7}  # the longer the chain, the likelier the demonstrator stops short


class LookupConfig(TaskConfig):
    """`dataset_config` of the `lookups` dataset: a wrong type is refused naming its key, never read as something
    else (`"false"` is not true)."""

    chain_lengths: tuple[StrictInt, ...] = Field(
        _LENGTHS, min_length=1, description="calls per question, each 2, 3 or 4, as a list (drawn evenly)")
    distractors: StrictBool = Field(False, description="true or false: a `weather` tool beside lookup and the calculator")
    names: Literal["words", "ids"] = Field(
        "words", description='words ("Kalo Venra", "Torsa Works") or ids (P4821, C017, K305: a tiny model copies digits)')
    guess_rate: float = share(0.2, "how often the demonstrator skips the first lookup and guesses")
    early_stop_rate: dict[int, Annotated[float, Field(ge=0, le=1, strict=True)]] = Field(
        default_factory=lambda: dict(_EARLY_STOP),
        description="chain length (2, 3 or 4) -> a number in [0, 1]: how often the demonstrator stops one call early")

    @field_validator("chain_lengths", "early_stop_rate")
    @classmethod
    def _known_lengths(cls, value: Any) -> Any:
        if any(length not in _LENGTHS for length in value):
            raise ValueError(f"a chain length is 2, 3 or 4 (got {sorted(value)})")
        return value

    @field_validator("early_stop_rate")
    @classmethod
    def _over_the_defaults(cls, value: dict[int, float]) -> dict[int, float]:
        return {**_EARLY_STOP, **value}


def _name(rng: random.Random, used: set[str], words: int, suffix: str = "") -> str:
    while True:
        name = " ".join("".join(rng.choice(_SYLLABLES) for _ in range(2)).capitalize() for _ in range(words)) + suffix
        if name not in used:
            used.add(name)
            return name


@functools.cache
def knowledge_base(split: str, names: str = "words") -> dict[str, dict[str, Any]]:
    """name -> record, the split's entities (drawn once per process; read it, never change it); no name is in both
    splits."""
    taken = set() if split == "test" else set(knowledge_base("test", names))  # the held-out split never moves
    return _entities(_KB_SEEDS[split], taken, names, _SIZES[split])


def _id(rng: random.Random, used: set[str], prefix: str, digits: int) -> str:
    while True:
        name = f"{prefix}{rng.randrange(10 ** digits):0{digits}d}"
        if name not in used:
            used.add(name)
            return name


def _entities(seed: int, taken: set[str], names: str, sizes: tuple[int, int, int]) -> dict[str, dict[str, Any]]:
    rng, used = random.Random(seed), set(taken)
    n_people, n_cities, n_companies = sizes
    if names == "ids":
        cities = [_id(rng, used, "C", 3) for _ in range(n_cities)]
        companies = [_id(rng, used, "K", 3) for _ in range(n_companies)]
        people = [_id(rng, used, "P", 4) for _ in range(n_people)]
    else:
        cities = [_name(rng, used, 1) for _ in range(n_cities)]
        companies = [_name(rng, used, 1, " Works") for _ in range(n_companies)]
        people = [_name(rng, used, 2) for _ in range(n_people)]
    kb: dict[str, dict[str, Any]] = {}
    for city in cities:
        kb[city] = {"kind": "city", "population": rng.randint(10_000, 999_999)}
    for person in people:
        kb[person] = {"kind": "person", "age": rng.randint(20, 79), "city": rng.choice(cities),
                      "employer": rng.choice(companies)}
    for company in companies:
        kb[company] = {"kind": "company", "founder": rng.choice(people), "employees": rng.randint(10, 9_999)}
    return kb


def record_text(name: str, record: dict[str, Any]) -> str:
    if record["kind"] == "person":
        return f"{name}: age {record['age']}, lives in {record['city']}, works at {record['employer']}."
    if record["kind"] == "city":
        return f"{name}: a city of population {record['population']}."
    return f"{name}: a company founded by {record['founder']}, {record['employees']} employees."


@functools.cache
def _every_entity() -> dict[str, dict[str, Any]]:
    """Both splits' entities, either way of naming them: what `lookup` answers and `chain_of` reads."""
    return {name: record for names in ("words", "ids") for split in ("train", "test")
            for name, record in knowledge_base(split, names).items()}


def lookup(name: str) -> str:
    """Look up a person, a city or a company by its exact name.

    Args:
        name: The exact name, for example "Kalo Venra" or "Torsa Works".
    """
    record = _every_entity().get(str(name).strip())
    if record is None:
        raise ValueError(f"no entry named {name!r}")
    return record_text(str(name).strip(), record)


def weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    return f"{city}: {random.Random(city).choice(['sunny', 'cloudy', 'rain', 'windy'])}."


def tokenizer_corpus() -> tuple[str, ...]:
    """Text for a small model's tokenizer to merge on: the names' syllables and the task's sentences, so that a
    name is a few tokens and copying it from a result into the next call is a short span."""
    kb = knowledge_base("train")
    sample = sorted(kb)[:40]
    return (*(s.capitalize() for s in _SYLLABLES), *_SYLLABLES, *(record_text(n, kb[n]) for n in sample),
            *(q.text for q in questions("train", LookupConfig.model_validate({}), 12, 0)),
            '{"name": "lookup", "arguments": {"name": "Kalo Venra"}}', '{"name": "calculator", "arguments": '
            '{"expression": "61 + 23"}}', SYSTEM_PROMPT)


def tool_names(config: LookupConfig) -> list[str]:
    return ["lookup", "calculator"] + (["weather"] if config.distractors else [])


@dataclass(frozen=True)
class Question:
    text: str
    answer: int
    calls: list[tuple[str, str, str]]  # the whole chain: (tool, argument, result)


def _question(kb: dict[str, dict[str, Any]], person: str, length: int) -> Question:
    me = kb[person]
    chain = [("lookup", person, record_text(person, me))]
    if length == 2:
        city = me["city"]
        chain.append(("lookup", city, record_text(city, kb[city])))
        return Question(f"What is the population of the city where {person} lives?", kb[city]["population"], chain)
    company = me["employer"]
    founder = kb[company]["founder"]
    chain += [("lookup", company, record_text(company, kb[company])), ("lookup", founder, record_text(founder, kb[founder]))]
    if length == 3:
        return Question(f"How old is the founder of the company where {person} works?", kb[founder]["age"], chain)
    total = kb[founder]["age"] + me["age"]
    chain.append(("calculator", f"{kb[founder]['age']} + {me['age']}", str(total)))
    return Question(f"What is the age of the founder of the company where {person} works plus {person}'s age?",
                    total, chain)


def questions(split: str, config: LookupConfig, count: int | None, seed: int) -> list[Question]:
    """The split's questions: the test split a fixed set, the train split `count` seeded draws."""
    kb = knowledge_base(split, config.names)
    people = sorted(name for name, r in kb.items() if r["kind"] == "person")
    rng = random.Random(_KB_SEEDS[split] if split == "test" else seed)
    count = TEST_QUESTIONS if count is None else count
    return [_question(kb, rng.choice(people), config.chain_lengths[i % len(config.chain_lengths)])
            for i in range(count)]


def _call(tool: str, argument: str) -> dict[str, Any]:
    key = "expression" if tool == "calculator" else "name"
    return {"type": "function", "function": {"name": tool, "arguments": json.dumps({key: argument})}}


def demonstrate(question: Question, config: LookupConfig, rng: random.Random) -> list[dict[str, Any]]:
    """The imperfect demonstrator's transcript: the whole chain, a guess, or a chain stopped one call early."""
    if rng.random() < config.guess_rate:  # no lookup: a plausible number, wrong
        guess = question.answer + rng.choice([-1, 1]) * rng.randint(1, max(2, question.answer // 3))
        return [{"role": "assistant", "content": f"Final Answer: {guess}"}]
    chain = question.calls
    if rng.random() < config.early_stop_rate.get(len(chain), 0.0):
        chain = chain[:-1]
    messages: list[dict[str, Any]] = []
    for tool, argument, result in chain:
        messages += [{"role": "assistant", "content": "", "tool_calls": [_call(tool, argument)]},
                     {"role": "tool", "name": tool, "content": result}]
    answer = question.answer if chain == question.calls else _last_number(chain[-1][2])
    return messages + [{"role": "assistant", "content": f"Final Answer: {answer}"}]


def _last_number(text: str) -> int:
    return int(re.findall(r"\d+", text)[0])  # a person's age, a company's employees: the number it has read


def make_dataset(split: str = "train", num_samples: int | None = None, seed: int = 42,
                 params: dict[str, Any] | LookupConfig | None = None, system_prompt: str | None = SYSTEM_PROMPT
                 ) -> Any:
    """Rows of prompt, completion (the demonstrator's), ground_truth and question; None = the test split's set.
    `params`: the task's dataset_config, or the LookupConfig it was validated into."""
    from datasets import Dataset

    config = params if isinstance(params, LookupConfig) else validated(LookupConfig, "lookups", params or {})
    rng = random.Random(seed + 1)
    rows: dict[str, list] = {"prompt": [], "completion": [], "ground_truth": [], "question": [], "chain_length": []}
    for question in questions(split, config, num_samples, seed):
        rows["question"].append(question.text)
        rows["prompt"].append(build_messages(question.text, system_prompt))
        rows["completion"].append(demonstrate(question, config, rng))
        rows["ground_truth"].append(str(question.answer))
        rows["chain_length"].append(len(question.calls))
    return Dataset.from_dict(rows)


_TEMPLATES = {  # question text -> (its chain length, the person it is about)
    2: re.compile(r"What is the population of the city where (.+) lives\?"),
    3: re.compile(r"How old is the founder of the company where (.+) works\?"),
    4: re.compile(r"What is the age of the founder of the company where (.+) works plus \1's age\?"),
}


def chain_of(question: str) -> Question | None:
    """The whole chain a question of this task takes (its entities, in whichever split), or None for another text."""
    kb = _every_entity()
    for length, template in _TEMPLATES.items():
        found = template.fullmatch(question.strip())
        if found and kb.get(found[1], {}).get("kind") == "person":
            return _question(kb, found[1], length)
    return None


def chain_made(question: str, made: Calls) -> bool:
    """Whether the calls `made` ((tool, argument) pairs, any order, repeats and extra calls allowed) include every
    call of the question's chain: the agent reached the answer's inputs, whatever it answered."""
    chain = chain_of(question)
    return chain is not None and all((tool, argument) in made for tool, argument, _ in chain.calls)


def chain_completion(records: list[dict[str, Any]]) -> float:
    """The share of evaluated questions whose every chain call was made."""
    return sum(chain_made(r["question"], calls_made(r)) for r in records) / len(records) if records else 0.0


class Lookups(Task):
    """`dataset: lookups`: chains of 2 to 4 dependent tool calls about entities the held-out split never shares."""

    name = "lookups"
    Config = LookupConfig
    system_prompt = SYSTEM_PROMPT
    max_tool_turns = 5  # one above the longest chain
    demonstrator = "guesses or stops a chain of lookups short"

    def rows(self, split: str, count: int | None = None, seed: int = 42, system_prompt: str | None = SYSTEM_PROMPT
             ) -> Any:
        """train: N seeded draws; test: the fixed held-out set, `count` of it by a seeded shuffle."""
        if split == "train":
            return make_dataset(split, count, seed, self.config, system_prompt)
        return subsample(make_dataset(split, None, seed, self.config, system_prompt), count, seed)

    def tools(self) -> list[Any]:
        return [name if name == "calculator" else f"{__name__}:{name}" for name in tool_names(self.config)]

    def metrics(self, records: Any) -> dict[str, float]:
        return {"chain_completion_rate": chain_completion(list(records))}

    def tokenizer_corpus(self) -> tuple[str, ...]:
        return tokenizer_corpus()
