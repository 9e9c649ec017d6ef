"""Replace a file atomically: a reader (node_exporter, a web server) sees the old
file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile


def write(path: str, text: str, prefix: str = ".mq-") -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
