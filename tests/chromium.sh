#!/usr/bin/env bash
# Headless Chromium for the HTML page test (tests/test_status_html.py): it
# renders `mq status --html`'s page to check it shows and runs no script.
set -euo pipefail
[ -x /usr/bin/chromium ] && exit 0
echo "tests/chromium.sh: installing chromium"
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}
as_root apt-get update -q
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends chromium
