#!/usr/bin/env bash
# Every test: installs the servers when missing, then runs the whole workspace with every
# backend. LOCK_TEST_REQUIRE=1 turns an unreachable server into a failure instead of a skip.
#
# With arguments (`bash scripts/test.sh -p lock-redis`, a name filter), one `cargo test` with
# them. Without, the same tests in three runs: the history checkers (`history` and `generative`
# test targets) run time-bounded histories that mostly wait on their faults (about one core of
# two busy), and the stores' suites mostly wait on servers, so they get four test threads,
# which cuts their part of CI by a third to a half; every other target keeps the default two,
# since its cases' short leases need the CPU they get.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-servers.sh
export LOCK_TEST_REQUIRE=1
if [ $# -gt 0 ]; then
  exec cargo test --workspace --all-features --no-fail-fast "$@"
fi
checkers=(history generative)
# The binaries that mostly wait on servers and leases: the stores' conformance and primitive
# suites (four threads took 294 s where two took 440 s) and NATS's (53-56 s where 87 s).
waiting=(stores nats)
# Every integration test target but the checkers, from the manifests (a new one is picked up).
mapfile -t others < <(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
skip = set(sys.argv[1:])
names = {t["name"] for p in json.load(sys.stdin)["packages"] for t in p["targets"]
         if "test" in t["kind"] and t["name"] not in skip}
print("\n".join(sorted(names)))
' "${checkers[@]}" "${waiting[@]}")
[ ${#others[@]} -gt 0 ] || { echo "test.sh: no test targets found" >&2; exit 1; }
failed=0
cargo test --workspace --all-features --no-fail-fast --lib --bins "${others[@]/#/--test=}" || failed=1
cargo test --workspace --all-features --no-fail-fast "${checkers[@]/#/--test=}" "${waiting[@]/#/--test=}" -- --test-threads 4 || failed=1
cargo test --workspace --all-features --no-fail-fast --doc || failed=1
exit $failed
