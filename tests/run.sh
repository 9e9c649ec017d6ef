#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: a virtualenv with mq and its
# test tools (.venv), a running MariaDB (tests/mariadb.sh) and PostgreSQL
# (tests/postgres.sh), pgbouncer (tests/pgbouncer.sh), libfaketime
# (tests/faketime.sh), headless Chromium (tests/chromium.sh), then pytest.
# Extra arguments go to pytest, e.g. `tests/run.sh -k drain -x`. Tests run in
# MQ_TEST_WORKERS parallel processes (pytest-xdist, default 6: most tests wait on
# processes and servers, not on the CPU; each test has its own database, table,
# ports and lock dir), then the `serial` ones in four lanes; `tests/run.sh -n 0`
# runs them in this process, one after another.
#
# Load as a dimension: `tests/run.sh --hog N [pytest args]` runs N busy loops
# (`python3 -c 'while True: pass'`, at the default niceness, so they compete with
# the suite as a browser, an IDE or another CI job would) for as long as pytest
# runs, and kills them when it ends, on Ctrl-C too. The suite asserts behaviour,
# not speed (speed is bench/'s), so `--hog 4` on 2 cores must stay green; what
# fails only under hogs is fragile. `tests/run.sh --hog 4 tests/test_liveness.py`
# hogs one module.
set -euo pipefail
cd "$(dirname "$0")/.."

hogs=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hog) hogs=${2:?tests/run.sh: --hog needs a number of busy loops}; shift 2 ;;
    --hog=*) hogs=${1#--hog=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$hogs" in
  '' | *[!0-9]*) echo "tests/run.sh: --hog takes a whole number, not '$hogs'" >&2; exit 2 ;;
esac

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
hog_pids=()
stop_hogs() {
  [ ${#hog_pids[@]} -eq 0 ] || kill "${hog_pids[@]}" 2>/dev/null || true
  hog_pids=()
}
trap stop_hogs EXIT
trap 'stop_hogs; exit 130' INT
trap 'stop_hogs; exit 143' TERM
for _ in $(seq "$hogs"); do
  "$python" -c 'while True: pass' &
  hog_pids+=($!)
done
[ "$hogs" -eq 0 ] || echo "tests/run.sh: $hogs CPU hog(s) beside the run on $(nproc) core(s): ${hog_pids[*]}"
if [ ${#args[@]} -gt 0 ]; then
  status=0
  .venv/bin/python -m pytest -n "$workers" --dist worksteal "${args[@]}" || status=$?
  exit "$status"
fi
# Everything in parallel but the long scenarios marked `serial` (server restarts,
# failovers, Galera, cut connections), which then run in four lanes of their own
# (tests/conftest.py, SCENARIO_LANES): their timing is what they test, so they
# do not share the cores with the rest of the suite.
status=0
# --durations: the slowest tests in the log, what SCENARIO_LANES is balanced by.
.venv/bin/python -m pytest -n "$workers" --dist worksteal -m "not serial" --durations=10 || status=$?
.venv/bin/python -m pytest -n 4 --dist loadgroup -m serial --durations=25 || status=$?
exit "$status"
