"""Example handlers that ship with mq, for the README's tour and the docs.

They need nothing installed and touch nothing outside what they are given:
``thumbnail`` stands in for real work and fails, as real handlers do, on bad
input; ``jobs.jsonl`` beside this file is a sample of one job per line.

    mq enqueue -q thumbnails --lines < mq_cli/examples/jobs.jsonl
    mq drain -q thumbnails --handler mq_cli.examples:thumbnail
"""

from __future__ import annotations

from mq_cli.examples.handlers import IMAGE_SUFFIXES, thumbnail, word_count

__all__ = ["IMAGE_SUFFIXES", "thumbnail", "word_count"]
