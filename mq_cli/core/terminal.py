"""The one status line a drain keeps on stderr at a terminal, and the other
writers to stderr that must not run into it.

Only `mq drain` at a terminal draws one (never under cron or in a pipe). A log
line or a handler's output written while it shows would start in its middle
("about to failucceeded, 1 failed"), so every such writer calls :func:`clear`
first: the line is erased and the text starts at column 0 of an empty line.
The drain draws it again at its next update. Everything here runs in the
drain's main thread, so no lock is needed.
"""

from __future__ import annotations

import shutil
import sys

_shown = False


def draw(text: str) -> None:
    """Show ``text`` as the status line, cut to the terminal's width: a line that
    wrapped could not be erased by :func:`clear`."""
    global _shown
    width = shutil.get_terminal_size((80, 24)).columns
    if len(text) >= width:
        text = text[: max(width - 2, 0)] + "…"
    try:
        sys.stderr.write(f"\r{text}\033[K")
        sys.stderr.flush()
    except OSError:  # the terminal went away: nothing to show it on
        return
    _shown = True


def clear() -> None:
    """Erase the status line, if one shows, before writing anything else to stderr."""
    global _shown
    if not _shown:
        return
    _shown = False
    try:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
    except OSError:
        pass
