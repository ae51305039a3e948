#!/usr/bin/env bash
# Builds glua, the command-line interpreter of gopher-lua (the Lua 5.1 dialect Argo CD embeds
# for resource health checks), from the Go module proxy. The Argo CD health checks in
# deploy/argocd/ are tested with it (tests/operator/gitops/test_argocd.py).
#
#   ${SLO_BIN_CACHE:-$HOME/.cache/slo-operator/bin}/glua-<version>/glua
#
# Tests find it there (or at $SLO_GLUA). An existing binary that runs is reused.
# GOPHER_LUA_VERSION overrides the pin (Argo CD's go.mod requires github.com/yuin/gopher-lua
# v1.1.1).
set -euo pipefail

GOPHER_LUA_VERSION=${GOPHER_LUA_VERSION:-v1.1.1}
export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
CACHE=${SLO_BIN_CACHE:-$HOME/.cache/slo-operator/bin}
DEST="$CACHE/glua-$GOPHER_LUA_VERSION"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off

if [[ ! -x "$DEST/glua" ]] || ! echo 'print(1)' | "$DEST/glua" - >/dev/null 2>&1; then
  command -v go >/dev/null || { echo "go is required" >&2; exit 1; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$DEST"
  (
    cd "$work"
    go mod init glua-build >/dev/null 2>&1
    # go.sum must cover the command's own imports, so get the package, not only the module.
    go get "github.com/yuin/gopher-lua/cmd/glua@$GOPHER_LUA_VERSION"
    go build -trimpath -ldflags '-s -w' -o "$DEST/glua" github.com/yuin/gopher-lua/cmd/glua
  )
fi

echo "glua $GOPHER_LUA_VERSION: $DEST/glua"
