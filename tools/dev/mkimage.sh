#!/usr/bin/env bash
# mkimage.sh: build the stagefs node image (deploy/container/Containerfile)
# from Debian 12 and this tree's own Debian packages.
# SPDX-License-Identifier: Apache-2.0
#
#   tools/dev/mkimage.sh [TAG]      default TAG: stagefs:VERSION
#
# 1. `make deb` (tools/dev/mkdeb.sh) builds the packages;
# 2. mmdebstrap makes a minimal bookworm root (variant apt) with stagefs,
#    libstagefs0 and stagefs-csi installed from those files, and their
#    dependencies from Debian's archive (the mirror is MIRROR, default
#    http://deb.debian.org/debian); apt's lists and caches are left out;
# 3. podman builds the Containerfile, which adds that root whole.
# Needs: mmdebstrap, podman, network access to the Debian mirror.  Prints
# the tag last.  Environment: MIRROR, STAGEFS_DEB_DIR (as make deb).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
VERSION=$(sed -n 1p "$REPO/VERSION")
TAG=${1:-stagefs:$VERSION}
OUT=${STAGEFS_DEB_DIR:-$REPO/build/deb}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
say() { printf 'mkimage: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

for c in mmdebstrap podman; do
	command -v $c >/dev/null || die "$c not found: apt-get install mmdebstrap podman"
done
make -s -C "$REPO" deb >&2 || die "make deb failed"
debs=()
for p in stagefs libstagefs0 stagefs-csi; do
	f=$(ls "$OUT/${p}_${VERSION}_"*.deb 2>/dev/null | head -n 1)
	[[ -n $f ]] || die "make deb made no $p package in $OUT"
	debs+=("$f")
done
ctx=$(mktemp -d "${TMPDIR:-/tmp}/stagefs-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
cp "$REPO/deploy/container/Containerfile" "$ctx/"
say "root file system: bookworm + ${debs[*]##*/}"
# the packages are copied in and installed with apt, which takes their
# dependencies from the archive; then apt's lists and caches go
mkdir -p "$ctx/debs"
cp "${debs[@]}" "$ctx/debs/"
mmdebstrap --variant=apt --format=tar \
	--customize-hook="mkdir -p \"\$1/tmp/debs\" && cp $ctx/debs/*.deb \"\$1/tmp/debs/\"" \
	--customize-hook='chroot "$1" sh -c "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends /tmp/debs/*.deb"' \
	--customize-hook='rm -rf "$1"/tmp/debs "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/usr/share/man/*' \
	bookworm "$ctx/rootfs.tar" "$MIRROR" >&2 || die "mmdebstrap failed"
say "root: $(du -h "$ctx/rootfs.tar" | cut -f1)"
podman build --quiet -f "$ctx/Containerfile" -t "$TAG" "$ctx" >&2 || die "podman build failed"
echo "$TAG"
