#!/usr/bin/env bash
# Epoch staging and quotas: a dataset larger than the user's quota is not staged (auto), one forced on stops when the quota is full, and another user's cached chunks stay through both, every byte read compared.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount

A=sfs_ten_a B=sfs_ten_b
need_users $A $B

T=$TEST_TMPDIR
chmod 755 "$T" "$(dirname "$T")"
# big and bigon: 200 files of 40 KiB (7.8 MiB) each; kept: 40 files (1.6 MiB)
"$PYTHON" - "$T" <<'EOF'
import os, random, sys
r = random.Random(19)
for name, n in (("big", 200), ("bigon", 200), ("kept", 40)):
    d = os.path.join(sys.argv[1], name)
    os.makedirs(d)
    for i in range(n):
        with open(os.path.join(d, "s%03d.bin" % i), "wb") as f:
            f.write(r.randbytes(40 * 1024))
EOF
chmod -R a+rX "$T/big" "$T/bigon" "$T/kept"
CONF=$T/stagefs.conf
cat >"$CONF" <<EOC
[stagefs]
chunk_size = 64K
epoch_staging_files = 32
epoch_staging_idle = 3s

[quota]
default = 6M

[dataset big]
source = dir://$T/big

[dataset bigon]
source = dir://$T/bigon
epoch_staging = on

[dataset kept]
source = dir://$T/kept
EOC
MNT=$T/mnt
sfs_mount "" "$MNT" -c "$CONF"
READER=$REPO/tools/bench/epoch_reader.py
usage() { # usage USER -> used bytes from `stagefs quota --json`
	"$STAGEFS" quota --json "$MNT" | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
print(sum(u["used_bytes"] for u in d["users"] if u["user"] == sys.argv[1]))' "$1"
}
# epoch USER DATASET: one shuffled epoch, every byte compared
epoch() {
	as "$1" "$PYTHON" "$READER" "$MNT/$2" --workers 2 --compute 0.005 --verify "$T/$2" \
		>"$T/epoch.json" 2>&1 || die "$1's epoch of $2 failed: $(cat "$T/epoch.json")"
	cat "$T/epoch.json" >&2
}

log "$B caches the small dataset (it fits: staged, complete)"
epoch $B kept
used_b=$(usage $B)
assert_eq "$used_b" $((40 * 40 * 1024)) "$B's usage"
staged=$(stat_get "$MNT" stage_fetches)

log "$A reads a dataset larger than its quota: not staged"
epoch $A big
assert_eq "$(stat_get "$MNT" epoch_stagings_declined)" 1 "stagings declined"
assert_eq "$(stat_get "$MNT" stage_fetches)" "$staged" "chunks staged for big"
grep -q "epoch staging: dataset big, uid $(id -u $A): read as an epoch, not staged: .* more than the user's share" \
	"$(sfs_log "$MNT")" || die "no log line for the declined dataset"
assert_eq "$(usage $B)" "$used_b" "$B's usage after $A's epoch of big"
[[ $(usage $A) -le $((6 * 1024 * 1024)) ]] || die "$A holds $(usage $A) bytes, over its quota"

log "$A reads a dataset with epoch_staging = on: staged until the quota is full"
started=$(stat_get "$MNT" epoch_stagings_started)
epoch $A bigon
assert_eq "$(stat_get "$MNT" epoch_stagings_started)" $((started + 1)) "stagings started for bigon"
assert_gt "$(stat_get "$MNT" stage_fetches)" "$staged" "chunks staged for bigon"
stopped() { grep -q "epoch staging: dataset bigon, uid $(id -u $A): stopped: no room" "$(sfs_log "$MNT")"; }
wait_for stopped || die "the staging of bigon did not stop for lack of room: $(grep 'epoch staging' "$(sfs_log "$MNT")")"
assert_eq "$(stat_get "$MNT" epoch_stagings_active)" 0 "stagings running"
assert_eq "$(usage $B)" "$used_b" "$B's usage after $A's staging"
[[ $(usage $A) -le $((6 * 1024 * 1024)) ]] || die "$A holds $(usage $A) bytes, over its quota"

log "$B's chunks are still served from the cache"
misses=$(stat_get "$MNT" cache_misses)
epoch $B kept
assert_eq "$(stat_get "$MNT" cache_misses)" "$misses" "misses when $B read its dataset again"
sfs_umount "$MNT"
echo "ok: too large for the quota: not staged; forced on: staged up to the quota; $B's data stayed"
