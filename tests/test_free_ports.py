"""The ports a private server is given stay its own until it listens.

CI's Galera node 2 was given a port at the cluster's start and listened on it
seconds later, after node 1 had bootstrapped; by then an outgoing connection of
another test worker had that port as its own end ("Bind on TCP/IP port ...
Address already in use"). So a port given out is one the kernel never hands to
an outgoing connection, and one no other test process was given."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.servers import free_ports


def ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_ports_given_are_never_an_outgoing_connections_own_port() -> None:
    low, high = ephemeral_range()
    ports = free_ports(12)
    assert len(set(ports)) == 12
    assert all(not low <= port <= high for port in ports), (ports, low, high)


def test_processes_holding_ports_are_never_given_the_same_one() -> None:
    # Each child holds its ports until its stdin closes, as a test worker holds
    # its servers' ports while they run.
    script = (
        "import sys; from tests.servers import free_ports; "
        "print(*free_ports(40), flush=True); sys.stdin.read()"
    )
    root = Path(__file__).resolve().parent.parent
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        given = [child.stdout.readline().split() for child in children if child.stdout]
        given.append([str(port) for port in free_ports(40)])
    finally:
        for child in children:
            child.communicate(timeout=60)
    seen = [port for ports in given for port in ports]
    assert len(seen) == 160
    assert len(set(seen)) == 160
