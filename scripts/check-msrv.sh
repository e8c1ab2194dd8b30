#!/usr/bin/env bash
# The MSRV the manifests declare (workspace.package.rust-version) builds every published crate
# with every feature: install that toolchain (minimal profile) and `cargo check` with it.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -1)
[ -n "$msrv" ] || { echo "check-msrv: no rust-version in Cargo.toml" >&2; exit 1; }
rustup toolchain list | grep -q "^$msrv" || rustup toolchain install "$msrv" --profile minimal
packages=(-p dlock-rs -p dlock-cli -p lock-core -p lock-redis -p lock-mysql -p lock-zk -p lock-postgres -p lock-etcd -p lock-file)
cargo "+$msrv" check -q "${packages[@]}" --all-features
echo "check-msrv: Rust $msrv builds the published crates"
