"""Drain throughput against parallelism: mq, the floor and the peers (matplotlib, bench venv only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from report import LABEL, drain_rate, peer_rate

PARALLEL = (1, 2, 4)


def plot(results: dict[str, Any], path: Path) -> Path | None:
    kinds = [k for k in ("mysql", "sqlite") if k in results.get("drain", {})]
    if not kinds:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 4.5), squeeze=False)
    meta = results.get("meta", {})
    for ax, kind in zip(axes[0], kinds, strict=True):
        section = results["drain"][kind]

        def series(label: str, values: list[float | None], style: str, ax: Any = ax) -> None:
            points = [(p, v) for p, v in zip(PARALLEL, values, strict=True) if v]
            if points:
                ax.plot(*zip(*points, strict=True), style, label=label)

        for batch, style in ((100, "o-"), (10, "o--"), (1, "o:")):
            series(
                f"mq drain, batch {batch}",
                [drain_rate(results, kind, batch, p) for p in PARALLEL],
                style,
            )
        series(
            "floor: mq's SQL bare, claim 100 + DELETE each",
            [drain_rate(results, kind, 100, p, "floor") for p in PARALLEL],
            "s-",
        )
        batched = {r["parallel"]: r["rate"] for r in section.get("floor_batch_delete", [])}
        series("floor: claim 100 + one DELETE per batch", [batched.get(p) for p in PARALLEL], "s--")
        series(
            "RQ SimpleWorker burst (Redis)",
            [peer_rate(results, "rq_simple", p) for p in PARALLEL],
            "^-",
        )
        series(
            "RQ burst worker, forking (Redis)",
            [peer_rate(results, "rq", p) for p in PARALLEL],
            "^--",
        )
        if kind == "sqlite":
            series(
                "huey SqliteHuey consumer (threads)",
                [peer_rate(results, "huey", p) for p in PARALLEL],
                "v-",
            )
        ax.set_yscale("log")
        ax.set_xticks(PARALLEL)
        ax.set_xlabel("parallel drains (processes; RQ workers; huey threads)")
        ax.set_ylabel("messages / s")
        ax.set_title(f"{LABEL[kind]}: no-op Python handler")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"mq drain throughput, {meta.get('date', '')}, {meta.get('machine', {}).get('cores')} cores"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
