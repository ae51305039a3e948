#!/usr/bin/env bash
# Builds the local control plane used by the integration tests (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok) and helm, from source fetched through
# the Go module proxy with the machine's Go. By default nothing prebuilt is downloaded; nothing is
# written into the repository: binaries live in a cache keyed by name and version,
#   ${SLO_BIN_CACHE:-$HOME/.cache/slo-operator/bin}/<name>-<version>/<name>
# and an env file with their paths is written to ${SLO_BIN_CACHE}/slo-bin.env (read by
# tests/support/cluster.py). A binary that exists and answers its version command is not rebuilt,
# so a warm run takes seconds.
#
# Usage: hack/build-binaries.sh [--only NAME[,NAME...]] [--force] [--latest]
#   NAME is one of: etcd kube kwok helm prometheus
#   Versions can be overridden: ETCD_VERSION, KUBE_VERSION, KUBE_FALLBACK_VERSION,
#   KWOK_VERSION, HELM_VERSION, PROMETHEUS_VERSION. --latest asks the module proxy for the newest release of each
#   pinned minor (Kubernetes 1.37, etcd 3.6) or major (kwok, helm) instead of the pins.
#
# SLO_FETCH_RELEASES=1 (opt-in, for connected machines): fetch the upstream release binaries of
# Kubernetes, etcd, helm and Prometheus instead, each checked against the sha256 its project
# publishes; a fetch that fails or does not verify falls back to the source build. kwok
# publishes no checksums and is always built from source. Base URLs: SLO_RELEASE_URL_KUBE,
# SLO_RELEASE_URL_ETCD, SLO_RELEASE_URL_HELM, SLO_RELEASE_URL_PROMETHEUS.
# SLO_NO_SOURCE_BUILD=1: never build from source (what is neither cached nor fetched fails).
set -euo pipefail

ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
# Newest 1.37 patch on the module proxy when this was written (go list -m -versions
# k8s.io/kubernetes); pinned so that CI reuses its cache instead of rebuilding on every release.
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
KUBE_FALLBACK_VERSION=${KUBE_FALLBACK_VERSION:-v1.36.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HELM_VERSION=${HELM_VERSION:-v4.3.2}
# Prometheus 3.x is published as module versions v0.3xx (v0.316.0 = 3.16.0).
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}

# The go command needs HOME for its caches; a bare CI environment may not set it.
export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
CACHE=${SLO_BIN_CACHE:-$HOME/.cache/slo-operator/bin}
ENV_FILE="$CACHE/slo-bin.env"
LOG_DIR="$CACHE/logs"

ONLY="etcd,kube,kwok,helm,prometheus"
FORCE=0
LATEST=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) ONLY="$2"; shift 2 ;;
    --force) FORCE=1; shift ;;
    --latest) LATEST=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

# Never let a go.mod "toolchain" line make the go command fetch another toolchain; static
# binaries need no libc on the host.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off

# flag NAME: 1 or 0 for the on/off environment variable NAME (unset or empty is off).
flag() {
  case "${!1:-}" in
    ""|0|false|no) echo 0 ;;
    1|true|yes) echo 1 ;;
    *) echo "$1=${!1}: expected 1 (on) or 0 (off)" >&2; return 2 ;;
  esac
}
FETCH=$(flag SLO_FETCH_RELEASES) || exit 2
NO_SOURCE=$(flag SLO_NO_SOURCE_BUILD) || exit 2
# Release downloads (SLO_FETCH_RELEASES=1). One base URL per project, overridable so that a
# mirror (or a test's local server) can stand in; the paths below them are the projects' own.
RELEASE_URL_KUBE=${SLO_RELEASE_URL_KUBE:-https://dl.k8s.io/release}
RELEASE_URL_ETCD=${SLO_RELEASE_URL_ETCD:-https://github.com/etcd-io/etcd/releases/download}
RELEASE_URL_HELM=${SLO_RELEASE_URL_HELM:-https://get.helm.sh}
RELEASE_URL_PROMETHEUS=${SLO_RELEASE_URL_PROMETHEUS:-https://github.com/prometheus/prometheus/releases/download}

# Without Go only release binaries (or cached ones) can be had; the source build of whatever
# still needs one says so when it comes to it.
if [[ ($FETCH == 0 && $NO_SOURCE == 0) || $LATEST == 1 ]]; then
  command -v go >/dev/null || { echo "go is required" >&2; exit 1; }
fi
command -v python3 >/dev/null || { echo "python3 is required" >&2; exit 1; }
mkdir -p "$CACHE" "$LOG_DIR"

# newest MODULE PREFIX: the newest release (no pre-release) of MODULE starting with PREFIX.
newest() {
  (cd "$CACHE" && go list -m -versions "$1") | tr ' ' '\n' | grep -E "^${2//./\\.}[.0-9]*$" \
    | sort -V | tail -n 1
}
if [[ $LATEST == 1 ]]; then
  KUBE_VERSION=$(newest k8s.io/kubernetes "${KUBE_VERSION%.*}.")
  KUBE_FALLBACK_VERSION=$(newest k8s.io/kubernetes "${KUBE_FALLBACK_VERSION%.*}.")
  ETCD_VERSION=$(newest go.etcd.io/etcd/server/v3 "${ETCD_VERSION%.*}.")
  KWOK_VERSION=$(newest sigs.k8s.io/kwok "${KWOK_VERSION%%.*}.")
  HELM_VERSION=$(newest "helm.sh/helm/${HELM_VERSION%%.*}" "${HELM_VERSION%%.*}.")
  echo "latest: kubernetes $KUBE_VERSION (fallback $KUBE_FALLBACK_VERSION), etcd $ETCD_VERSION," \
    "kwok $KWOK_VERSION, helm $HELM_VERSION"
fi

declare -A ENV_OUT=()
FAILED=()
SUMMARY=()

want() { [[ ",$ONLY," == *",$1,"* ]]; }
now() { date +%s; }

# json_field FIELD: read one top-level field from a JSON document on stdin.
# `go mod download -json` reports a failure as an "Error" field, which is shown instead.
json_field() {
  python3 -c '
import json, sys
doc = json.load(sys.stdin)
if sys.argv[1] not in doc:
    sys.exit(doc.get("Error") or f"no {sys.argv[1]} in {doc}")
print(doc[sys.argv[1]])' "$1"
}

# is_built BIN EXPECTED ARGS...: the binary exists and its version output names EXPECTED.
is_built() {
  [[ $FORCE == 0 ]] || return 1
  reports_version "$@"
}

# reports_version BIN EXPECTED ARGS...: BIN runs with ARGS and its output names EXPECTED.
reports_version() {
  local bin=$1 expected=$2; shift 2
  [[ -x "$bin" ]] || return 1
  # Captured, not piped into grep -q: an early exit of grep would SIGPIPE the binary and fail
  # the pipeline under pipefail.
  local out
  out=$("$bin" "$@" 2>&1) || return 1
  [[ $out == *"${expected#v}"* ]]
}

# make_wrapper DIR MODULE VERSION LOCAL_VERSION
# Generates a main module in DIR that requires MODULE@VERSION. Upstream go.mod files replace
# sibling modules with local paths (etcd's ../api, Kubernetes' ./staging/src/k8s.io/*), which a
# dependency's replaces cannot do; each such replace that MODULE requires becomes a replace with
# the released LOCAL_VERSION of that module. The list is read from the downloaded go.mod, never
# hard-coded. Non-local replaces and godebug defaults are carried over as upstream sets them.
make_wrapper() {
  local dir=$1 mod=$2 ver=$3 local_ver=$4
  rm -rf "$dir"
  mkdir -p "$dir"
  local gomod
  gomod=$(cd "$dir" && go mod download -json "$mod@$ver" | json_field GoMod) || return 1
  (cd "$dir" && go mod init slo-operator.local/build >/dev/null 2>&1) || return 1
  go mod edit -json "$gomod" >"$dir/upstream-go.mod.json" || return 1
  python3 - "$dir/upstream-go.mod.json" "$local_ver" >"$dir/edits" <<'PY' || return 1
import json
import sys

gomod = json.load(open(sys.argv[1]))
local_version = sys.argv[2]
required = {r["Path"] for r in gomod.get("Require") or []}
print(f"-go={gomod['Go']}")
for g in gomod.get("Godebug") or []:
    print(f"-godebug={g['Key']}={g['Value']}")
for r in gomod.get("Replace") or []:
    old, new = r["Old"], r["New"]
    if new["Path"].startswith((".", "/")):
        # Local-path replaces of modules nothing requires (etcd's FORBIDDEN_DEPENDENCY
        # guards) have no released counterpart and are not needed.
        if old["Path"] in required:
            print(f"-replace={old['Path']}={old['Path']}@{local_version}")
    else:
        src = old["Path"] + ("@" + old["Version"] if old.get("Version") else "")
        print(f"-replace={src}={new['Path']}@{new['Version']}")
PY
  (cd "$dir" && xargs go mod edit <edits) || return 1
}

# build_in DIR LOG CMD...: run CMD in the wrapper module DIR, appending its output to LOG.
build_in() {
  local dir=$1 log=$2; shift 2
  (cd "$dir" && "$@") >>"$log" 2>&1
}

record() { SUMMARY+=("$(printf '%-24s %-10s %6ss  %s' "$1" "$2" "$3" "$4")"); }

# may_build NAME: whether a source build of NAME may run (the fallback of a release fetch).
may_build() {
  if [[ $NO_SOURCE == 1 ]]; then
    echo "!! $1: not built from source (SLO_NO_SOURCE_BUILD=1)" >&2; return 1
  fi
  command -v go >/dev/null || { echo "!! $1: go is required to build it from source" >&2; return 1; }
}

# ---- Release binaries (SLO_FETCH_RELEASES=1) ----
# Each fetch_NAME VERSION downloads NAME's release into a staging folder, checks it against the
# sha256 its project publishes beside it, checks that the binary runs here and reports VERSION,
# and only then installs it where the source build would put it. Diagnostics go to the caller's
# log; the last line says why a fetch was not used.

# release_arch: this machine's architecture as the projects name it in their Linux releases.
release_arch() {
  [[ $(uname -s) == Linux ]] || { echo "no Linux here ($(uname -s)): no release binaries" >&2; return 1; }
  case $(uname -m) in
    x86_64|amd64) echo amd64 ;;
    aarch64|arm64) echo arm64 ;;
    ppc64le) echo ppc64le ;;
    s390x) echo s390x ;;
    *) echo "no release binaries for machine type $(uname -m)" >&2; return 1 ;;
  esac
}

# download URL FILE: HTTP errors are failures; curl retries what it deems transient (timeouts,
# 408, 429, 5xx) and gives up on a transfer slower than 1 KiB/s for a minute (a stalled link),
# so that the source build takes over instead of the script hanging.
download() {
  command -v curl >/dev/null || { echo "curl is required to fetch release binaries" >&2; return 1; }
  echo "GET $1"
  curl --fail --silent --show-error --location --retry 3 --connect-timeout 20 \
    --speed-limit 1024 --speed-time 60 --output "$2" "$1"
}

# verify FILE SUMS: FILE's sha256 is the one SUMS publishes for FILE's name. SUMS is a list of
# "<sha256>  <name>" lines (sha256sum's format, "*<name>" in binary mode: etcd's SHA256SUMS,
# Prometheus' sha256sums.txt, helm's .sha256sum) or, as dl.k8s.io publishes, the bare hash.
verify() {
  local file=$1 sums=$2 name=${1##*/} want got
  want=$(awk -v n="$name" '
    NR == 1 && NF == 1 { bare = $1 }
    NF >= 2 && ($2 == n || $2 == "*" n) { named = $1 }
    END { print tolower(named != "" ? named : (NR == 1 ? bare : "")) }' "$sums") || return 1
  if [[ ! $want =~ ^[0-9a-f]{64}$ ]]; then
    echo "no sha256 for $name in ${sums##*/}" >&2; return 1
  fi
  got=$(sha256sum "$file" | cut -d' ' -f1) || return 1
  if [[ $got != "$want" ]]; then
    echo "sha256 mismatch for $name: got $got, published $want" >&2; return 1
  fi
  echo "sha256 ok for $name: $got"
}

# stage NAME VERSION: a fresh, empty staging folder for one release's downloads.
stage() {
  local d="$CACHE/src/release-$1-$2"
  rm -rf "$d" && mkdir -p "$d" && echo "$d"
}

# fetch_checked DIR URL SUMS_URL: download URL and its checksum file into DIR; verify.
fetch_checked() {
  local dir=$1 url=$2 sums_url=$3 name=${2##*/}
  download "$url" "$dir/$name" || return 1
  download "$sums_url" "$dir/$name.sums" || return 1
  verify "$dir/$name" "$dir/$name.sums"
}

# check_release BIN EXPECTED ARGS...: a downloaded (and verified) BIN runs and reports EXPECTED.
check_release() {
  chmod 0755 "$1" || return 1
  reports_version "$@" || { echo "${1##*/} does not run here or does not report $2" >&2; return 1; }
}

# https://dl.k8s.io/release/<v>/bin/linux/<arch>/<binary> with <binary>.sha256 (the bare hash).
fetch_kubernetes() {
  local ver=$1 a dir b
  local bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  a=$(release_arch) || return 1
  dir=$(stage kubernetes "$ver") || return 1
  for b in "${bins[@]}"; do
    fetch_checked "$dir" "$RELEASE_URL_KUBE/$ver/bin/linux/$a/$b" \
      "$RELEASE_URL_KUBE/$ver/bin/linux/$a/$b.sha256" || return 1
  done
  for b in "${bins[@]}"; do
    local args=(--version); [[ $b == kubectl ]] && args=(version --client)
    check_release "$dir/$b" "$ver" "${args[@]}" || return 1
  done
  for b in "${bins[@]}"; do
    mkdir -p "$CACHE/$b-$ver" && install -m 0755 "$dir/$b" "$CACHE/$b-$ver/$b" || return 1
  done
}

# https://github.com/etcd-io/etcd/releases/download/<v>/etcd-<v>-linux-<arch>.tar.gz, SHA256SUMS.
fetch_etcd() {
  local ver=$1 a dir top
  a=$(release_arch) || return 1
  dir=$(stage etcd "$ver") || return 1
  top="etcd-$ver-linux-$a"
  fetch_checked "$dir" "$RELEASE_URL_ETCD/$ver/$top.tar.gz" "$RELEASE_URL_ETCD/$ver/SHA256SUMS" \
    || return 1
  tar -xzf "$dir/$top.tar.gz" -C "$dir" "$top/etcd" || return 1
  check_release "$dir/$top/etcd" "$ver" --version || return 1
  mkdir -p "$CACHE/etcd-$ver" && install -m 0755 "$dir/$top/etcd" "$CACHE/etcd-$ver/etcd"
}

# https://get.helm.sh/helm-<v>-linux-<arch>.tar.gz and .sha256sum beside it.
fetch_helm() {
  local ver=$1 a dir tgz
  a=$(release_arch) || return 1
  dir=$(stage helm "$ver") || return 1
  tgz="helm-$ver-linux-$a.tar.gz"
  fetch_checked "$dir" "$RELEASE_URL_HELM/$tgz" "$RELEASE_URL_HELM/$tgz.sha256sum" || return 1
  tar -xzf "$dir/$tgz" -C "$dir" "linux-$a/helm" || return 1
  check_release "$dir/linux-$a/helm" "$ver" version --short || return 1
  mkdir -p "$CACHE/helm-$ver" && install -m 0755 "$dir/linux-$a/helm" "$CACHE/helm-$ver/helm"
}

# fetch_prometheus RELEASE (3.16.0, not the module version): .../v<release>/
# prometheus-<release>.linux-<arch>.tar.gz and sha256sums.txt; installed under the module
# version's folder like the source build.
fetch_prometheus() {
  local rel=$1 a dir top b out="$CACHE/prometheus-$PROMETHEUS_VERSION"
  a=$(release_arch) || return 1
  dir=$(stage prometheus "$rel") || return 1
  top="prometheus-$rel.linux-$a"
  fetch_checked "$dir" "$RELEASE_URL_PROMETHEUS/v$rel/$top.tar.gz" \
    "$RELEASE_URL_PROMETHEUS/v$rel/sha256sums.txt" || return 1
  tar -xzf "$dir/$top.tar.gz" -C "$dir" "$top/prometheus" "$top/promtool" || return 1
  for b in prometheus promtool; do check_release "$dir/$top/$b" "$rel" --version || return 1; done
  mkdir -p "$out" || return 1
  for b in prometheus promtool; do install -m 0755 "$dir/$top/$b" "$out/$b" || return 1; done
}

# try_release NAME VERSION: with SLO_FETCH_RELEASES=1, fetch_NAME VERSION with its output in
# NAME's log folder. Says why when it fails; the caller then builds from source.
try_release() {
  local name=$1 ver=$2 rc=0
  [[ $FETCH == 1 ]] || return 1
  local log="$LOG_DIR/$name-$ver-release.log"
  : >"$log"
  echo ">> fetching $name $ver release binaries (log: $log)"
  "fetch_$name" "$ver" >>"$log" 2>&1 || rc=$?
  rm -rf "$CACHE/src/release-$name-$ver"
  if [[ $rc != 0 ]]; then
    echo "!! $name $ver release binaries not used ($(tail -n 1 "$log"));" \
      "falling back to the source build" >&2
  fi
  return "$rc"
}

build_etcd() {
  local out="$CACHE/etcd-$ETCD_VERSION" t0; t0=$(now)
  ENV_OUT[SLO_ETCD]="$out/etcd"
  ENV_OUT[SLO_ETCD_VERSION]="$ETCD_VERSION"
  if is_built "$out/etcd" "$ETCD_VERSION" --version; then
    record etcd "$ETCD_VERSION" $(( $(now) - t0 )) cached; return 0
  fi
  if try_release etcd "$ETCD_VERSION"; then
    record etcd "$ETCD_VERSION" $(( $(now) - t0 )) fetched; return 0
  fi
  may_build etcd || return 1
  local dir="$CACHE/src/etcd-$ETCD_VERSION" log="$LOG_DIR/etcd-$ETCD_VERSION.log"
  : >"$log"
  echo ">> building etcd $ETCD_VERSION (log: $log)"
  make_wrapper "$dir" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION" >>"$log" 2>&1 || return 1
  build_in "$dir" "$log" go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" || return 1
  mkdir -p "$out" || return 1
  build_in "$dir" "$log" go build -trimpath \
    -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$ETCD_VERSION" \
    -o "$out/etcd" go.etcd.io/etcd/server/v3 || return 1
  is_built "$out/etcd" "$ETCD_VERSION" --version || return 1
  record etcd "$ETCD_VERSION" $(( $(now) - t0 )) built
}

# build_kube VERSION: kube-apiserver, kube-controller-manager, kube-scheduler and kubectl in one
# go build so that shared packages compile once.
build_kube() {
  local ver=$1 t0; t0=$(now)
  local minor=${ver#v1.}; minor=${minor%%.*}
  local staging="v0.${ver#v1.}"
  local bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local all_built=1 b
  for b in "${bins[@]}"; do
    local args=(--version); [[ $b == kubectl ]] && args=(version --client)
    is_built "$CACHE/$b-$ver/$b" "$ver" "${args[@]}" || all_built=0
  done
  if [[ $all_built == 1 ]]; then
    record kubernetes "$ver" $(( $(now) - t0 )) cached
  elif try_release kubernetes "$ver"; then
    record kubernetes "$ver" $(( $(now) - t0 )) fetched
  else
    may_build kubernetes || return 1
    local dir="$CACHE/src/kubernetes-$ver" log="$LOG_DIR/kubernetes-$ver.log"
    : >"$log"
    echo ">> building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $ver (log: $log)"
    make_wrapper "$dir" k8s.io/kubernetes "$ver" "$staging" >>"$log" 2>&1 || return 1
    local pkgs=() ldflags="-s -w" info date sum p
    for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
    build_in "$dir" "$log" go get "${pkgs[@]/%/@$ver}" || return 1
    # Release builds stamp these through hack/lib/version.sh; without them /version says v0.0.0.
    info=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$ver")
    date=$(python3 -c 'import json,sys; print(json.load(open(json.load(sys.stdin)["Info"]))["Time"])' <<<"$info")
    sum=$(json_field Sum <<<"$info")
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $p.gitVersion=$ver -X $p.gitMajor=1 -X $p.gitMinor=$minor"
      ldflags+=" -X $p.gitCommit=module:${sum} -X $p.gitTreeState=clean -X $p.buildDate=$date"
    done
    local tmp="$CACHE/src/kubernetes-$ver/bin"
    mkdir -p "$tmp"
    build_in "$dir" "$log" go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}" || return 1
    for b in "${bins[@]}"; do
      mkdir -p "$CACHE/$b-$ver"
      mv -f "$tmp/$b" "$CACHE/$b-$ver/$b"
    done
    record kubernetes "$ver" $(( $(now) - t0 )) built
  fi
  ENV_OUT[SLO_KUBE_APISERVER]="$CACHE/kube-apiserver-$ver/kube-apiserver"
  ENV_OUT[SLO_KUBE_CONTROLLER_MANAGER]="$CACHE/kube-controller-manager-$ver/kube-controller-manager"
  ENV_OUT[SLO_KUBE_SCHEDULER]="$CACHE/kube-scheduler-$ver/kube-scheduler"
  ENV_OUT[SLO_KUBECTL]="$CACHE/kubectl-$ver/kubectl"
  ENV_OUT[SLO_KUBE_VERSION]="$ver"
}

build_kwok() {
  local out="$CACHE/kwok-$KWOK_VERSION" t0; t0=$(now)
  ENV_OUT[SLO_KWOK]="$out/kwok"
  ENV_OUT[SLO_KWOK_STAGES]="$out/stages"
  ENV_OUT[SLO_KWOK_VERSION]="$KWOK_VERSION"
  if is_built "$out/kwok" "$KWOK_VERSION" --version && [[ -s "$out/stages/pod-ready.yaml" ]]; then
    record kwok "$KWOK_VERSION" $(( $(now) - t0 )) cached; return 0
  fi
  # kwok's releases are bare binaries with no published checksum (its hack/releases.sh uploads
  # kwok-<os>-<arch> alone), and an unverified binary is never run: always from source.
  if [[ $FETCH == 1 ]]; then
    echo ">> kwok $KWOK_VERSION: no published checksums, so built from source"
  fi
  may_build kwok || return 1
  local dir="$CACHE/src/kwok-$KWOK_VERSION" log="$LOG_DIR/kwok-$KWOK_VERSION.log"
  : >"$log"
  echo ">> building kwok $KWOK_VERSION (log: $log)"
  make_wrapper "$dir" sigs.k8s.io/kwok "$KWOK_VERSION" "$KWOK_VERSION" >>"$log" 2>&1 || return 1
  build_in "$dir" "$log" go get "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" || return 1
  mkdir -p "$out/stages" || return 1
  build_in "$dir" "$log" go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
    -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok || return 1
  # Stage objects drive the fake node/pod lifecycle; they ship in the module, not in the binary.
  local src
  src=$(cd "$dir" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | json_field Dir) || return 1
  install -m 0644 \
    "$src/kustomize/stage/node/fast/node-initialize.yaml" \
    "$src/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
    "$src/kustomize/stage/pod/fast/pod-ready.yaml" \
    "$src/kustomize/stage/pod/fast/pod-complete.yaml" \
    "$src/kustomize/stage/pod/fast/pod-delete.yaml" \
    "$out/stages/" || return 1
  is_built "$out/kwok" "$KWOK_VERSION" --version || return 1
  record kwok "$KWOK_VERSION" $(( $(now) - t0 )) built
}

build_helm() {
  local out="$CACHE/helm-$HELM_VERSION" t0; t0=$(now)
  local major=${HELM_VERSION%%.*}
  ENV_OUT[SLO_HELM]="$out/helm"
  ENV_OUT[SLO_HELM_VERSION]="$HELM_VERSION"
  if is_built "$out/helm" "$HELM_VERSION" version --short; then
    record helm "$HELM_VERSION" $(( $(now) - t0 )) cached; return 0
  fi
  if try_release helm "$HELM_VERSION"; then
    record helm "$HELM_VERSION" $(( $(now) - t0 )) fetched; return 0
  fi
  may_build helm || return 1
  local dir="$CACHE/src/helm-$HELM_VERSION" log="$LOG_DIR/helm-$HELM_VERSION.log"
  : >"$log"
  echo ">> building helm $HELM_VERSION (log: $log)"
  make_wrapper "$dir" "helm.sh/helm/$major" "$HELM_VERSION" "$HELM_VERSION" >>"$log" 2>&1 || return 1
  build_in "$dir" "$log" go get "helm.sh/helm/$major/cmd/helm@$HELM_VERSION" || return 1
  mkdir -p "$out" || return 1
  build_in "$dir" "$log" go build -trimpath \
    -ldflags "-s -w -X helm.sh/helm/$major/internal/version.version=$HELM_VERSION" \
    -o "$out/helm" "helm.sh/helm/$major/cmd/helm" || return 1
  is_built "$out/helm" "$HELM_VERSION" version --short || return 1
  record helm "$HELM_VERSION" $(( $(now) - t0 )) built
}

# Prometheus 3.x and promtool from the module proxy (no web UI assets: tests use the HTTP API).
# The release version string is stamped through github.com/prometheus/common/version. If the
# build fails, Debian's prometheus package (2.42; /usr/bin/prometheus, /usr/bin/promtool) is used
# when installed; tests/support/prometheus.py reads SLO_PROMETHEUS and says which is in use.
build_prometheus() {
  local out="$CACHE/prometheus-$PROMETHEUS_VERSION" t0; t0=$(now)
  # v0.316.0 -> 3.16.0
  local minor=${PROMETHEUS_VERSION#v0.3}; minor=${minor%%.*}; minor=$((10#$minor))
  local patch=${PROMETHEUS_VERSION##*.}
  local release="3.$minor.$patch"
  ENV_OUT[SLO_PROMETHEUS]="$out/prometheus"
  ENV_OUT[SLO_PROMTOOL]="$out/promtool"
  ENV_OUT[SLO_PROMETHEUS_VERSION]="$release"
  if is_built "$out/prometheus" "$release" --version && is_built "$out/promtool" "$release" --version; then
    record prometheus "$release" $(( $(now) - t0 )) cached; return 0
  fi
  if try_release prometheus "$release"; then
    record prometheus "$release" $(( $(now) - t0 )) fetched; return 0
  fi
  may_build prometheus || return 1
  local dir="$CACHE/src/prometheus-$PROMETHEUS_VERSION" log="$LOG_DIR/prometheus-$PROMETHEUS_VERSION.log"
  : >"$log"
  echo ">> building prometheus and promtool $release (log: $log)"
  make_wrapper "$dir" github.com/prometheus/prometheus "$PROMETHEUS_VERSION" "$PROMETHEUS_VERSION" \
    >>"$log" 2>&1 || return 1
  local m=github.com/prometheus/prometheus
  # go get of the two cmd packages themselves, so go.sum covers everything they import.
  build_in "$dir" "$log" go get "$m/cmd/prometheus@$PROMETHEUS_VERSION" \
    "$m/cmd/promtool@$PROMETHEUS_VERSION" || return 1
  local v=github.com/prometheus/common/version
  mkdir -p "$out" || return 1
  build_in "$dir" "$log" go build -trimpath -tags netgo \
    -ldflags "-s -w -X $v.Version=$release -X $v.Revision=module-$PROMETHEUS_VERSION -X $v.Branch=HEAD" \
    -o "$out/" "$m/cmd/prometheus" "$m/cmd/promtool" || return 1
  is_built "$out/prometheus" "$release" --version || return 1
  record prometheus "$release" $(( $(now) - t0 )) built
}

# failed NAME PREFIX: remember the failure and publish no path for that component.
DROPPED=()
failed() {
  FAILED+=("$1")
  DROPPED+=("$2")
  local k log
  # shellcheck disable=SC2012  # newest by mtime; the log names are ours, plain ASCII
  # No log at all when nothing was attempted (SLO_NO_SOURCE_BUILD=1 without a fetch).
  log=$(ls -t "$LOG_DIR/${1/kube/kubernetes}-"*.log 2>/dev/null | head -n 1) || log=""
  if [[ -n "$log" ]]; then
    echo "!! $1 failed; last lines of $log:" >&2
    tail -n 20 "$log" >&2
  fi
  for k in "${!ENV_OUT[@]}"; do [[ $k == "$2"* ]] && unset "ENV_OUT[$k]"; done
  return 0
}

T_START=$(now)
if want etcd; then build_etcd || failed etcd SLO_ETCD; fi
if want kube; then
  if ! build_kube "$KUBE_VERSION"; then
    echo "!! Kubernetes $KUBE_VERSION failed to build (see $LOG_DIR/kubernetes-$KUBE_VERSION.log);" \
      "falling back to $KUBE_FALLBACK_VERSION" >&2
    build_kube "$KUBE_FALLBACK_VERSION" || failed kube SLO_KUBE
  fi
fi
if want kwok; then build_kwok || failed kwok SLO_KWOK; fi
if want helm; then build_helm || failed helm SLO_HELM; fi
if want prometheus; then build_prometheus || failed prometheus SLO_PROM; fi

# Keep entries for components not rebuilt in this run (e.g. with --only).
if [[ -f "$ENV_FILE" ]]; then
  while IFS='=' read -r k v; do
    [[ -z "$k" || -n "${ENV_OUT[$k]+x}" ]] && continue
    for d in "${DROPPED[@]}"; do [[ $k == "$d"* ]] && continue 2; done
    ENV_OUT[$k]="$v"
  done <"$ENV_FILE"
fi
tmp_env=$(mktemp "$CACHE/.env.XXXXXX")
for k in $(printf '%s\n' "${!ENV_OUT[@]}" | sort); do
  printf '%s=%s\n' "$k" "${ENV_OUT[$k]}" >>"$tmp_env"
done
mv -f "$tmp_env" "$ENV_FILE"

echo "== build summary (total $(( $(now) - T_START ))s)"
printf '%s\n' "${SUMMARY[@]}"
echo "== env file: $ENV_FILE"
cat "$ENV_FILE"
if [[ ${#FAILED[@]} -gt 0 ]]; then
  echo "!! failed: ${FAILED[*]} (logs in $LOG_DIR)" >&2
  exit 1
fi
