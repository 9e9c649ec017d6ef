#!/usr/bin/env bash
# Make sure the MariaDB the tests use is up at 127.0.0.1:3306 with root and an
# empty password: start it if it is installed but stopped, install it if it is
# missing (the server part is skipped when MQ_TEST_MYSQL_URL points elsewhere);
# and galera-4 with rsync for the private Galera cluster of the fault suite.
set -euo pipefail

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# The Galera tests start a private 3-node cluster (tests/servers.py): they need
# Debian's galera-4 provider and rsync for its state transfers.
if [ ! -e /usr/lib/galera/libgalera_smm.so ] || ! command -v rsync >/dev/null; then
  echo "tests/mariadb.sh: installing galera-4 and rsync"
  as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q galera-4 rsync
fi

url=${MQ_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
if [ "$url" != "mysql://root@127.0.0.1:3306/test" ]; then
  echo "tests/mariadb.sh: MQ_TEST_MYSQL_URL is set; using that server as it is"
  exit 0
fi

port_open() { (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; }

if ! port_open; then
  if [ ! -x /usr/sbin/mariadbd ]; then
    echo "tests/mariadb.sh: installing mariadb-server"
    as_root apt-get update -q
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q mariadb-server
  fi
  if ! port_open; then
    echo "tests/mariadb.sh: starting MariaDB"
    as_root mkdir -p /run/mysqld
    as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
    as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  fi
  for _ in $(seq 1 120); do
    port_open && break
    sleep 0.5
  done
  port_open || { echo "tests/mariadb.sh: MariaDB did not open port 3306 within 60s" >&2; exit 1; }
fi

# A fresh Debian install lets root in through the unix socket only; the tests
# connect over TCP as root with no password.
if ! mariadb -h127.0.0.1 -P3306 -uroot -e 'SELECT 1' >/dev/null 2>&1; then
  echo "tests/mariadb.sh: granting root@127.0.0.1 for the tests"
  as_root mariadb -uroot <<'SQL'
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
fi
mariadb -h127.0.0.1 -P3306 -uroot -e 'CREATE DATABASE IF NOT EXISTS test'
