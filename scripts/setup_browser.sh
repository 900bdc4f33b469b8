#!/usr/bin/env bash
# Install Debian's Chromium (package chromium, with fonts-liberation so text renders) for the
# browser tests (tests/browser.py drives it through Playwright; Playwright's own browser download
# is never used). Does nothing when $SHARDLAB_CHROMIUM (default /usr/bin/chromium) exists.
# Needs root or sudo; run by scripts/test.sh before the tests.
set -euo pipefail
chromium=${SHARDLAB_CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] && exit 0
if [ "$(id -u)" = 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo -n); else
  echo "setup_browser: no $chromium and neither root nor sudo: install Debian's chromium package" >&2; exit 1
fi
echo "setup_browser: installing Debian's chromium (about a minute)" >&2
export DEBIAN_FRONTEND=noninteractive
install=(apt-get install -y -qq --no-install-recommends chromium fonts-liberation)
if ! "${sudo[@]}" "${install[@]}" >/dev/null 2>&1; then
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" "${install[@]}" >/dev/null
fi
[ -x "$chromium" ] || { echo "setup_browser: apt installed chromium but $chromium is missing" >&2; exit 1; }
