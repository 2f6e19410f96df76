#!/usr/bin/env bash
# Fresh-machine setup (Debian 12): the system packages the tests need, a check for cargo
# nextest, then the offline image set (`cargo xtask images`). Idempotent: installs only what is
# missing, runs `apt-get update` only when something is, and rebuilds only changed images.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  containerd runc etcd-server etcd-client haproxy protobuf-compiler libprotobuf-dev iproute2
  wireguard-go wireguard-tools busybox-static openssl gcc libc6-dev iptables python3-venv
  keepalived openssh-server openssh-client
)

installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = "installed" ]
}

missing=()
for p in "${PACKAGES[@]}"; do
  if installed "$p"; then
    echo "setup: package $p already installed"
  else
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing packages ${missing[*]}; installing them needs root" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update
  # --no-install-recommends: wireguard-tools would otherwise pull in a kernel image and udev.
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present, apt-get not run"
fi

# kubectl is not in Debian 12's archive; machines of this project's kind come with it. The demo,
# the e2e scenarios and the kustomize test use it.
if ! command -v kubectl >/dev/null 2>&1; then
  echo "setup: kubectl is missing (the demo and the tests call it); install it first, e.g. from" \
    "https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/" >&2
  exit 1
fi
echo "setup: kubectl present ($(kubectl version --client 2>/dev/null | head -n 1))"

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found on PATH; install the Rust toolchain first" >&2
  exit 1
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "setup: cargo nextest is missing (scripts/test.sh needs it); install it, e.g. cargo install --locked cargo-nextest" >&2
  exit 1
fi
echo "setup: $(cargo nextest --version | head -n 1) present"

# An S3-compatible server for the snapshot tests: moto, from the Python package registry, in
# a virtual environment of its own under .tools/ (never the system's Python packages).
MOTO_VERSION=5.2.5
VENV=.tools/venv
if [ -x "$VENV/bin/moto_server" ] &&
  [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("moto"))' 2>/dev/null)" = "$MOTO_VERSION" ]; then
  echo "setup: moto $MOTO_VERSION present in $VENV"
else
  echo "setup: installing moto[server]==$MOTO_VERSION into $VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
fi
# A Redfish BMC emulator for the SIP jump host's `host` tool tests: sushy-tools (fake driver),
# from the Python package registry, in the same virtual environment.
SUSHY_VERSION=2.2.0
if [ -x "$VENV/bin/sushy-emulator" ] &&
  [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sushy-tools"))' 2>/dev/null)" = "$SUSHY_VERSION" ]; then
  echo "setup: sushy-tools $SUSHY_VERSION present in $VENV"
else
  echo "setup: installing sushy-tools==$SUSHY_VERSION into $VENV"
  [ -x "$VENV/bin/pip" ] || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "sushy-tools==$SUSHY_VERSION"
fi

# The official Kubernetes Python client, a client we did not write, run against the API
# stand-in by its tests; in a virtual environment of its own (its pins differ from moto's).
K8S_CLIENT_VERSION=37.0.2
K8S_VENV=.tools/venv-k8s
if [ "$("$K8S_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes"))' 2>/dev/null)" = "$K8S_CLIENT_VERSION" ]; then
  echo "setup: the kubernetes Python client $K8S_CLIENT_VERSION present in $K8S_VENV"
else
  echo "setup: installing kubernetes==$K8S_CLIENT_VERSION into $K8S_VENV"
  /usr/bin/python3 -m venv "$K8S_VENV"
  "$K8S_VENV/bin/pip" install --quiet --disable-pip-version-check "kubernetes==$K8S_CLIENT_VERSION"
fi

# An OpenID Connect provider for the OIDC tests: oauth2-mock-server from the npm registry,
# under .tools/npm (never installed globally). Node comes with machines of this kind.
OIDC_PROVIDER_VERSION=9.3.0
NPM_DIR=.tools/npm
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "setup: node and npm are missing (the OIDC tests run a provider on Node); install Node.js 20 or later" >&2
  exit 1
fi
if [ "$(node -p "require('./$NPM_DIR/node_modules/oauth2-mock-server/package.json').version" 2>/dev/null)" = "$OIDC_PROVIDER_VERSION" ]; then
  echo "setup: oauth2-mock-server $OIDC_PROVIDER_VERSION present in $NPM_DIR"
else
  echo "setup: installing oauth2-mock-server@$OIDC_PROVIDER_VERSION into $NPM_DIR"
  mkdir -p "$NPM_DIR"
  npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error \
    "oauth2-mock-server@$OIDC_PROVIDER_VERSION"
fi

# mdbook renders the docs book (docs/); scripts/test.sh builds it. From crates.io, without its
# server and file watcher (not needed to build), under .tools/mdbook.
MDBOOK_VERSION=0.5.4
MDBOOK=.tools/mdbook/bin/mdbook
if [ "$("$MDBOOK" --version 2>/dev/null)" = "mdbook v$MDBOOK_VERSION" ]; then
  echo "setup: mdbook $MDBOOK_VERSION present in .tools/mdbook"
else
  echo "setup: installing mdbook $MDBOOK_VERSION into .tools/mdbook (cargo install, about 2 min)"
  cargo install --locked --quiet --no-default-features --features search \
    mdbook --version "$MDBOOK_VERSION" --root .tools/mdbook
fi

echo "setup: building the offline image set (cargo xtask images)"
cargo xtask images
echo "setup: done"
