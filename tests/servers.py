"""Private MariaDB servers for tests that stop, kill or break a server.

The shared server on 3306 is never stopped by a test. A test that needs a
server to go away starts its own here (own datadir, ports, socket and pid)
and stops exactly that process, by pid:

- :class:`PrivateMariadb`: one standalone mariadbd.
- :class:`GaleraCluster`: three mariadbd nodes joined by galera-4.
- :class:`PrivatePostgres`: one PostgreSQL postmaster (initdb into a temp dir).
- :class:`PrivateStandby`: a streaming standby of one, to promote (a failover).

``python -m tests.servers galera`` starts a cluster and keeps it up until
Enter is pressed (for trying things by hand).
"""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pymysql

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
GALERA = "/usr/lib/galera/libgalera_smm.so"


PORT_LOCKS = Path("/tmp/mq-test-ports.lock")
# One descriptor per process, never closed: closing any descriptor of a file
# drops every record lock the process holds on it.
_locks: list[int] = []


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _candidates() -> list[int]:
    low, high = _ephemeral_range()
    # Below the kernel's ephemeral range if there is room, else above it.
    ports = list(range(max(1024, low - 12000), low)) or list(range(high + 1, 65536))
    random.shuffle(ports)
    return ports


def free_ports(count: int) -> list[int]:
    """Ports for a private server, free until it listens on them, seconds later.

    A port the kernel picked (bind to 0) is one it also gives outgoing
    connections: CI's Galera node 2 found its port taken by another worker's
    client when it started after node 1's bootstrap. So the ports come from
    outside the ephemeral range, each locked (a record lock in one shared file,
    held until this process exits) so that no other test process is given it
    too, and each checked to bind now."""
    if not _locks:
        _locks.append(os.open(PORT_LOCKS, os.O_RDWR | os.O_CREAT, 0o644))
    ports: list[int] = []
    for port in _candidates():
        try:
            # A lock on the byte at offset `port`, this process's until it exits.
            fcntl.lockf(_locks[0], fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
        except OSError:
            continue
        try:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))
        except OSError:
            continue  # in use: kept locked, as no use to anyone here
        ports.append(port)
        if len(ports) == count:
            return ports
    raise RuntimeError(f"no {count} free ports outside the ephemeral range")


def unavailable(galera: bool = False) -> str | None:
    """Why this machine cannot start a private server, or None."""
    needed = [MARIADBD, INSTALL_DB] + ([GALERA, "/usr/bin/rsync"] if galera else [])
    missing = [path for path in needed if not os.path.exists(path)]
    if missing:
        return f"missing {', '.join(missing)} (tests/run.sh installs them)"
    if os.geteuid() != 0:
        return "private servers run as the mysql user: the tests must run as root"
    return None


def _base_dir(prefix: str) -> Path:
    # Not under pytest's tmp_path: /tmp/pytest-of-root is 0700 and mariadbd
    # runs as mysql, which must reach its datadir.
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    return path


class Node:
    """One mariadbd process with its own datadir, socket, pid file and port."""

    def __init__(self, base: Path, name: str, port: int, extra: Sequence[str] = ()):
        self.name = name
        self.port = port
        self.dir = base / name
        self.datadir = self.dir / "data"
        self.cnf = self.dir / "my.cnf"
        self.log = self.dir / "error.log"
        self.socket = self.dir / "mysqld.sock"
        self.proc: subprocess.Popen | None = None
        self.dir.mkdir(parents=True, exist_ok=True)
        self.datadir.mkdir(exist_ok=True)
        # Its own tmpdir: under load a bootstrap in the shared /tmp failed with
        # "Error on delete of '/tmp/#sql-temptable-...MAI'" (errno 2), aborting.
        self.tmpdir = self.dir / "tmp"
        self.tmpdir.mkdir(exist_ok=True)
        lines = [
            "[mysqld]",
            f"datadir={self.datadir}",
            f"socket={self.socket}",
            f"pid-file={self.dir / 'mysqld.pid'}",
            f"log-error={self.log}",
            f"tmpdir={self.tmpdir}",
            f"port={port}",
            "bind-address=127.0.0.1",
            "user=mysql",
            "skip-name-resolve",
            "innodb_buffer_pool_size=64M",
            "innodb_log_file_size=32M",
            "max_connections=200",
            "performance_schema=OFF",
            *extra,
        ]
        self.cnf.write_text("\n".join(lines) + "\n")
        shutil.chown(self.dir, "mysql", "mysql")
        shutil.chown(self.datadir, "mysql", "mysql")
        shutil.chown(self.tmpdir, "mysql", "mysql")

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/test"

    def install(self) -> None:
        done = subprocess.run(
            [INSTALL_DB, f"--defaults-file={self.cnf}", "--user=mysql",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, timeout=120,
        )  # fmt: skip
        if done.returncode:
            said = (done.stderr or done.stdout).decode(errors="replace")[-1500:]
            raise RuntimeError(
                f"{INSTALL_DB} exited {done.returncode} for {self.name}:\n{said}\n{self.log_tail()}"
            )

    def start(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [MARIADBD, f"--defaults-file={self.cnf}", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def connect(self, timeout: float = 5) -> pymysql.connections.Connection:
        return pymysql.connect(
            host="127.0.0.1", port=self.port, user="root", password="",
            autocommit=True, connect_timeout=timeout, ssl_disabled=True,
        )  # fmt: skip

    def socket_connect(self) -> pymysql.connections.Connection:
        return pymysql.connect(unix_socket=str(self.socket), user="root", autocommit=True)

    def wait_ready(self, timeout: float = 120, galera: bool = False) -> None:
        # The mariadb client, not PyMySQL: a failed PyMySQL connect to a server
        # still starting leaves an unclosed socket (a ResourceWarning in pytest).
        query = "SHOW STATUS LIKE 'wsrep_local_state_comment'" if galera else "SELECT 1"
        end = time.monotonic() + timeout
        last = ""
        while time.monotonic() < end:
            if not self.running():
                raise RuntimeError(f"{self.name} exited; its log:\n{self.log_tail()}")
            if self.socket.exists():
                result = subprocess.run(
                    ["mariadb", f"--socket={self.socket}", "-uroot", "-N", "-e", query],
                    capture_output=True, text=True, timeout=30, check=False,
                )  # fmt: skip
                last = (result.stdout + result.stderr).strip()
                if result.returncode == 0 and (not galera or last.endswith("Synced")):
                    return
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} not ready within {timeout}s ({last}):\n{self.log_tail()}")

    def sql(self, statement: str) -> list[tuple]:
        conn = self.socket_connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement)
                return list(cursor.fetchall())
        finally:
            conn.close()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal this node's own process (never any other mariadbd)."""
        if self.running():
            assert self.proc is not None
            os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=120)

    def stop(self) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _allow_root_over_tcp(node: Node) -> None:
    # skip-name-resolve: root@localhost does not match TCP from 127.0.0.1.
    node.sql("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''")
    node.sql("GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION")
    node.sql("CREATE DATABASE IF NOT EXISTS test")


class PrivateMariadb:
    """A standalone mariadbd of the test's own, stopped (by pid) at close()."""

    def __init__(self, extra: Sequence[str] = ()):
        self.base = _base_dir("mq-mariadb-")
        (port,) = free_ports(1)
        self.node = Node(self.base, "server", port, extra)
        self.node.install()
        self.start()
        _allow_root_over_tcp(self.node)

    @property
    def url(self) -> str:
        return self.node.url

    @property
    def port(self) -> int:
        return self.node.port

    def start(self) -> None:
        self.node.start()
        self.node.wait_ready()

    def stop(self) -> None:
        self.node.stop()

    def running(self) -> bool:
        return self.node.running()

    def close(self) -> None:
        self.node.stop()
        shutil.rmtree(self.base, ignore_errors=True)


class GaleraCluster:
    """Three Galera nodes on free ports: node 0 bootstraps, 1 and 2 join by rsync SST."""

    def __init__(self, size: int = 3):
        self.base = _base_dir("mq-galera-")
        ports = free_ports(4 * size)
        sql_ports, group, ist, sst = (ports[i::4] for i in range(4))
        members = ",".join(f"127.0.0.1:{p}" for p in group)
        self.nodes = [
            Node(
                self.base,
                f"node{i + 1}",
                sql_ports[i],
                [
                    "binlog_format=ROW",
                    "default_storage_engine=InnoDB",
                    "innodb_autoinc_lock_mode=2",
                    # the test cluster shares one disk: durability is not under test
                    "innodb_flush_log_at_trx_commit=2",
                    "wsrep_on=ON",
                    f"wsrep_provider={GALERA}",
                    "wsrep_cluster_name=mq_test",
                    f"wsrep_node_name=node{i + 1}",
                    f"wsrep_cluster_address=gcomm://{members}",
                    f"wsrep_node_address=127.0.0.1:{group[i]}",
                    f'wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:{group[i]};'
                    f'ist.recv_addr=127.0.0.1:{ist[i]};gcache.size=128M"',
                    "wsrep_sst_method=rsync",
                    f"wsrep_sst_receive_address=127.0.0.1:{sst[i]}",
                ],
            )
            for i in range(size)
        ]
        try:
            first = self.nodes[0]
            first.install()
            first.start("--wsrep-new-cluster")
            first.wait_ready(galera=True)
            _allow_root_over_tcp(first)
            for node in self.nodes[1:]:
                node.start()
                node.wait_ready(galera=True)
        except BaseException:
            self.close()
            raise

    def urls(self, database: str) -> list[str]:
        return [f"mysql://root@127.0.0.1:{n.port}/{database}" for n in self.nodes]

    def restart(self, node: Node) -> None:
        """Start a stopped or killed node again; it rejoins (IST or SST) and syncs."""
        node.start()
        node.wait_ready(galera=True)

    def cluster_size(self) -> int:
        for node in self.nodes:
            if node.running():
                return int(node.sql("SHOW STATUS LIKE 'wsrep_cluster_size'")[0][1])
        return 0

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
        shutil.rmtree(self.base, ignore_errors=True)


PG_BIN = Path("/usr/lib/postgresql")


def pg_bin(name: str) -> Path | None:
    """The newest installed PostgreSQL's ``name`` (initdb, postgres), or None."""
    versions = sorted(
        (p for p in PG_BIN.glob("*/bin") if (p / name).exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    return versions[-1] / name if versions else None


def pg_unavailable() -> str | None:
    """Why this machine cannot start a private PostgreSQL, or None."""
    if pg_bin("initdb") is None or pg_bin("postgres") is None:
        return (
            "no PostgreSQL server binaries under /usr/lib/postgresql (tests/run.sh installs them)"
        )
    if os.geteuid() != 0:
        return "private servers run as the postgres user: the tests must run as root"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    return None


class PrivatePostgres:
    """A postmaster of the test's own (datadir, port, socket directory), started as the
    postgres user and stopped by its pid (SIGINT: a fast shutdown that ends sessions)."""

    def __init__(self) -> None:
        self.base = _base_dir("mq-postgres-")
        (self.port,) = free_ports(1)
        self.datadir = self.base / "data"
        self.log = self.base / "postgres.log"
        self.proc: subprocess.Popen | None = None
        shutil.chown(self.base, "postgres", "postgres")
        subprocess.run(
            [str(pg_bin("initdb")), "-D", str(self.datadir), "-U", "postgres",
             "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"],
            check=True, capture_output=True, timeout=120, user="postgres",
        )  # fmt: skip
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        log = open(self.log, "ab")  # noqa: SIM115 - the postmaster writes it until it exits
        try:
            self.proc = subprocess.Popen(
                [str(pg_bin("postgres")), "-D", str(self.datadir), "-p", str(self.port),
                 "-k", str(self.base), "-c", "listen_addresses=127.0.0.1",
                 "-c", "fsync=off", "-c", "max_connections=300"],
                stdout=log, stderr=log, start_new_session=True, user="postgres",
            )  # fmt: skip
        finally:
            log.close()
        self.wait_ready()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 60) -> None:
        import psycopg

        end = time.monotonic() + timeout
        last = ""
        while time.monotonic() < end:
            if not self.running():
                raise RuntimeError(f"postgres exited; its log:\n{self.log_tail()}")
            try:
                psycopg.connect(self.url(), connect_timeout=2, sslmode="disable").close()
                return
            except psycopg.Error as exc:
                last = str(exc)
            time.sleep(0.3)
        raise RuntimeError(f"postgres not ready within {timeout}s ({last}):\n{self.log_tail()}")

    def sql(self, statement: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True, sslmode="disable") as conn:
            conn.execute(statement)

    def stop(self) -> None:
        """Fast shutdown of this postmaster only: its sessions end, it exits."""
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


class PrivateStandby(PrivatePostgres):
    """A streaming standby of ``primary`` (``pg_basebackup -R``: it follows the
    primary's WAL), on its own port; :meth:`promote` makes it a primary."""

    def __init__(self, primary: PrivatePostgres) -> None:
        self.base = _base_dir("mq-standby-")
        (self.port,) = free_ports(1)
        self.datadir = self.base / "data"
        self.log = self.base / "postgres.log"
        self.proc = None
        shutil.chown(self.base, "postgres", "postgres")
        # initdb's pg_hba trusts replication from 127.0.0.1, and wal_level is replica.
        subprocess.run(
            [str(pg_bin("pg_basebackup")), "-h", "127.0.0.1", "-p", str(primary.port),
             "-U", "postgres", "-D", str(self.datadir), "-R", "-X", "stream", "--no-sync",
             "--checkpoint=fast"],
            check=True, capture_output=True, timeout=120, user="postgres",
        )  # fmt: skip
        try:
            self.start()
        except BaseException:
            self.close()
            raise

    def in_recovery(self) -> bool:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True, sslmode="disable") as conn:
            return bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])  # type: ignore[index]

    def promote(self) -> None:
        """``pg_ctl promote``, waiting until the server accepts writes."""
        subprocess.run(
            [str(pg_bin("pg_ctl")), "promote", "-D", str(self.datadir), "-w", "-t", "60"],
            check=True, capture_output=True, timeout=90, user="postgres",
        )  # fmt: skip


def kill_postmaster(server: PrivatePostgres) -> None:
    """kill -9 of this server's postmaster, by its pid: its backends see it gone and end."""
    if server.running():
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(timeout=60)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["galera"]:
        cluster = GaleraCluster()
        print("\n".join(cluster.urls("test")), flush=True)
    else:
        server = PrivateMariadb()
        print(server.url, flush=True)
    try:
        input("up; Enter stops it\n")
    finally:
        (cluster if sys.argv[1:] == ["galera"] else server).close()  # type: ignore[union-attr]
