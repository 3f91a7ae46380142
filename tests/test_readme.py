"""The README's generated parts cannot drift from the code, and it links nothing outside the repository."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import statistics
import tokenize
from pathlib import Path

from readme_blocks import read_block

from hello_agents_rl.workflows.actions import markdown_tables

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_parameter_tables_match_the_config() -> None:
    assert read_block("params") == markdown_tables(), "run: .venv/bin/python benchmarks/update_readme.py"


def _make_recipe(target: str) -> list[str]:
    """The commands of one Makefile target (its tab-indented lines)."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines)  # the rule, not a target-specific variable (`test: export X=1`)
                 if re.match(rf"{re.escape(target)}:(?!\s*export )", line))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_readme_test_command_is_what_ci_runs() -> None:
    promised = re.search(r"^make (\S+)\s+#.*what CI runs", README, re.M)
    assert promised, "the README's quick start names the test command CI runs"
    ci = [line.split() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith(("#", "set ", "cd "))]
    # CI runs exactly that target, after only the machine's set-up scripts of .ci/ (system packages)
    assert ci[-1] == ["make", promised[1]] and all(line[0].startswith(".ci/") for line in ci[:-1]), ci
    pytest_lines = [line for line in _make_recipe(promised[1]) if "pytest" in line]
    # "every test, the slow ones included": pytest over tests/ with no marker deselecting any
    assert len(pytest_lines) == 1, pytest_lines
    options = pytest_lines[0].split("pytest", 1)[1].split()
    assert options[-1] == "tests" and "-m" not in options and "-k" not in options, pytest_lines[0]


def _rendered(script: str, record: str) -> str:
    """What a benchmark script writes into the README from its record in docs/."""
    spec = importlib.util.spec_from_file_location(script, ROOT / "benchmarks" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.render_readme(json.loads((ROOT / "docs" / record).read_text()))


def test_the_demo_table_is_the_recorded_run_and_quotes_the_tests_margin() -> None:
    assert read_block("demo") == _rendered("demo_seeds", "demo_seeds.json"), "run: benchmarks/demo_seeds.py --readme"


def test_the_real_model_paragraph_is_the_recorded_benchmarks() -> None:
    assert read_block("real-model") == _rendered("real_model_readme", "real_model.json"), (
        "run: benchmarks/real_model_readme.py")


def test_the_speed_table_is_the_recorded_benchmarks() -> None:
    assert read_block("speed") == _rendered("speed_readme", "speed.json"), "run: benchmarks/speed_readme.py --record"


def test_links_stay_inside_the_repository() -> None:
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#]+)", doc.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            resolved = (doc.parent / target).resolve()
            assert ROOT in resolved.parents and resolved.exists(), f"{doc.name} links {target}"
        assert "../shared" not in doc.read_text(encoding="utf-8"), doc.name


def _module_exists(dotted: str) -> bool:
    parts, package = dotted.split("."), ROOT / "src"
    return any((package.joinpath(*parts[:i]).with_suffix(".py")).is_file()
               or (package.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(len(parts), 1, -1))


# "a/b/c.py", "a/b/", "a/b" (checked when "a" is a folder the text can mean), or a bare "c.py"/"c.cpp"/"c.h"
# ("<malloc.h>" is the system's, not ours)
_PATH_RE = re.compile(r"(?<![\w/.<$~-])((?:[\w-]+/)+[\w.-]*[\w/]|[\w-]+\.(?:py|cpp|h))(?![\w/-])")
_STACK = ("trl", "transformers", "torch", "peft", "accelerate", "datasets")  # paths into their installed source
_OURS = {f.name for folder in ("src", "tests", "benchmarks", "scripts") for f in (ROOT / folder).rglob("*")
         if f.suffix in (".py", ".cpp", ".h")}


def _stale_paths(text: str, here: Path) -> list[str]:
    """The paths `text` names that do not exist: relative to `here` or a folder above it (up to the repository),
    or to an installed package of the stack; a bare source file name anywhere in the repository."""
    bases = [here, *[p for p in here.parents if ROOT in (p, *p.parents)]]
    stale = []
    for path in _PATH_RE.findall(text):
        first = path.split("/", 1)[0]
        if "/" not in path:
            known, exists = True, path in _OURS
        elif first in _STACK:
            spec = importlib.util.find_spec(first)
            known, exists = True, Path(spec.submodule_search_locations[0], path.split("/", 1)[1]).exists()
        else:
            roots = [base for base in bases if (base / first).is_dir() or (base / first).is_file()]
            known, exists = bool(roots), any((base / path).exists() for base in roots)
        if known and not exists:
            stale.append(path)
    return stale


def _comments_and_docstrings(source: Path) -> str:
    text = source.read_text(encoding="utf-8")
    if source.suffix != ".py":  # C++: // and /* */
        return "\n".join(re.findall(r"//[^\n]*|/\*.*?\*/", text, re.S))
    kept, previous = [], tokenize.NEWLINE
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        # a comment, or a string standing alone as a statement: a docstring
        if token.type == tokenize.COMMENT or (
                token.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)):
            kept.append(token.string)
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type
    return "\n".join(kept)


def _stale_modules(text: str) -> list[str]:
    return [m for m in re.findall(r"\bhello_agents_rl(?:\.[a-z_]+)+", text)
            if m != "hello_agents_rl.pth" and not _module_exists(m)]


def test_the_docs_name_only_modules_and_files_that_exist() -> None:
    """A moved module must not leave the README, docs/, pyproject.toml or a comment pointing at where it used to be."""
    stale = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        stale += [(doc.name, p) for p in re.findall(r"src/hello_agents_rl/[\w/]+\.py", text) if not (ROOT / p).is_file()]
        stale += [(doc.name, m) for m in _stale_modules(text)]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    stale += [("pyproject.toml", p) for p in _stale_paths(pyproject, ROOT) + _stale_modules(pyproject)]
    for source in sorted(p for p in (ROOT / "src").rglob("*") if p.suffix in (".py", ".cpp", ".h")):
        text = _comments_and_docstrings(source)
        name = str(source.relative_to(ROOT))
        stale += [(name, p) for p in _stale_paths(text, source.parent) + _stale_modules(text)]
    assert stale == []


def test_the_lookups_tables_are_the_recorded_runs() -> None:
    from demo_lookups_seeds import report

    for block, folder, model in (("demo-lookups", "lookups", "tiny"), ("demo-agent-lookups", "agent_lookups", "tiny"),
                                 ("demo-lookups-smollm2", "lookups_smollm2", "smollm2"),
                                 ("demo-agent-lookups-smollm2", "agent_lookups_smollm2", "smollm2")):
        records = sorted((ROOT / "docs" / "runs" / folder).glob("seed*.json"))
        assert records, f"docs/runs/{folder} holds no run"
        runs = {int(path.stem.removeprefix("seed")): json.loads(path.read_text()) for path in records}
        table, verdicts = report(runs, model)
        shown = read_block(block)
        assert table in shown and all(verdict in shown for verdict in verdicts), (
            f"run: benchmarks/demo_lookups_seeds.py --reuse --doc{' --agent' if 'agent' in block else ''}"
            f"{' --model smollm2' if model != 'tiny' else ''}")


def test_every_benchmark_command_in_the_docs_names_variants_that_exist() -> None:
    """A reader copies a command from the docs: `ours-<switch>` must name switches of trainers/fast/switches.py, and
    every other variant one the benchmark runs (a historical block once named a removed kernel)."""
    from hello_agents_rl.trainers.fast.switches import OPTIMISATIONS

    plain = {"ours", "trl", "trl_gc", "trl_tuned", "vllm", "ours_unchunked"}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = [(page.name, variant) for page in pages for found in re.findall(r"--variants ([\w,+\-]+)", page.read_text())
             for variant in found.split(",")]
    assert named
    unknown = [(page, variant) for page, variant in named
               if not (variant in plain or re.fullmatch(r"ours_chunk\d+", variant)
                       or (variant.startswith("ours-")
                           and set(variant.removeprefix("ours-").split("+")) <= set(OPTIMISATIONS)))]
    assert unknown == []


def test_make_demo_runs_the_recipe_the_readmes_table_measured() -> None:
    """A newcomer's `make demo` figures must match a row of the table: the same recipe (quick or full)."""
    measured = json.loads((ROOT / "docs" / "demo_seeds.json").read_text())["command"]
    demo = next(line for line in _make_recipe("demo") if "hello-agents-rl demo" in line)
    assert ("--quick" in measured.split()) == ("--quick" in demo.split()), (measured, demo)


def test_the_agent_lookups_sentence_quotes_its_recorded_seeds() -> None:
    runs = [json.loads((ROOT / "docs" / "runs" / "agent_lookups" / f"seed{seed}.json").read_text()) for seed in (0, 1, 2)]
    sft_minutes = round(statistics.median(run["train_runtime_s"]["sft"] for run in runs) / 60)
    grpo = sorted(round(run["train_runtime_s"]["grpo"] / 60) for run in runs)
    improved = [run for run in runs if run["grpo"]["accuracy"] > run["sft"]["accuracy"]]
    assert f"SFT {sft_minutes} minutes, GRPO {grpo[0]}-{grpo[-1]}" in " ".join(README.split())
    assert f"improved {['no', 'one', 'two', 'every'][len(improved)]} seed of three" in " ".join(README.split())
    assert all(f"{run['sft']['accuracy']:.1%} -> {run['grpo']['accuracy']:.1%}" in README for run in improved)


def test_the_agent_evaluation_speed_is_the_recorded_benchmark() -> None:
    assert read_block("agent-eval-speed") == _rendered("agent_eval_speed", "agent_eval_speed.json"), (
        "run: benchmarks/agent_eval_speed.py MODEL --smollm2 --record")


def test_the_design_docs_step_map_is_the_recorded_measurement() -> None:
    assert read_block("step-files") == _rendered("step_files", "step_files.json"), (
        "run: python benchmarks/step_files.py --record (with hello-agents installed)")
