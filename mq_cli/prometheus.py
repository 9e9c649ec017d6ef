"""`mq stats --prometheus FILE`: the node_exporter textfile format, written atomically."""

from __future__ import annotations

import os
import tempfile
import time

from .models import QueueStats

STATES = ("ready", "delayed", "processing", "stalled", "failed")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(stats: dict[str, QueueStats], now: float | None = None) -> str:
    lines = [
        "# HELP mq_messages Messages in the queue, by state (the states do not overlap).",
        "# TYPE mq_messages gauge",
    ]
    for queue, s in stats.items():
        counts = s.to_json()
        for state in STATES:
            lines.append(f'mq_messages{{queue="{_label(queue)}",state="{state}"}} {counts[state]}')
    lines += [
        "# HELP mq_oldest_ready_seconds Age of the oldest ready message; 0 when none is ready.",
        "# TYPE mq_oldest_ready_seconds gauge",
    ]
    for queue, s in stats.items():
        age = s.oldest_ready_seconds or 0.0
        lines.append(f'mq_oldest_ready_seconds{{queue="{_label(queue)}"}} {age:.3f}')
    lines += [
        "# HELP mq_paused 1 while the queue is paused (mq pause): drains skip it.",
        "# TYPE mq_paused gauge",
    ]
    for queue, s in stats.items():
        lines.append(f'mq_paused{{queue="{_label(queue)}"}} {int(s.paused)}')
    lines += [
        "# HELP mq_stats_timestamp_seconds When these figures were read (Unix time).",
        "# TYPE mq_stats_timestamp_seconds gauge",
        f"mq_stats_timestamp_seconds {now if now is not None else time.time():.3f}",
    ]
    return "\n".join(lines) + "\n"


def write(path: str, text: str) -> None:
    """Replace ``path`` atomically, so node_exporter never reads half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".mq-stats-", suffix=".tmp", dir=directory)
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
