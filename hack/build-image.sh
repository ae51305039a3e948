#!/usr/bin/env bash
# Daemonless build of the slo-operator image with buildah (vfs storage, chroot isolation),
# for machines without a container engine or registry access: the base image is made from
# Debian packages with debootstrap (Debian's python3 3.11 in place of python:3.11-slim).
#
#   sudo apt-get install buildah debootstrap
#   hack/build-image.sh [TAG]            # default localhost/slo-operator:dev
#   SLO_BUILD_CA=/etc/ssl/certs/ca-certificates.crt hack/build-image.sh   # behind a TLS proxy
#
# SLO_BUILD_CA defaults to pip's own PIP_CERT, so a host whose pip trusts a proxy's CA builds
# the image the same way. The base image is reused when present (only the operator stages are
# rebuilt); removing it (and $SLO_IMAGE_WORK/rootfs) makes the next run a cold one.
# buildah honours CONTAINERS_STORAGE_CONF, so a scratch storage leaves the default one alone.
#
# Then, e.g.:  buildah --storage-driver vfs push localhost/slo-operator:dev oci-archive:slo.tar
set -euo pipefail

TAG=${1:-localhost/slo-operator:dev}
BASE=${BASE_TAG:-localhost/slo-base:debian-bookworm}
WORK=${SLO_IMAGE_WORK:-${TMPDIR:-/tmp}/slo-image}
SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
root=$(cd "$(dirname "$0")/.." && pwd)

if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  mkdir -p "$WORK"
  [[ -x "$WORK/rootfs/usr/bin/python3" ]] || debootstrap --variant=minbase \
    --include=python3,python3-venv,python-is-python3,ca-certificates,passwd \
    "$SUITE" "$WORK/rootfs" "$MIRROR"
  rm -rf "$WORK/rootfs/var/cache/apt/archives"/*.deb "$WORK/rootfs/var/lib/apt/lists"/*
  ctr=$(buildah from scratch)
  buildah copy "$ctr" "$WORK/rootfs" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd '["python3"]' "$ctr"
  buildah commit --rm "$ctr" "$BASE"
fi

# Behind a TLS-inspecting proxy, SLO_BUILD_CA names the CA bundle pip must trust; it is
# mounted into the build steps only (never into the image).
SLO_BUILD_CA=${SLO_BUILD_CA:-${PIP_CERT:-}}
mounts=()
if [[ -n "$SLO_BUILD_CA" ]]; then
  mkdir -p "$WORK"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$WORK/pip.conf"
  mounts=(-v "$SLO_BUILD_CA:/etc/ssl/certs/ca-certificates.crt:ro" -v "$WORK/pip.conf:/etc/pip.conf:ro")
fi

previous=$(buildah inspect --type image --format '{{.FromImageID}}' "$TAG" 2>/dev/null || true)
buildah bud --layers=false "${mounts[@]}" --build-arg "PYTHON_IMAGE=$BASE" -t "$TAG" \
  -f "$root/Dockerfile" "$root"
# The image TAG named before this build: remove it once it has no name left (dangling), so
# rebuilds (each `make test`) do not pile up full copies in vfs storage. An image another
# tag still names stays; so does one a container uses (buildah refuses).
if [[ -n "$previous" ]] && buildah images --filter dangling=true --quiet --no-trunc \
    | grep -qx "sha256:$previous"; then
  buildah rmi "$previous" >/dev/null 2>&1 || true
fi
echo "Built $TAG (base $BASE)"
