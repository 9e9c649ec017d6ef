#!/usr/bin/env bash
# The proof that the scenario tests do not depend on a quiet machine: the fault,
# liveness, wake-up and status tests, run the way tests/run.sh runs them (in
# parallel, then the `serial` ones in their lanes), ROUNDS times in a row (default 3)
# while a CPU hog keeps every core busy. Stops at the first red round.
#   bash tests/under_load.sh            # after tests/run.sh has set things up
#   ROUNDS=1 bash tests/under_load.sh tests/test_liveness.py
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
workers=${MQ_TEST_WORKERS:-6}
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(tests/faults tests/test_liveness.py tests/test_wakeup.py
                                 tests/test_status.py tests/test_status_html.py)
hogs=()
stop_hogs() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$(nproc)"); do
  python3 -c 'while True: pass' &
  hogs+=($!)
done
echo "hogs: ${hogs[*]} on $(nproc) cores"
for round in $(seq "$rounds"); do
  started=$(date +%s)
  .venv/bin/python -m pytest -q -n "$workers" --dist worksteal -m "not serial" "${paths[@]}"
  .venv/bin/python -m pytest -q -n 4 --dist loadgroup -m serial "${paths[@]}"
  echo "round $round of $rounds: green in $(( $(date +%s) - started )) s (load: $(cut -d' ' -f1-3 /proc/loadavg))"
done
