"""Rows grouped by completion length, so a forward pads each group to its own longest, not the batch's."""

from __future__ import annotations

BUCKET_OVERHEAD_TOKENS = 256  # padding worth one more forward call
MAX_BUCKETS = 4


def length_buckets(lengths: list[int]) -> list[tuple[list[int], int]]:
    """Rows grouped by completion length so each group pads only to its own longest: (rows, width) pairs.

    One long completion would otherwise pad every row of the batch to its length (TRL pads to the batch's
    longest), multiplying the forward's compute and activation memory. Adjacent length groups are merged
    while merging adds less padding than BUCKET_OVERHEAD_TOKENS, and down to MAX_BUCKETS groups.
    """
    by_length: dict[int, list[int]] = {}
    for row, length in enumerate(lengths):
        by_length.setdefault(int(length), []).append(row)
    buckets = [(rows, length) for length, rows in sorted(by_length.items())]
    while len(buckets) > 1:
        costs = [len(lo[0]) * (hi[1] - lo[1]) for lo, hi in zip(buckets, buckets[1:])]
        best = min(range(len(costs)), key=costs.__getitem__)
        if costs[best] >= BUCKET_OVERHEAD_TOKENS and len(buckets) <= MAX_BUCKETS:
            break
        (low, _), (high, width) = buckets[best], buckets[best + 1]
        buckets[best : best + 2] = [(low + high, width)]
    return buckets
