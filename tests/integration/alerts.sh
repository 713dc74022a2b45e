#!/usr/bin/env bash
# The shipped Prometheus alert rules (conf/stagefs-alerts.yml): promtool check rules passes, promtool test rules fires each alert (high stall, backend errors, corrupt chunks, cache near full, peer down) for the right node and only there, a loosened threshold fails the tests, and every metric the rules name is one a real mount exports (with a peer group: stagefs_peer_up for the other member, not for itself).
# timeout: 60
# SPDX-License-Identifier: Apache-2.0
# shellcheck source=tests/lib.sh
. "$(dirname "$0")/../lib.sh"
command -v promtool >/dev/null || skip "no promtool (Debian package prometheus, an optional dependency)"

T=$TEST_TMPDIR
rules=$REPO/conf/stagefs-alerts.yml
cases=$REPO/tests/alerts/stagefs-alerts_test.yml

promtool check rules "$rules" || die "promtool check rules failed"
promtool test rules "$cases" || die "promtool test rules failed"

# the tests can fail: the same cases against rules whose stall threshold
# is 0.3 (gpu01's 25 % no longer fires) must not pass
mkdir -p "$T/conf" "$T/tests/alerts"
sed 's/^          > 0\.2$/          > 0.3/' "$rules" >"$T/conf/stagefs-alerts.yml"
! cmp -s "$rules" "$T/conf/stagefs-alerts.yml" || die "could not loosen the stall threshold in the copy"
cp "$cases" "$T/tests/alerts/"
if promtool test rules "$T/tests/alerts/stagefs-alerts_test.yml" >"$T/loose.log" 2>&1; then
	cat "$T/loose.log" >&2
	die "promtool test rules passed with a loosened stall threshold"
fi
grep -q StagefsHighStall "$T/loose.log" || { cat "$T/loose.log" >&2; die "the loosened rules failed, but not on StagefsHighStall"; }
log "a loosened threshold fails the tests, as it should"

# The metric names the rules use are the daemon's own.
if [[ $(id -u) -ne 0 || ! -c /dev/fuse || ! -x $STAGEFS ]]; then
	log "not root, no /dev/fuse or no $STAGEFS: metric names not checked against a mount"
	exit 0
fi
src=$T/src mnt=$T/mnt
mkdir -p "$src"
head -c 2000000 /dev/urandom >"$src/f"
# a peer group, so that the per-member metrics (stagefs_peer_up) are there
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])')
(umask 077 && "$PYTHON" -c "import secrets; print(secrets.token_hex(32))" >"$T/peer.key")
sfs_mount "dir://$src" "$mnt" chunk_size=1M "peer_listen=127.0.0.2:$port" \
	"peer_key_file=$T/peer.key" "peers=127.0.0.3:$port"
cmp "$src/f" "$mnt/f" || die "wrong bytes through the mount"
timeout 10 cat "$mnt/.stagefs/metrics" >"$T/metrics" || die "cannot read .stagefs/metrics"
promtool check metrics <"$T/metrics" >"$T/lint" 2>&1 || { cat "$T/lint" >&2; die "promtool check metrics failed"; }
n=0
for m in $(grep -o 'stagefs_[a-z_]*' "$rules" | grep -v '^stagefs_hints$' | sort -u); do
	grep -q "^${m}[ {]" "$T/metrics" || die "the rules use $m, which the daemon does not export"
	n=$((n + 1))
done
((n >= 6)) || die "only $n metric names found in the rules"
# the other member, not this node; up until a request to it fails
grep -qx "stagefs_peer_up{peer=\"127.0.0.3:$port\"} 1" "$T/metrics" ||
	die "no stagefs_peer_up 1 for the other member: $(grep stagefs_peer_up "$T/metrics")"
! grep -q "stagefs_peer_up{peer=\"127.0.0.2:$port\"}" "$T/metrics" || die "stagefs_peer_up names this node itself"
log "$n metric names of the rules are exported by the daemon"
sfs_umount "$mnt"
