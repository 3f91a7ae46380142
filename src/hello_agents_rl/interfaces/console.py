"""What the console gets from a command or a Python call: the book's lines; on a pipe or in a file, no progress
bars.

The training bar already draws only on a terminal (trainers/callbacks.py, tqdm's `disable=None`). The bars of
the libraries below it (transformers' "Loading weights" and "Writing model shards", datasets' map bars) draw
whatever the stream, so when stderr (where tqdm writes) is not a terminal they are switched off through their
own settings. Those are environment variables, read when the libraries are imported (after this runs: the
command line imports neither) and inherited by the processes a command starts (jobs, `accelerate launch`
ranks). A value the user set stays as set.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import TextIO

PROGRESS_BAR_SWITCHES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")
# Deprecations one dependency raises about another's call: nothing a user, or this project, can act on.
DEPENDENCY_DEPRECATIONS = (
    r"`is_gradient_checkpointing` is deprecated",  # transformers 5, on TRL's own call (trl/models/utils.py)
)


def quiet_console(stream: TextIO | None = None) -> None:
    """Silence what is not ours to fix, everywhere; the libraries' progress bars where `stream` is no terminal."""
    for message in DEPENDENCY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
    if not _is_terminal(sys.stderr if stream is None else stream):
        for name in PROGRESS_BAR_SWITCHES:
            os.environ.setdefault(name, "1")


def quiet_libraries(stream: TextIO | None = None) -> None:
    """quiet_console for a call from Python (RLTrainingTool().run): the libraries may be imported already, so
    their bars are also switched off through their own functions; a terminal keeps them."""
    quiet_console(stream)
    if _is_terminal(sys.stderr if stream is None else stream):
        return
    if "datasets" in sys.modules:
        import datasets

        datasets.disable_progress_bars()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:  # its bars read the hub's switch once, at import
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except ValueError:  # a closed stream
        return False
