#!/usr/bin/env bash
# Install what the build and the tests need (Debian bookworm packages), if missing: the servers
# the test suite starts privately, and the C headers of the bench's peers (`lock-bench
# --features peers` pulls sqlx 0.8 with native-tls, i.e. openssl-sys, into every
# `--all-features` build). Nothing is started here: lock-testkit spawns its own instances on
# free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb >/dev/null || need+=(mariadb-client)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
[ -f /usr/share/java/slf4j-simple.jar ] || need+=(libslf4j-java)
command -v java >/dev/null || need+=(default-jre-headless)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -f /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
command -v cc >/dev/null || need+=(gcc)
# The test kit's readiness probe of a TLS-only ZooKeeper (`openssl s_client`).
command -v openssl >/dev/null || need+=(openssl)
# PostgreSQL 15 and etcd 3.4 for their backends; etcd-client's build compiles etcd's protos.
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql)
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v protoc >/dev/null || need+=(protobuf-compiler)
# What a store crate's own test server needs, named in its manifest
# (`[package.metadata.dlock] test-packages = ["..."]`), so that a new store adds nothing here.
for pkg in $(sed -n 's/^test-packages *= *\[\(.*\)\]/\1/p' crates/*/Cargo.toml | tr -d '",'); do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# A transaction-pooling PgBouncer in front of PostgreSQL: the session locks refuse it.
[ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
# The other side of the interop tests: Apache Curator (with the JDK's javac to compile the
# test kit's small Curator program).
[ -f /usr/share/java/curator-recipes.jar ] || need+=(libcurator-recipes-java)
command -v javac >/dev/null || need+=(default-jdk-headless)
# The Python side of the interop tests: scripts/interop-venv.sh makes a venv and pip-installs
# the pinned libraries into it.
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -eq 0 ]; then
  echo "install-servers: redis, mariadb, zookeeper, postgresql, pgbouncer, etcd, the stores' test packages, curator and the build headers already installed"
  exit 0
fi
echo "install-servers: installing ${need[*]}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
# Keep the packages' own services from starting (no systemd here; the suite runs its own).
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
echo "install-servers: done"
