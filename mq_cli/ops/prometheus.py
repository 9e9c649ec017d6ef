"""`mq stats --prometheus FILE`: the node_exporter textfile format, written atomically."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mq_cli.core import atomic
from mq_cli.core.models import QueueStats
from mq_cli.core.states import STATES, Outcome

if TYPE_CHECKING:
    from mq_cli.ops.status import Throughput


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(
    stats: dict[str, QueueStats],
    now: float | None = None,
    totals: dict[str, tuple[int, int]] | None = None,
    hour: dict[str, Throughput] | None = None,
) -> str:
    """The gauges of ``stats``; with the run log's ``totals`` and last ``hour``, its
    counters and wait/duration summaries too."""
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
    if totals is not None:
        lines += _counters(totals)
    if hour is not None:
        lines += _summaries(hour)
    lines += [
        "# HELP mq_stats_timestamp_seconds When these figures were read (Unix time).",
        "# TYPE mq_stats_timestamp_seconds gauge",
        f"mq_stats_timestamp_seconds {now if now is not None else time.time():.3f}",
    ]
    return "\n".join(lines) + "\n"


def _counters(totals: dict[str, tuple[int, int]]) -> list[str]:
    lines = []
    for index, name in enumerate((Outcome.SUCCEEDED, Outcome.FAILED)):
        what = name  # "Messages that succeeded", "... that failed"
        lines += [
            f"# HELP mq_{name}_total Messages that {what} (handler runs), over the run log's "
            "retained history (run_log_retention): it drops when old runs are deleted.",
            f"# TYPE mq_{name}_total counter",
        ]
        for queue, counts in totals.items():
            lines.append(f'mq_{name}_total{{queue="{_label(queue)}"}} {counts[index]}')
    return lines


def _summaries(hour: dict[str, Throughput]) -> list[str]:
    from mq_cli.ops.status import QUANTILES

    lines = []
    for name, what in (
        ("wait", "a message waited, from available to its handler's start"),
        ("duration", "a handler ran"),
    ):
        metric = f"mq_{name}_seconds"
        lines += [
            f"# HELP {metric} Seconds {what}, over the last hour (run log; buckets ~12 %).",
            f"# TYPE {metric} summary",
        ]
        for queue, figures in hour.items():
            histogram = figures.wait if name == "wait" else figures.duration
            label = f'queue="{_label(queue)}"'
            for q in QUANTILES:
                value = histogram.quantile(q)
                shown = "NaN" if value is None else f"{value:.6f}"
                lines.append(f'{metric}{{{label},quantile="{q}"}} {shown}')
            total = figures.wait_sum if name == "wait" else figures.duration_sum
            lines.append(f"{metric}_sum{{{label}}} {total:.6f}")
            lines.append(f"{metric}_count{{{label}}} {histogram.total}")
    return lines


def write(path: str, text: str) -> None:
    """Replace ``path`` atomically: node_exporter never reads half a file."""
    atomic.write(path, text, prefix=".mq-stats-")
