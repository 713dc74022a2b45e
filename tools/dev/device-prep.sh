#!/usr/bin/env bash
# tools/dev/device-prep.sh - build what tools/bench/device-check.sh carries to a lent GPU machine
# SPDX-License-Identifier: Apache-2.0
#
#   tools/dev/device-prep.sh [--no-build] [--no-debs] [--dir DIR]
#
# Fills .device/ (ignored; the device tool's `carry` takes it) with what a
# bare GPU machine that reaches no package registry needs to run the
# device check (issue 33, docs/benchmarks.md "On a lent GPU machine"):
#
#   .device/bin/   the daemon, gpubench (CUDA), readbench, aubench and the
#                  test helpers gpuread and uring_read, built here (make)
#   .device/lib/   gpudirect/libstagefs.so
#   .device/deb/   the Debian packages of every shared library those need
#                  beyond glibc (librados2 and its own included), and fuse3
#                  for fusermount3, from apt's cache or `apt-get download`
#   .device/MANIFEST  what was built from which commit, and the sizes
#
# --no-build takes the binaries as they are; --no-debs carries no packages
# (the rehearsal test, tests/integration/device_rehearsal.sh, on a machine
# that has them installed and may reach no archive); --dir fills DIR in
# place of .device/.
#
# The CUDA runtime is linked statically (ldd shows no libcudart); the
# driver's libcuda is the machine's.  Refuses, saying why, when CUDA was not
# configured (gpubench missing) or .device/ comes to more than 60 MiB (the
# device tool carries 64 MiB with the working tree).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
D=$REPO/.device
LIMIT_KB=$((60 * 1024))
BUILD=1 DEBS=1
while [ $# -gt 0 ]; do
	case $1 in
	--no-build) BUILD=0 ;;
	--no-debs) DEBS=0 ;;
	--dir) D=$2; shift ;;
	*) echo "usage: device-prep.sh [--no-build] [--no-debs] [--dir DIR]" >&2; exit 2 ;;
	esac
	shift
done

die() { printf 'device-prep: %s\n' "$*" >&2; exit 1; }
cd "$REPO"

if [ "$BUILD" = 1 ]; then
	[ -f config.mk ] || ./configure >/dev/null
	grep -q '^HAVE_CUDA=y' config.mk ||
		die "configure found no CUDA (config.mk): run ./configure --with-cuda=/usr/local/cuda"
	make -s -j"$(nproc)" all test-progs >/dev/null
fi

BINS=(stagefs tools/bench/gpubench tools/bench/readbench tools/bench/aubench
	tests/helpers/gpuread tests/helpers/uring_read)
for b in "${BINS[@]}" gpudirect/libstagefs.so; do
	[ -x "$b" ] || die "$b is not built (make all test-progs; gpubench needs CUDA)"
done
ldd tools/bench/gpubench | grep -c libcudart >/dev/null &&
	die "gpubench links libcudart dynamically: carry it or link it statically"

rm -rf "$D"
mkdir -p "$D/bin" "$D/lib" "$D/deb"
cp -p "${BINS[@]}" "$D/bin/"
cp -p gpudirect/libstagefs.so "$D/lib/"
strip --strip-debug "$D"/bin/* "$D"/lib/*.so 2>/dev/null || true

# the packages behind every shared library the binaries load, glibc's and
# the compiler's own left out (every machine has them)
libs=$(for b in "$D"/bin/* "$D"/lib/*.so; do ldd "$b"; done | awk '/=> \// { print $3 }' | sort -u)
pkgs=$(for l in $libs; do
	r=$(readlink -f "$l")
	dpkg -S "$r" 2>/dev/null || dpkg -S "/usr$r" 2>/dev/null || dpkg -S "${r#/usr}" 2>/dev/null ||
		echo "?: $l" >&2
done | cut -d: -f1 | sort -u | grep -v -x -E 'libc6|libgcc-s1')
pkgs="$pkgs fuse3"
[ "$DEBS" = 1 ] || pkgs=
for p in $pkgs; do
	v=$(dpkg-query -W -f '${Version}' "$p") || die "$p is not installed here"
	f=$(ls /var/cache/apt/archives/"${p}_${v//:/%3a}"_*.deb 2>/dev/null | head -1 || true)
	if [ -n "$f" ]; then
		cp "$f" "$D/deb/"
	else
		# the installed version, else the candidate (a point release of
		# the same soname, when the installed one left the archive)
		(cd "$D/deb" && { apt-get download -q "$p=$v" || apt-get download -q "$p"; } >/dev/null 2>&1) ||
			die "apt-get download $p failed"
	fi
done

# the newest glibc symbol anything carried asks for: the machine's glibc
# must be at least that (device-check.sh prints the machine's)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$D"/deb/*.deb; do [ -e "$f" ] && dpkg -x "$f" "$tmp"; done
need=$(find "$D/bin" "$D/lib" "$tmp" -type f \( -name '*.so*' -o -perm -u+x \) -print0 |
	xargs -0 objdump -T 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -V -u | tail -1 || true)

kb=$(du -sk "$D" | cut -f1)
{
	echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with local changes)')"
	echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(gcc --version | head -1)"
	echo "cuda $(sed -n 's/^CUDA_CFLAGS=-I//p' config.mk | sed 's|/include$||') $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
	echo "needs glibc >= ${need#GLIBC_}"
	echo "debs $(cd "$D/deb" && ls | tr '\n' ' ')$([ "$DEBS" = 1 ] || echo '(none: --no-debs)')"
	echo "size ${kb} KiB"
} >"$D/MANIFEST"
cat "$D/MANIFEST"
du -sk "$D/bin" "$D/lib" "$D/deb" | awk '{ printf "  %6d KiB  %s\n", $1, $2 }'
if [ "$kb" -gt "$LIMIT_KB" ]; then
	die "$D is ${kb} KiB, over the 60 MiB this allows (the tool carries 64 MiB with the tree)"
fi
echo "device-prep: ready: carry [\"${D#"$REPO"/}\"] (${kb} KiB)"
