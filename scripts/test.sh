#!/usr/bin/env bash
# Every test: installs the servers when missing, then runs the whole workspace with every
# backend. LOCK_TEST_REQUIRE=1 turns an unreachable server into a failure instead of a skip.
#
# With arguments (`bash scripts/test.sh -p lock-redis`, a name filter), one `cargo test` with
# them. Without, every test target is built once, then run in two groups side by side, since
# cargo runs one test binary at a time and most of them wait: the stores' suites on servers,
# the generative checker on its faults (about one core of two busy), so they get four test
# threads; the other group runs every other target (default threads: its cases' short leases
# need the CPU they get), then the history checker on four. Each group's output is printed
# whole, the side group's after the other; the doc tests run last.
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
cargo test --workspace --all-features --no-run --lib --bins --tests
logs=target/test-logs
mkdir -p "$logs"
started=$(date +%s)
side() {
  cargo test --workspace --all-features --no-fail-fast --test=generative "${waiting[@]/#/--test=}" -- --test-threads 4
}
side > "$logs/side.log" 2>&1 &
side_pid=$!
cargo test --workspace --all-features --no-fail-fast --lib --bins "${others[@]/#/--test=}" || failed=1
cargo test --workspace --all-features --no-fail-fast --test=history -- --test-threads 4 || failed=1
echo "test.sh: the main group took $(( $(date +%s) - started )) s; the side group (generative, ${waiting[*]}) follows"
wait "$side_pid" || failed=1
cat "$logs/side.log"
echo "test.sh: both groups took $(( $(date +%s) - started )) s"
cargo test --workspace --all-features --no-fail-fast --doc || failed=1
exit $failed
