#!/usr/bin/env bash
# Best effort: tinygrad's CPU backend compiles its kernels with clang, and bfloat16 kernels need
# clang >= 16 (Debian 12's default clang 14 fails: "__bf16 is not supported on this target").
# `make install` runs this; where it cannot install (not root, no apt-get, no network), tinygrad's
# implementations are `unavailable` with that reason, never a failure. NORMDIFF_NO_APT=1 skips it.
set -u
for cc in clang-16 clang-17 clang-18 clang-19; do
  command -v "$cc" >/dev/null 2>&1 && exit 0
done
[ "${NORMDIFF_NO_APT:-}" = "1" ] && exit 0
[ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 || {
  echo "note: no clang >= 16 here; tinygrad's CPU backend stays unavailable (apt-get install clang-16)" >&2
  exit 0
}
export DEBIAN_FRONTEND=noninteractive
if timeout 300 apt-get update -qq >/dev/null 2>&1 && timeout 600 apt-get install -y -qq clang-16 >/dev/null 2>&1; then
  echo "installed clang-16 for tinygrad's CPU backend" >&2
else
  echo "note: could not install clang-16; tinygrad's CPU backend stays unavailable" >&2
fi
exit 0
