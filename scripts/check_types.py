"""mypy over the package against a baseline that may only shrink: `python scripts/check_types.py [--update]`.

The baseline (scripts/mypy_baseline.json) counts today's errors per file. A file with more errors than its count, or
a new file with any, fails; a file with fewer says so and asks for `--update`, so that the count goes down with it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "scripts" / "mypy_baseline.json"
ERROR = re.compile(r"^(?P<file>[^:]+\.py):\d+: error:")


def errors_per_file() -> Counter[str]:
    run = subprocess.run([sys.executable, "-m", "mypy", "src/hello_agents_rl", "--ignore-missing-imports",
                          "--no-error-summary", "--no-pretty"], cwd=ROOT, capture_output=True, text=True)
    if run.returncode not in (0, 1):
        sys.exit(f"mypy did not run: {run.stderr.strip() or run.stdout.strip()}")
    return Counter(m["file"] for line in run.stdout.splitlines() if (m := ERROR.match(line)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write today's counts as the baseline")
    args = parser.parse_args()
    found = errors_per_file()
    if args.update:
        BASELINE.write_text(json.dumps(dict(sorted(found.items())), indent=1) + "\n")
        print(f"baseline: {sum(found.values())} errors in {len(found)} files")
        return 0
    baseline = json.loads(BASELINE.read_text())
    worse = {f: (n, baseline.get(f, 0)) for f, n in found.items() if n > baseline.get(f, 0)}
    better = {f: (found.get(f, 0), n) for f, n in baseline.items() if found.get(f, 0) < n}
    for file, (now, allowed) in sorted(worse.items()):
        print(f"FAIL {file}: {now} mypy errors, the baseline allows {allowed}")
    for file, (now, allowed) in sorted(better.items()):
        print(f"better {file}: {now} errors against {allowed}: run `python scripts/check_types.py --update`")
    print(f"mypy: {sum(found.values())} errors (baseline {sum(baseline.values())})")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
