#!/usr/bin/env bash
# libfaketime for the clock-step tests (tests/test_clock_steps.py): they run
# one mq process with its clock moved, without touching the machine's clock.
set -euo pipefail
command -v faketime >/dev/null && exit 0
echo "tests/faketime.sh: installing faketime"
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}
as_root apt-get update -q
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q faketime
