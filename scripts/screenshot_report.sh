#!/usr/bin/env bash
# Screenshot a normdiff report.html in headless Chromium, to look at how the page reads.
#
#   scripts/screenshot_report.sh [REPORT_DIR_OR_HTML] [OUT.png] [WIDTHxHEIGHT]
#
# Defaults: normdiff-report/report.html, /tmp/report.png, 1400x2400. Chromium comes from Debian:
#   apt-get update && apt-get install -y chromium
# The page is self-contained, so the browser is started with every network feature off.
# tests/reports/test_layout.py measures the page at 1400 px in the same browser (where it is installed).
set -euo pipefail

target=${1:-normdiff-report}
out=${2:-/tmp/report.png}
size=${3:-1400x2400}
[[ -d $target ]] && target=$target/report.html
[[ -f $target ]] || { echo "no such report: $target (run: normdiff run --out DIR)" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[[ -n $browser ]] || { echo "chromium not found: apt-get update && apt-get install -y chromium" >&2; exit 2; }

profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
url="file://$(cd "$(dirname "$target")" && pwd)/$(basename "$target")"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --hide-scrollbars --user-data-dir="$profile" --screenshot="$out" --window-size="${size/x/,}" "$url" \
    >/dev/null 2>"$profile/stderr" || { cat "$profile/stderr" >&2; exit 1; }
[[ -s $out ]] || { echo "chromium wrote no screenshot" >&2; cat "$profile/stderr" >&2; exit 1; }
echo "$out"
