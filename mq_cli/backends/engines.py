"""Which engine answers behind a MySQL or PostgreSQL URL, named from its own banner.

Several engines speak the MySQL or PostgreSQL protocol without all of its
semantics, and mq's guarantees rest on exactly the parts they change: a claim
relies on ``FOR UPDATE SKIP LOCKED`` skipping rows another drain holds, a drain's
liveness on session locks, a waiting drain's wake-up on ``LISTEN``. So mq names
the engine from what the server says of itself (``VERSION()`` and
``@@version_comment``, ``version()``, the ``citus`` extension) once per
connection, and either refuses it (exit 3, with what is unsupported and why) or
says what it does on it, never guesses from a version number alone.

This module holds no SQL and no driver: facts in, an :class:`Engine` out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mq_cli.core.errors import EngineRefused


@dataclass(frozen=True)
class Engine:
    #: what answered, e.g. "MariaDB", "TiDB", "PostgreSQL with Citus"
    name: str
    #: what mq does on it (accepted), or why it refuses it
    detail: str
    accepted: bool = True

    def refuse(self, where: str) -> None:
        """Raise :class:`EngineRefused` (exit 3) unless mq runs on this engine."""
        if not self.accepted:
            raise EngineRefused(f"{where} runs {self.name}: {self.detail}")


#: Vitess answers FOR UPDATE SKIP LOCKED from this release on
VITESS_SKIP_LOCKED = 19


def _release(text: str, after: str) -> tuple[int, ...] | None:
    match = re.search(after + r"[^0-9]*?v?(\d+)\.(\d+)", text, re.IGNORECASE)
    return tuple(int(x) for x in match.groups()) if match else None


def mysql_engine(
    version: str, comment: str = "", galera: bool = False, server: str = "MySQL"
) -> Engine:
    """The engine behind a MySQL URL, from ``VERSION()`` and ``@@version_comment``;
    ``server`` is what the dialect calls a server that is none of these engines
    (MySQL or MariaDB)."""
    both = f"{version} {comment}"
    lowered = both.lower()
    if "tidb" in lowered:
        return Engine(
            "TiDB", accepted=False,
            detail="TiDB runs FOR UPDATE SKIP LOCKED as a plain non-locking read "
            "(pingcap/tidb#69720), so two drains would take and run the same messages; "
            "mq does not run on TiDB: use MySQL, MariaDB or PostgreSQL",
        )  # fmt: skip
    if "vitess" in lowered:
        release = _release(comment, "vitess") or _release(version, "vitess")
        if release is None or release[0] < VITESS_SKIP_LOCKED:
            seen = "an unknown release" if release is None else f"release {release[0]}"
            return Engine(
                "Vitess", accepted=False,
                detail=f"{seen}: Vitess supports FOR UPDATE SKIP LOCKED only from "
                f"{VITESS_SKIP_LOCKED} on, which mq's claims need; point mq at the MySQL "
                "server behind vtgate, or upgrade Vitess",
            )  # fmt: skip
        return Engine(
            f"Vitess {release[0]}",
            "SKIP LOCKED claims through vtgate; keep mq's table in an unsharded keyspace "
            "(a claim locks rows in one shard only)",
        )
    if galera:
        return Engine(f"{server} Galera node", "supported; conflicts between nodes are retried")
    return Engine(server, "supported")


#: the oldest PostgreSQL mq runs on (server_version_num; WITH ... AS MATERIALIZED)
PG_MIN_VERSION = 120000


def postgres_engine(
    version: str, number: int = PG_MIN_VERSION, citus: bool = False, distributed: bool = False
) -> Engine:
    """The engine behind a PostgreSQL URL, from ``version()`` and the server's version
    number, whether the ``citus`` extension is installed and whether mq's table is
    distributed (pg_dist_partition)."""
    if "cockroachdb" in version.lower():
        return Engine(
            "CockroachDB", accepted=False,
            detail="CockroachDB has no advisory locks (a drain's liveness) and no LISTEN, and "
            "runs every transaction SERIALIZABLE, where claims conflict instead of skipping "
            "each other; mq does not run on CockroachDB: use PostgreSQL",
        )  # fmt: skip
    if re.search(r"-YB-", version):
        return Engine(
            "YugabyteDB", accepted=False,
            detail="YugabyteDB turns FOR UPDATE SKIP LOCKED into a blocking lock under "
            "SERIALIZABLE, and its advisory locks and LISTEN are not PostgreSQL's; "
            "mq does not run on YugabyteDB: use PostgreSQL",
        )  # fmt: skip
    if number < PG_MIN_VERSION:
        return Engine(
            f"PostgreSQL {number // 10000}", accepted=False, detail="mq needs 12 or later"
        )
    if citus and distributed:
        return Engine(
            "PostgreSQL with Citus", accepted=False,
            detail="mq's table is distributed, and Citus locks rows only in single-shard "
            "queries, so claims across shards do not skip each other; keep the table local "
            "on the coordinator (SELECT undistribute_table('<table>'))",
        )  # fmt: skip
    if citus:
        return Engine(
            "PostgreSQL with Citus",
            "mq's table is local on the coordinator (not distributed): as PostgreSQL",
        )
    return Engine("PostgreSQL", "supported")
