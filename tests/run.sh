#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: a virtualenv with mq and its
# test tools (.venv), a running MariaDB (tests/mariadb.sh) and PostgreSQL
# (tests/postgres.sh), pgbouncer (tests/pgbouncer.sh), libfaketime
# (tests/faketime.sh), headless Chromium (tests/chromium.sh), then pytest.
# Extra arguments go to pytest, e.g. `tests/run.sh -k drain -x`. Tests run in
# MQ_TEST_WORKERS parallel processes (pytest-xdist, default 6: most tests wait on
# processes and servers, not on the CPU; each test has its own database, table,
# ports and lock dir), then the `serial` ones in three lanes; `tests/run.sh -n 0`
# runs them in this process, one after another.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
bash tests/mariadb.sh
bash tests/postgres.sh
bash tests/pgbouncer.sh
bash tests/faketime.sh
bash tests/chromium.sh
# Compiled once here: the suite starts thousands of mq processes, and with
# PYTHONDONTWRITEBYTECODE set (as on CI) each would compile mq_cli again (+70 ms).
.venv/bin/python -m compileall -q mq_cli tests
workers=${MQ_TEST_WORKERS:-6}
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest -n "$workers" --dist worksteal "$@"
fi
# Everything in parallel but the long scenarios marked `serial` (server restarts,
# failovers, Galera, cut connections), which then run in three lanes of their own
# (tests/conftest.py, SCENARIO_LANES): their timing is what they test, so they
# do not share the cores with the rest of the suite.
status=0
.venv/bin/python -m pytest -n "$workers" --dist worksteal -m "not serial" || status=$?
.venv/bin/python -m pytest -n 3 --dist loadgroup -m serial || status=$?
exit "$status"
