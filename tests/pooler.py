"""A private PgBouncer in front of a PostgreSQL server, for tests through a pooler.

Each :class:`PrivatePgbouncer` runs as the postgres user with its own ini, port,
pid file, log and socket directory, and is stopped by its own pid; the server
behind it (the shared one on 5432, by default) is never touched. Debian's
package is what tests/pgbouncer.sh installs (tests/run.sh calls it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.servers import free_ports

PGBOUNCER = "/usr/sbin/pgbouncer"


def pgbouncer_unavailable() -> str | None:
    """Why this machine cannot start a private PgBouncer, or None."""
    if not os.path.exists(PGBOUNCER):
        return f"{PGBOUNCER} is missing (tests/run.sh installs it: tests/pgbouncer.sh)"
    if os.geteuid() != 0:
        return "a private PgBouncer runs as the postgres user: the tests must run as root"
    return None


class PrivatePgbouncer:
    """``pool_mode`` (transaction, session, or statement: which mq refuses) in front of
    ``server`` (host, port)."""

    def __init__(self, pool_mode: str, server: tuple[str, int] = ("127.0.0.1", 5432)):
        self.pool_mode = pool_mode
        self.base = Path(tempfile.mkdtemp(prefix=f"mq-pgbouncer-{pool_mode}-", dir="/tmp"))
        self.base.chmod(0o755)
        (self.port,) = free_ports(1)
        self.log = self.base / "pgbouncer.log"
        (self.base / "users.txt").write_text('"postgres" ""\n')
        host, port = server
        (self.base / "pgbouncer.ini").write_text(
            "\n".join([
                "[databases]",
                f"* = host={host} port={port}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                f"unix_socket_dir = {self.base}",
                f"pidfile = {self.base / 'pgbouncer.pid'}",
                f"logfile = {self.log}",
                "auth_type = trust",
                f"auth_file = {self.base / 'users.txt'}",
                f"pool_mode = {pool_mode}",
                "ignore_startup_parameters = extra_float_digits,options",
                "max_client_conn = 1000",
                # Enough server connections for every test's drains, few enough that
                # clients share them in transaction mode (the trap under test).
                "default_pool_size = 8",
                "max_db_connections = 60",
                "admin_users = postgres",
                "",
            ])
        )  # fmt: skip
        shutil.chown(self.base, "postgres", "postgres")
        for path in self.base.iterdir():
            shutil.chown(path, "postgres", "postgres")
        self.proc: subprocess.Popen | None = None
        self.start()

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [PGBOUNCER, str(self.base / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            user="postgres",
        )
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited; its log:\n{self.log_tail()}")
            try:
                import socket

                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"pgbouncer not listening within 30 s:\n{self.log_tail()}")

    def admin(self, command: str) -> list[tuple]:
        """A command on PgBouncer's admin console (SHOW POOLS, RECONNECT db, ...)."""
        import psycopg

        with psycopg.connect(
            self.url("pgbouncer"), autocommit=True, sslmode="disable", prepare_threshold=None
        ) as conn:
            cursor = conn.execute(command)  # type: ignore[call-overload]
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        """Stop this PgBouncer only (SIGINT: a fast shutdown), by its pid."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)


if __name__ == "__main__":
    import sys

    bouncer = PrivatePgbouncer(sys.argv[1] if sys.argv[1:] else "transaction")
    print(bouncer.url("postgres"), flush=True)
    try:
        input("up; Enter stops it\n")
    finally:
        bouncer.close()
