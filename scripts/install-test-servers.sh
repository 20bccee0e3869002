#!/usr/bin/env bash
# Installs the real storage servers that the downloader's integration tests start on loopback:
#   - moto (PyPI, moto[server]): an S3-compatible server
#   - Azurite (npm): the Azure Blob Storage emulator
#   - fake-gcs-server (Go module): a Google Cloud Storage JSON API server
# The HTTPS and Hugging Face layout servers are plain Node servers inside the tests.
#
# Everything goes to a cache outside the repo (MLMODEL_TEST_SERVERS_DIR, default
# ~/.cache/mlmodel-test-servers) and is keyed by version, so a second run costs nothing.
# Tests find the servers through the same directory (test/integration/downloader/servers.ts).
set -euo pipefail

MOTO_VERSION="5.2.5"
AZURITE_VERSION="3.37.0"
FAKE_GCS_VERSION="v1.56.1"

dir="${MLMODEL_TEST_SERVERS_DIR:-$HOME/.cache/mlmodel-test-servers}"
mkdir -p "$dir"

install_moto() {
  local venv="$dir/moto-$MOTO_VERSION"
  if [ -x "$venv/bin/moto_server" ]; then return; fi
  rm -rf "$venv"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian's python3 ships venv separately.
    rm -rf "$venv"
    (apt-get update -qq && apt-get install -y -qq python3-venv) >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
}

install_azurite() {
  local prefix="$dir/azurite-$AZURITE_VERSION"
  if [ -f "$prefix/node_modules/azurite/dist/src/blob/main.js" ]; then return; fi
  rm -rf "$prefix"
  mkdir -p "$prefix"
  npm install --silent --no-audit --no-fund --prefix "$prefix" "azurite@$AZURITE_VERSION"
}

install_fake_gcs() {
  local bin="$dir/fake-gcs-server-$FAKE_GCS_VERSION"
  if [ -x "$bin/fake-gcs-server" ]; then return; fi
  mkdir -p "$bin"
  GOBIN="$bin" CGO_ENABLED=0 go install "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
}

# Only the named servers (all when none is named), e.g. `install-test-servers.sh moto`.
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(moto azurite fake-gcs); fi
for t in "${targets[@]}"; do
  case "$t" in
    moto) install_moto ;;
    azurite) install_azurite ;;
    fake-gcs) install_fake_gcs ;;
    *) echo "install-test-servers.sh: unknown server \"$t\" (expected moto, azurite or fake-gcs)" >&2; exit 2 ;;
  esac
  echo "install-test-servers.sh: $t ready in $dir"
done
