#!/usr/bin/env bash
# Every test: installs the servers when missing, then runs the whole workspace with every
# backend. LOCK_TEST_REQUIRE=1 turns an unreachable server into a failure instead of a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-servers.sh
export LOCK_TEST_REQUIRE=1
cargo test --workspace --all-features --no-fail-fast "$@"
