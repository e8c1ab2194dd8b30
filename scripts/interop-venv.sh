#!/usr/bin/env bash
# The other side of the interop tests: the real Python lock libraries, from PyPI, in a private
# virtualenv (pinned, so a new release cannot change what the tests prove). Idempotent: prints
# the venv's python and exits at once when the venv is already complete.
# Usage: bash scripts/interop-venv.sh [DIR]   (default target/interop-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-${LOCK_INTEROP_VENV:-target/interop-venv}}"
pins=(redis==8.1.0 python-redis-lock==4.0.1 PyMySQL==1.2.4 kazoo==2.11.0)
stamp="$dir/.pins"
if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${pins[*]}" ]; then
  echo "$dir/bin/python"; exit 0
fi
python3 -m venv "$dir" >&2
"$dir/bin/pip" install -q --disable-pip-version-check "${pins[@]}" >&2
echo "${pins[*]}" >"$stamp"
echo "$dir/bin/python"
