#!/usr/bin/env bash
# Make sure the PostgreSQL the tests use is up at 127.0.0.1:5432 and lets the
# user postgres in over TCP without a password: start the cluster if it is
# installed but stopped, install it if it is missing (skipped when
# MQ_TEST_PG_URL points elsewhere). The fault suite's private servers need the
# binaries only (initdb, pg_ctl).
set -euo pipefail

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

url=${MQ_TEST_PG_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
if [ "$url" != "postgresql://postgres@127.0.0.1:5432/postgres" ]; then
  echo "tests/postgres.sh: MQ_TEST_PG_URL is set; using that server as it is"
  exit 0
fi

port_open() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
cluster_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1; }

if ! port_open; then
  if [ -z "$(cluster_version)" ]; then
    echo "tests/postgres.sh: installing postgresql"
    as_root apt-get update -q
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q postgresql
  fi
  if ! port_open; then
    echo "tests/postgres.sh: starting PostgreSQL $(cluster_version)"
    as_root pg_ctlcluster --skip-systemctl-redirect "$(cluster_version)" main start || true
  fi
  for _ in $(seq 1 120); do
    port_open && break
    sleep 0.5
  done
  port_open || { echo "tests/postgres.sh: PostgreSQL did not open port 5432 within 60s" >&2; exit 1; }
fi

# A fresh Debian install asks for a password over TCP (scram-sha-256); the
# tests connect as postgres with none. Trust it from this host only.
if ! psql "$url" -Atc 'SELECT 1' >/dev/null 2>&1; then
  version=$(cluster_version)
  hba=/etc/postgresql/$version/main/pg_hba.conf
  echo "tests/postgres.sh: trusting postgres from 127.0.0.1 in $hba"
  rule="host all postgres 127.0.0.1/32 trust"
  as_root sed -i "1i $rule" "$hba"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  sleep 1
  psql "$url" -Atc 'SELECT 1' >/dev/null || {
    echo "tests/postgres.sh: still cannot connect as postgres to 127.0.0.1:5432" >&2
    exit 1
  }
fi
