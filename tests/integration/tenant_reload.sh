#!/usr/bin/env bash
# Reloads never widen access (empty file, directory, a dropped [dataset] section: root only), a denied user cannot stat a dataset it may not read (ENOENT, even after an allowed user's lookup), and a quota lowered by SIGHUP evicts the excess at once, oldest first.
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

need_users sfs_alice sfs_bob

T=$TEST_TMPDIR
rand_files $((1024 * 1024)) 7 "$T/open" "$T/secret"
CONF=$T/stagefs.conf
# write_conf BOB_QUOTA [no-secret]
write_conf() {
	cat >"$CONF" <<EOC
[stagefs]
chunk_size = 1M
cache_size = 64M
xattrs = yes

[quota]
default = none
user:sfs_bob = $1

[dataset open]
source = dir://$T/open
EOC
	[[ ${2:-} == no-secret ]] || cat >>"$CONF" <<EOC

[dataset secret]
source = dir://$T/secret
allow = user:sfs_bob
EOC
}
write_conf 8M
MNT=$T/mnt
sfs_mount "" "$MNT" -c "$CONF"
LOG=$(sfs_log "$MNT")
pid=$(sfs_pid "$MNT")

MiB=$((1024 * 1024))
usage() { # usage USER -> used bytes from `stagefs quota --json`
	"$STAGEFS" quota --json "$MNT" | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(u["used_bytes"] for u in d["users"] if u["user"] == sys.argv[1]))' "$1"
}
# hup PATTERN: send SIGHUP and wait for one more log line matching PATTERN
hup() {
	local n
	n=$(grep -c -- "$1" "$LOG" || true)
	kill -HUP "$pid"
	wait_for _more "$1" "$n" || die "no new '$1' in the log after SIGHUP"
}
_more() { [[ $(grep -c -- "$1" "$LOG" || true) -gt $2 ]]; }
# denied USER: USER can neither stat, list nor read secret, and gets ENOENT
denied() {
	local err
	err=$(as "$1" stat "$MNT/secret" 2>&1) && die "$1 could stat secret: $err"
	[[ $err == *"No such file"* ]] || die "$1: stat secret: expected ENOENT, got: $err"
	err=$(as "$1" stat "$MNT/secret/f1" 2>&1) && die "$1 could stat secret/f1"
	as "$1" ls "$MNT/secret" >/dev/null 2>&1 && die "$1 listed secret"
	as "$1" cat "$MNT/secret/f2" >/dev/null 2>&1 && die "$1 read secret/f2"
	[[ $(as "$1" ls "$MNT") != *secret* ]] || die "$1 sees secret in the root listing"
	return 0
}

# --- a denied user cannot stat a dataset it may not read ----------------------
denied sfs_alice
# after an allowed user's lookup, and root's, the kernel's caches give alice nothing
as sfs_bob stat "$MNT/secret" >/dev/null
as sfs_bob cat "$MNT/secret/f1" | cmp - "$T/secret/f1"
log "$(stats_dump "$MNT")"
stat "$MNT/secret" >/dev/null
denied sfs_alice
as sfs_bob stat "$MNT/secret" >/dev/null || die "bob cannot stat secret after alice's attempts"
as sfs_bob ls "$MNT/secret" >/dev/null || die "bob cannot list secret"
as sfs_alice cat "$MNT/open/f1" | cmp - "$T/open/f1"

# --- reloads that would drop every rule are refused; the old rules stay --------
cp "$CONF" "$T/good.conf"
: >"$CONF"
hup "reload refused: $CONF: "
printf '; nothing\n\n# at all\n   \n' >"$CONF"
hup "reload refused: $CONF: "
rm "$CONF"
mkdir "$CONF"
hup "reload refused: $CONF: "
rmdir "$CONF"
grep -q "reloaded $CONF" "$LOG" && die "a reload was accepted: $(grep "reloaded" "$LOG")"
log "refusals: $(grep 'reload refused' "$LOG" | sed 's/.*reload refused: //' | tr '\n' '|')"
denied sfs_alice
cp "$T/good.conf" "$CONF"

# --- a dataset whose section is dropped is root's only -------------------------
write_conf 8M no-secret
hup "reloaded $CONF"
grep -q "dataset secret is mounted but no longer configured" "$LOG" ||
	die "the dropped dataset was not logged"
denied sfs_alice
denied sfs_bob
cmp "$MNT/secret/f7" "$T/secret/f7" || die "root cannot read the unconfigured dataset"
[[ $(ls "$MNT" | tr '\n' ' ') == "open secret " ]] || die "root does not see secret"
as sfs_alice cat "$MNT/open/f2" | cmp - "$T/open/f2"
# configured again: its rules are back
write_conf 8M
hup "reloaded $CONF"
as sfs_bob cat "$MNT/secret/f2" | cmp - "$T/secret/f2" || die "bob still denied after the section came back"
denied sfs_alice

# --- a lowered quota evicts the excess at reload, oldest first -----------------
for i in 1 2 3 4 5 6; do
	as sfs_bob cat "$MNT/secret/f$i" | cmp - "$T/secret/f$i"
done
as sfs_bob cat "$MNT/secret/f6" >/dev/null	# most recent
assert_eq "$(usage sfs_bob)" $((6 * MiB)) "bob's usage before the reload"
write_conf 2M
hup "reloaded $CONF"
bob=$(usage sfs_bob)
log "bob's usage after lowering his quota to 2M: $bob; $(grep 'evicted' "$LOG" | tail -1)"
[[ $bob -le $((2 * MiB)) ]] || die "bob holds $bob bytes after his quota was lowered to 2M"
assert_gt "$bob" 0 "bob's usage (his most recent chunks stay)"
cached() { "$PYTHON" -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.stagefs.cached").decode())' "$1"; }
states=$(for i in 1 2 3 4 5 6; do printf '%s ' "$(cached "$MNT/secret/f$i")"; done)
log "secret/f1..f6 cached: $states"
[[ $states == "0/1 0/1 0/1 0/1 1/1 1/1 " ]] || die "not bob's 4 least recently used chunks evicted: $states"
sfs_umount "$MNT"
echo "ok: reload refusals, dropped section root-only, hidden stat, quota eviction at reload"
