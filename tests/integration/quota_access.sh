#!/usr/bin/env bash
# Two real users share a small cache: quotas hold within one chunk (reads and warmups), neither pushes out the other's in-quota data, a denied user gets ENOENT (reads and warmups: the dataset does not exist for it), SIGHUP reloads rules and refuses a bad file.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

need_users sfs_alice sfs_bob
getent group sfs_vision >/dev/null || groupadd sfs_vision
usermod -aG sfs_vision sfs_bob

T=$TEST_TMPDIR
rand_files $((1024 * 1024)) 10 "$T/open" "$T/secret"
CONF=$T/stagefs.conf
write_conf() {
	cat >"$CONF" <<EOC
[stagefs]
chunk_size = 1M
cache_size = 8M

[quota]
default = 3M
user:sfs_bob = 4M

[dataset open]
source = dir://$T/open

[dataset secret]
source = dir://$T/secret
allow = $1
EOC
}
write_conf "group:sfs_vision"
MNT=$T/mnt
sfs_mount "" "$MNT" -c "$CONF"

MiB=$((1024 * 1024))
usage() { # usage USER -> used bytes from `stagefs quota --json`
	"$STAGEFS" quota --json "$MNT" | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(u["used_bytes"] for u in d["users"] if u["user"] == sys.argv[1]))' "$1"
}

# --- access ---
[[ $(as sfs_alice ls "$MNT") == "open" ]] || die "alice should see only 'open', sees: $(as sfs_alice ls "$MNT")"
[[ $(as sfs_bob ls "$MNT" | tr '\n' ' ') == "open secret " ]] || die "bob should see both datasets"
err=$(as sfs_alice cat "$MNT/secret/f1" 2>&1 >/dev/null) && die "alice read a denied dataset"
[[ $err == *"Permission denied"* || $err == *"No such file"* ]] || die "unexpected error: $err"
err=$(as sfs_alice ls "$MNT/secret" 2>&1) && die "alice listed a denied dataset"
grep -q "access denied: uid $(id -u sfs_alice) may not read dataset secret" "$(sfs_log "$MNT")" ||
	die "the refusal was not logged"

# --- quotas: bob fills within his quota, then alice reads a lot ---
for i in 1 2 3 4; do as sfs_bob cat "$MNT/secret/f$i" | cmp - "$T/secret/f$i"; done
bob_before=$(usage sfs_bob)
assert_eq "$bob_before" $((4 * MiB)) "bob's usage after 4 chunks"
# both read concurrently: alice scans 10 files twice, bob re-reads his 4
(for r in 1 2; do for i in $(seq 1 10); do as sfs_alice cat "$MNT/open/f$i" | cmp - "$T/open/f$i"; done; done) &
a=$!
(for r in 1 2 3; do for i in 1 2 3 4; do as sfs_bob cat "$MNT/secret/f$i" | cmp - "$T/secret/f$i"; done; done) &
b=$!
wait $a || die "alice's reads failed"
wait $b || die "bob's reads failed"
alice=$(usage sfs_alice)
bob=$(usage sfs_bob)
log "usage: alice $alice, bob $bob"
[[ $alice -le $((3 * MiB + MiB)) ]] || die "alice holds $alice bytes, quota 3M (+1 chunk)"
[[ $alice -gt 0 ]] || die "alice cached nothing"
assert_eq "$bob" "$bob_before" "bob's in-quota chunks were pushed out by alice"
used=$(stat_get "$MNT" cache_used_bytes)
[[ $used -le $((8 * MiB + MiB)) ]] || die "cache holds $used bytes, cache_size 8M (+1 chunk)"
assert_eq "$(stat_get "$MNT" read_errors)" 0 "reader errors"
"$STAGEFS" quota "$MNT" | contains sfs_bob || die "stagefs quota table lacks bob"

# --- warmup is held to the same rules: alice's warmup of a dataset she is
# denied fails with ENOENT (it does not exist for her) and stages nothing; her warmup of 10 MiB against a
# 3M quota stays within it and pushes none of bob's in-quota chunks out
chunks_before=$(stat_get "$MNT" cache_chunks)
if as sfs_alice "$STAGEFS" warmup -q "$MNT/secret" >"$T/wdeny.out" 2>&1; then
	die "alice's warmup of a denied dataset succeeded: $(cat "$T/wdeny.out")"
fi
grep -qi 'no such file\|ENOENT' "$T/wdeny.out" || die "no ENOENT for the denied warmup: $(cat "$T/wdeny.out")"
assert_eq "$(stat_get "$MNT" cache_chunks)" "$chunks_before" "chunks staged by a denied warmup"
as sfs_alice "$STAGEFS" warmup --json "$MNT/open" >"$T/walice.json" 2>"$T/walice.err" || true
alice_w=$(usage sfs_alice)
log "alice's warmup of 10 MiB with a 3M quota: holds $alice_w bytes; $(tail -1 "$T/walice.err")"
[[ $alice_w -le $((3 * MiB + MiB)) ]] || die "alice's warmup holds $alice_w bytes, quota 3M (+1 chunk)"
assert_eq "$(usage sfs_bob)" "$bob_before" "bob's in-quota chunks were pushed out by alice's warmup"

# --- reload: a bad file is refused, the old rules stay ---
pid=$(sfs_pid "$MNT")
printf '[quota]\nthis line is bad\n' >>"$CONF"
kill -HUP "$pid"
wait_for grep -q "reload refused: $CONF:[0-9]*:" "$(sfs_log "$MNT")"
as sfs_alice cat "$MNT/secret/f1" >/dev/null 2>&1 && die "bad reload changed the rules"
# a good file granting alice takes effect without a remount
write_conf "group:sfs_vision, user:sfs_alice"
kill -HUP "$pid"
wait_for grep -q "reloaded $CONF" "$(sfs_log "$MNT")"
as sfs_alice cat "$MNT/secret/f5" | cmp - "$T/secret/f5" || die "alice still denied after reload"
sfs_umount "$MNT"
echo "ok: access rules, quotas (alice $alice, bob $bob bytes) and reload"
