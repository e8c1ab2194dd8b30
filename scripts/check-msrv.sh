#!/usr/bin/env bash
# The MSRV the manifests declare (workspace.package.rust-version) builds every published crate
# with every feature: install that toolchain (minimal profile) and `cargo check` with it.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -1)
[ -n "$msrv" ] || { echo "check-msrv: no rust-version in Cargo.toml" >&2; exit 1; }
rustup toolchain list | grep -q "^$msrv" || rustup toolchain install "$msrv" --profile minimal
# Every published member (publish not false), from the manifests: a new crate is checked unasked.
mapfile -t packages < <(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p.get("publish") != []:
        print("-p"); print(p["name"])')
[ "${#packages[@]}" -gt 0 ] || { echo "check-msrv: no published package found" >&2; exit 1; }
cargo "+$msrv" check -q "${packages[@]}" --all-features
echo "check-msrv: Rust $msrv builds the $(( ${#packages[@]} / 2 )) published crates"
