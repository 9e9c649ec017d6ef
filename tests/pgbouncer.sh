#!/usr/bin/env bash
# Make sure pgbouncer (Debian's package) is installed: the pooler tests start
# private ones of their own (tests/pooler.py), never the system service.
set -euo pipefail

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

if [ ! -x /usr/sbin/pgbouncer ]; then
  echo "tests/pgbouncer.sh: installing pgbouncer"
  as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q pgbouncer
fi
