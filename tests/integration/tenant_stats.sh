#!/usr/bin/env bash
# Who sees what: two real users read; each sees in .stagefs/stats, .stagefs/metrics, the metrics port, stagefs quota and stagefs top only their own rows, the node totals and the sources they may read; root (and metrics_group on the port) sees all; also in no-open mode and with both users reading the files at once.
# timeout: 300
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_mount
command -v runuser >/dev/null || skip "runuser is not installed"
command -v curl >/dev/null || skip "curl is not installed"

A=sfs_alice B=sfs_bob S=sfs_scrape
need_users $A $B
# the scraper: a member of metrics_group
getent group sfs_scrapers >/dev/null || groupadd sfs_scrapers
id "$S" >/dev/null 2>&1 || useradd -M -N -g sfs_scrapers -s /usr/sbin/nologin "$S" || id "$S" >/dev/null
usermod -aG sfs_scrapers "$S"
UA=$(id -u $A) UB=$(id -u $B)

T=$TEST_TMPDIR
chmod 755 "$T" "$(dirname "$T")"
mkdir -p "$T/secret" "$T/open" "$T/bin"
for i in 1 2 3; do
	head -c $((300000 + i)) /dev/urandom >"$T/secret/f$i"
	head -c $((200000 + i)) /dev/urandom >"$T/open/g$i"
done
chmod -R a+rX "$T/secret" "$T/open"
# readers with names of their own: the process rows show them (comm)
cp "$(command -v cat)" "$T/bin/alicecat"
cp "$(command -v cat)" "$T/bin/bobcat"
chmod 755 "$T/bin" "$T/bin/"*

# check_view FILE VIEWER OTHER OTHER_UID OTHER_JOB OTHER_COMM HIDDEN_SOURCE:
# FILE (stats JSON, metrics text, quota text or top JSON) shows nothing of
# OTHER (name, uid, job, reader, pid) nor the source HIDDEN_SOURCE
# ("" for none), and shows node totals (stats, metrics, top)
check_view() {
	local f=$1 viewer=$2 other=$3 ouid=$4 ojob=$5 ocomm=$6 hidden=$7 w
	for w in "$other" "$ojob" "$ocomm" "\"uid\": $ouid," "user=\"$other\""; do
		! grep -qF -- "$w" "$f" || die "$viewer's $(basename "$f") shows $w: $(cat "$f")"
	done
	if [[ -n $hidden ]]; then
		! grep -qF -- "$hidden" "$f" || die "$viewer's $(basename "$f") shows the source $hidden"
	fi
	for p in "${OTHER_PIDS[@]}"; do
		! grep -qE "\"pid\": $p[,}]" "$f" || die "$viewer's $(basename "$f") shows $other's pid $p"
	done
}

# rows FILE KIND -> the "user" of each row of KIND in stats/top JSON FILE
rows() {
	"$PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join(sorted(set(r["user"] for r in d[sys.argv[2]]))))' "$1" "$2"
}

# --- a multi-dataset mount: alice may read "secret" (the first dataset), bob may not ---
CONF=$T/stagefs.conf
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$CONF" <<EOC
[stagefs]
chunk_size = 1M
metrics_port = $port
metrics_group = sfs_scrapers

[dataset secret]
source = dir://$T/secret
allow = user:$A

[dataset open]
source = dir://$T/open
EOC
MNT=$T/mnt
sfs_mount "" "$MNT" -c "$CONF"

as $A env STAGEFS_JOB=alicejob "$T/bin/alicecat" "$MNT"/secret/f* >/dev/null
as $B env STAGEFS_JOB=bobjob "$T/bin/bobcat" "$MNT"/open/g* >/dev/null
want_total=$(( (300000 * 3 + 6) + (200000 * 3 + 6) ))

# root: every row, both sources' first
stats_dump "$MNT" >"$T/root.json"
assert_ge "$(stat_get "$MNT" read_bytes)" "$want_total" "node read_bytes (root)"
[[ $(rows "$T/root.json" users) == "$A $B" ]] || die "root sees users: $(rows "$T/root.json" users)"
for w in alicejob bobjob alicecat bobcat "dir://$T/secret"; do
	grep -qF "$w" "$T/root.json" || die "root's stats lack $w"
done
mapfile -t A_PIDS < <("$PYTHON" -c 'import json, sys
for p in json.load(open(sys.argv[1]))["processes"]:
    if p["user"] == sys.argv[2]: print(p["pid"])' "$T/root.json" $A)
mapfile -t B_PIDS < <("$PYTHON" -c 'import json, sys
for p in json.load(open(sys.argv[1]))["processes"]:
    if p["user"] == sys.argv[2]: print(p["pid"])' "$T/root.json" $B)
((${#A_PIDS[@]} && ${#B_PIDS[@]})) || die "root sees no process rows of both users"
"$STAGEFS" top --once --json "$MNT" >"$T/root.top" || die "stagefs top as root"
[[ $(rows "$T/root.top" users) == "$A $B" ]] || die "root's top shows users: $(rows "$T/root.top" users)"
timeout 10 cat "$MNT/.stagefs/metrics" >"$T/root.prom"
grep -q "user=\"$A\",job=\"alicejob\"" "$T/root.prom" && grep -q "user=\"$B\",job=\"bobjob\"" "$T/root.prom" ||
	die "root's metrics lack a job row"
"$STAGEFS" quota "$MNT" >"$T/root.quota"
grep -q "$A" "$T/root.quota" && grep -q "$B" "$T/root.quota" || die "root's quota lacks a user: $(cat "$T/root.quota")"

# view_of USER OTHER OTHER_UID OTHER_JOB OTHER_COMM HIDDEN: USER's four views
view_of() {
	local u=$1 other=$2 ouid=$3 ojob=$4 ocomm=$5 hidden=$6 own
	as "$u" timeout 10 cat "$MNT/.stagefs/stats" >"$T/$u.json" || die "$u cannot read .stagefs/stats"
	as "$u" timeout 10 cat "$MNT/.stagefs/metrics" >"$T/$u.prom" || die "$u cannot read .stagefs/metrics"
	as "$u" "$STAGEFS" quota "$MNT" >"$T/$u.quota" || die "stagefs quota as $u"
	as "$u" "$STAGEFS" quota --json "$MNT" >"$T/$u.quota.json" || die "stagefs quota --json as $u"
	as "$u" "$STAGEFS" top --once --json "$MNT" >"$T/$u.top" || die "stagefs top as $u"
	as "$u" "$STAGEFS" top --once "$MNT" >"$T/$u.screen" || die "stagefs top --once as $u"
	for f in "$T/$u".{json,prom,quota,quota.json,top,screen}; do
		check_view "$f" "$u" "$other" "$ouid" "$ojob" "$ocomm" "$hidden"
	done
	for kind in users jobs processes; do
		own=$(rows "$T/$u.json" $kind)
		[[ $own == "$u" ]] || die "$u's stats: $kind rows of '$own', want only $u"
		own=$(rows "$T/$u.top" $kind)
		[[ $own == "$u" ]] || die "$u's top: $kind rows of '$own', want only $u"
	done
	# the node totals stay everyone's: the same as root's (no data is read
	# meanwhile), at least both users' bytes (a page the kernel dropped
	# under memory pressure and read again counts twice)
	root_total=$(stat_get "$MNT" read_bytes)
	"$PYTHON" -c 'import json, sys
for f in sys.argv[1:3]:
    n = json.load(open(f))["node"]["read_bytes"]
    assert n == int(sys.argv[3]) and n >= int(sys.argv[4]), (f, n, sys.argv[3:])' \
		"$T/$u.json" "$T/$u.top" "$root_total" "$want_total" ||
		die "$u's node totals are not the node's"
	grep -q '^stagefs_fetched_bytes_total [0-9]' "$T/$u.prom" || die "$u's metrics lack the node totals"
	grep -q '^stagefs_cache_used_bytes ' "$T/$u.prom" || die "$u's metrics lack the cache gauges"
	grep -q "user=\"$u\"," "$T/$u.prom" || die "$u's metrics lack $u's own job row"
	grep -q "$u" "$T/$u.quota" || die "$u's quota lacks $u's own line: $(cat "$T/$u.quota")"
}
OTHER_PIDS=("${A_PIDS[@]}")
view_of $B $A "$UA" alicejob alicecat "dir://$T/secret"
grep -q '"source": "",' "$T/$B.json" || die "bob's stats show a source: $(grep '"source"' "$T/$B.json")"
OTHER_PIDS=("${B_PIDS[@]}")
view_of $A $B "$UB" bobjob bobcat ""
grep -qF "\"source\": \"dir://$T/secret\"," "$T/$A.json" || die "alice's stats lack the source she may read"
log "multi-dataset mount: each user sees only their rows, root all"

# the metrics port: everything to root and to metrics_group, to anyone
# else what they read in .stagefs/metrics
scrape() { as "$1" curl -sS "http://127.0.0.1:$port/metrics" >"$T/$1.http" || die "$1 cannot scrape"; }
curl -sS -o "$T/root.http" "http://127.0.0.1:$port/metrics" || die "root cannot scrape"
scrape $S
for who in root $S; do
	for w in "user=\"$A\",job=\"alicejob\"" "user=\"$B\",job=\"bobjob\""; do
		grep -qF "$w" "$T/$who.http" || die "$who's scrape lacks $w"
	done
done
scrape $B
OTHER_PIDS=("${A_PIDS[@]}")
check_view "$T/$B.http" "$B" $A "$UA" alicejob alicecat "dir://$T/secret"
grep -qF "user=\"$B\",job=\"bobjob\"" "$T/$B.http" || die "$B's scrape lacks his own job"
grep -q '^stagefs_fetched_bytes_total [0-9]' "$T/$B.http" || die "$B's scrape lacks the node totals"
log "metrics port: root and metrics_group see all, another user their own rows"

# both at once: every rendering each reads is their own
race() { # race MNT USER OTHER N
	local i
	for i in $(seq 1 "$4"); do
		as "$2" cat "$1/.stagefs/stats" "$1/.stagefs/metrics" "$1/.stagefs/quota" >"$T/race.$2" ||
			{ echo "$2: read failed"; return 1; }
		if grep -qF "$3" "$T/race.$2"; then
			echo "$2 saw $3 (pass $i)"
			return 1
		fi
	done
}
race "$MNT" $A $B 30 & ra=$!
race "$MNT" $B $A 30 & rb=$!
wait $ra || die "concurrent reads: alice saw another's rendering"
wait $rb || die "concurrent reads: bob saw another's rendering"
log "concurrent readers: each saw only their own renderings"

# --- no-open mode: a single dataset, renderings kept per inode ---
sfs_umount "$MNT"
SRC=$T/open
NMNT=$T/nmnt
sfs_mount "dir://$SRC" "$NMNT" chunk_size=1M passthrough=off no_open=on
assert_eq "$(stat_get "$NMNT" no_open)" 1 "no_open"
MNT=$NMNT
as $A env STAGEFS_JOB=alicejob "$T/bin/alicecat" "$NMNT"/g1 >/dev/null
as $B env STAGEFS_JOB=bobjob "$T/bin/bobcat" "$NMNT"/g2 "$NMNT"/g3 >/dev/null
want_total=$(( (200000 + 1) + (200000 * 2 + 5) ))
# alice and bob read the files one after the other, each right after the other's lookup
for i in 1 2 3; do
	as $A cat "$NMNT/.stagefs/stats" >/dev/null
	as $B cat "$NMNT/.stagefs/stats" | contains -F "$A" && die "no-open: bob read alice's rendering"
	as $A cat "$NMNT/.stagefs/stats" | contains -F "$B" && die "no-open: alice read bob's rendering"
done
stats_dump "$NMNT" >"$T/root.json"
[[ $(rows "$T/root.json" users) == "$A $B" ]] || die "no-open: root sees users: $(rows "$T/root.json" users)"
mapfile -t A_PIDS < <("$PYTHON" -c 'import json, sys
for p in json.load(open(sys.argv[1]))["processes"]:
    if p["user"] == sys.argv[2]: print(p["pid"])' "$T/root.json" $A)
OTHER_PIDS=("${A_PIDS[@]}")
view_of $B $A "$UA" alicejob alicecat ""
OTHER_PIDS=()
view_of $A $B "$UB" bobjob bobcat ""
race "$NMNT" $A $B 30 & ra=$!
race "$NMNT" $B $A 30 & rb=$!
wait $ra || die "no-open, concurrent reads: alice saw another's rendering"
wait $rb || die "no-open, concurrent reads: bob saw another's rendering"
stats_dump "$NMNT" >"$T/root.json"
[[ $(rows "$T/root.json" users) == "$A $B" ]] || die "no-open: root's view after the users' reads: $(rows "$T/root.json" users)"
log "no-open mode: each user sees only their rows, root all, also reading at once"
