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
echo "== docs: the book builds"
# Warnings (an unclosed HTML tag, a missing chapter) fail too: mdbook only prints them.
mdbook=.tools/mdbook/bin/mdbook
[[ -x $mdbook ]] || { echo "mdbook missing: run scripts/setup.sh" >&2; exit 1; }
book_log=$("$mdbook" build docs 2>&1) || { echo "$book_log" >&2; exit 1; }
if grep -E "WARN|ERROR" <<<"$book_log" >&2; then
  echo "mdbook warned: fix the pages above" >&2
  exit 1
fi
# Broken relative links fail `xtask links::tests::the_repository_has_no_broken_link` below
# (`cargo xtask check-links` alone runs the same check).
echo "== cargo build --bins"
# The e2e tests run the workspace's binaries; nextest builds only those of packages with
# integration tests, so a binary could otherwise be missing on a fresh clone (or stale here).
cargo build --locked --workspace --bins
echo "== cargo nextest"
# Local hypervisor sets the tests leave behind (each test destroys its own; a drop that
# fails says so only in the captured output of a passing test): every test records the sets
# it creates, and only those are destroyed here, never a set someone else made meanwhile.
record=$(mktemp /tmp/oi-test-sets.XXXXXX)
trap 'rm -f "$record"' EXIT
export OI_TEST_SETS_RECORD=$record
status=0
cargo nextest run --locked --workspace --no-fail-fast "$@" || status=$?
bin=target/debug/oi-local-hypervisor-set
if [[ -x $bin ]]; then
  existing=$("$bin" list 2>/dev/null | awk 'NR>1 {print $1}' | sort -u || true)
  leftover=$(comm -12 <(sort -u "$record") <(printf '%s\n' "$existing") | grep -v '^$' || true)
  if [[ -n $leftover ]]; then
    echo "== WARNING: local hypervisor sets left behind by the tests (a test's cleanup failed):" $leftover
    for s in $leftover; do
      "$bin" destroy --name "$s" || echo "cannot destroy set $s"
    done
  fi
fi
exit "$status"
