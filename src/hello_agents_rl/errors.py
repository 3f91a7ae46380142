"""A leaf: the one error users see, and the one did-you-mean every message uses. Imports nothing of the package."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """Invalid user input: names the key, what is wrong and the fix."""


def did_you_mean(word: object, known: Iterable[object]) -> str:
    """'; did you mean `x`?' for the closest known name, or '' when none is close."""
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""
