"""The handler of the README's first command: shows what it received."""

from __future__ import annotations

from mq_cli.runners.handlers import current_message


def show(payload: object) -> None:
    info = current_message()
    print(f"demo: message {info.id} on queue {info.queue!r}: {payload!r}", flush=True)
