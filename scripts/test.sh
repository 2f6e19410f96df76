#!/usr/bin/env bash
# The project's test command (README): formatting, lints, and every test, with tests that need
# real containerd/etcd/haproxy/netns required to run (OI_REQUIRE_REAL=1), never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export OI_REQUIRE_REAL=1
# Test threads get the stack the runtimes that execute plans get (oi_engine::RUNTIME_STACK_BYTES):
# unoptimized reconcile futures are deep.
export RUST_MIN_STACK=8388608
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --locked --workspace --all-targets -- -D warnings
echo "== cargo nextest"
cargo nextest run --locked --workspace --no-fail-fast "$@"
