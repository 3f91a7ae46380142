#!/usr/bin/env bash
# The fast path with the hand-written kernels (the last commit that had them) against this tree, on the 4x4
# workload, `ours` only, alternating one round each, 3 rounds: what the removal cost on the same host, same day.
#   git worktree add /tmp/before db060cf && benchmarks/kernels_before_after.sh /tmp/before
# Each run prints its line; docs/performance.md item 21 gives the figures of the run in docs/runs/before_after/.
set -euo pipefail
BEFORE=${1:?the worktree of the commit with the kernels}
OUT=${OUT:-outputs/before_after}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
for round in 0 1 2; do
  for tree in before after; do
    root=$([ "$tree" = before ] && echo "$BEFORE" || pwd)
    PYTHONPATH=$root/src .venv/bin/python "$root/benchmarks/real_model.py" --workloads 4x4 --rounds 1 --variants ours \
      --threads 2 --max-rss-gb 21 --workdir "/tmp/ba_$tree" --json "$OUT/${tree}_$round.json" 2>&1 \
      | grep -E "round 0 ours|failed|Error" | sed "s/^/$tree round $round: /"
  done
done
