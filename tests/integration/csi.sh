#!/usr/bin/env bash
# The CSI node plugin driven as kubelet drives it, over its socket, in a mount namespace of its own: identity and probe; a pod-inline volume published (read-only, byte-exact) twice and unpublished twice; a static PersistentVolume named by its attributes and by its handle alone; pod information whose uid is not the target path's pod (written by the pod's author, podInfoOnMount off) not believed; warmup=wait caches every chunk before the publish returns, charged to the pod's namespace (refused for one without a quota); a reader in the pod's cgroup counted under k8s:NAMESPACE/POD; a namespace the dataset's rules allow, one they do not (PERMISSION_DENIED, nothing mounted) and one not known; a missing dataset (NOT_FOUND), a block volume, a bad name; publish after the daemon's restart replaces the stale mount; unpublish of a stale FUSE mount with the daemon dead; NodeStageVolume is UNIMPLEMENTED.
# timeout: 120
# SPDX-License-Identifier: Apache-2.0
# A mount namespace of our own: the binds, the daemon's root and the pods'
# "volumes" vanish with it, whatever happens.
if [[ -z ${SFS_CSI_NS:-} ]]; then
	command -v unshare >/dev/null || { echo "SKIP: no unshare (util-linux)"; exit 77; }
	exec unshare -m --propagation private env SFS_CSI_NS=1 bash "$0" "$@"
fi
. "$(dirname "$0")/../lib.sh"
need_mount
T=$TEST_TMPDIR
# shellcheck source=tests/lib_csi.sh
. "$REPO/tests/lib_csi.sh"
csi_need

ROOT=$T/datasets
rand_files $((300 * 1024)) 6 "$T/imagenet" "$T/vision" "$T/coco"
CONF=$T/stagefs.conf
cat >"$CONF" <<EOC
[stagefs]
chunk_size = 1M

[dataset imagenet]
source = dir://$T/imagenet

[dataset coco]
source = dir://$T/coco

[dataset vision]
source = dir://$T/vision
allow = namespace:vision, user:root

[quota]
namespace:ml = 1G
EOC
sfs_mount "" "$ROOT" -c "$CONF"

csi_start "$ROOT" --node-id node-a
is_mnt() { mountpoint -q "$1"; }
# kill_daemon PATH: SIGKILL the root's daemon, wait until PATH (through a
# pod's bind) no longer answers
kill_daemon() {
	kill -KILL "$(sfs_pid "$ROOT")"
	unset "SFS_PID[$(_canon "$ROOT")]"
	wait_for -t 10 bash -c "! stat '$1' >/dev/null 2>&1" || die "the bind did not go stale"
}

contains stagefs.io <<<"$(csi info)" || die "GetPluginInfo: $(csi info)"
contains 'value: true' <<<"$(csi probe)" || die "Probe with the daemon up: $(csi probe)"
contains node-a <<<"$(csi nodeinfo)" || die "NodeGetInfo: $(csi nodeinfo)"

# --- a pod-inline volume, published twice (kubelet retries), unpublished twice
A=$(tgt 00000000-0000-4000-8000-00000000000a)
mkdir -p "$(dirname "$A")"
# shellcheck disable=SC2046
out=$(csi publish vol-a "$A" dataset=imagenet $(pod 00000000-0000-4000-8000-00000000000a ml)) || die "publish: $out"
is_mnt "$A" || die "the volume is not mounted at $A"
diff -r "$T/imagenet" "$A" >/dev/null || die "the pod's volume differs from the dataset"
if touch "$A/x" 2>/dev/null; then die "the pod's volume is writable"; fi
# shellcheck disable=SC2046
out=$(csi publish vol-a "$A" dataset=imagenet $(pod 00000000-0000-4000-8000-00000000000a ml)) || die "publish again: $out"
assert_eq "$(grep -c " $A " /proc/self/mountinfo)" 1 "mounts at the target after two publishes"
out=$(csi unpublish vol-a "$A") || die "unpublish: $out"
is_mnt "$A" && die "still mounted after unpublish"
[[ -e $A ]] && die "unpublish left the target directory"
out=$(csi unpublish vol-a "$A") || die "unpublish again: $out"
log "inline volume: published read-only and byte-exact, twice; unpublished twice"

# --- a static PersistentVolume (deploy/kubernetes/examples/pv-static.yaml):
# kubelet names it by the PV's volumeHandle, passes its volumeAttributes and
# readOnly, and says the volume is not ephemeral; a PV with no attributes
# names the dataset by its handle alone
S="$PODS/00000000-0000-4000-8000-000000000005/volumes/kubernetes.io~csi/stagefs-imagenet/mount"
mkdir -p "$(dirname "$S")"
pv_ctx() { pod "$1" "$2" | sed 's/ephemeral=true/ephemeral=false/'; }
# shellcheck disable=SC2046
out=$(csi publish pv-imagenet "$S" --ro dataset=imagenet $(pv_ctx 00000000-0000-4000-8000-000000000005 vision)) ||
	die "publish of a static volume: $out"
diff -r "$T/imagenet" "$S" >/dev/null || die "the static volume differs from dataset imagenet"
csi unpublish pv-imagenet "$S" >/dev/null || die "unpublish of the static volume"
# shellcheck disable=SC2046
out=$(csi publish imagenet "$S" --ro $(pv_ctx 00000000-0000-4000-8000-000000000005 vision)) ||
	die "publish of a static volume named by its handle: $out"
diff -r "$T/imagenet" "$S" >/dev/null || die "the volume named by its handle is not dataset imagenet"
S6="$PODS/00000000-0000-4000-8000-000000000006/volumes/kubernetes.io~csi/stagefs-vision/mount"
mkdir -p "$(dirname "$S6")"
# shellcheck disable=SC2046
out=$(csi publish vision "$S6" --ro $(pv_ctx 00000000-0000-4000-8000-000000000006 ml)) &&
	die "a static volume gave namespace ml dataset vision: $out"
contains PERMISSION_DENIED <<<"$out" || die "a static volume of a denied dataset: $out"
csi unpublish imagenet "$S" >/dev/null || die "unpublish of the static volume named by its handle"
is_mnt "$S" && die "the static volume is still mounted after unpublish"
is_mnt "$S6" && die "the denied static volume was mounted"
log "static volume: named by its attributes, then by its handle alone; read-only and byte-exact; denied by the dataset's rules as an inline one is"

# --- pod information the pod's author wrote: without podInfoOnMount kubelet
# passes an inline volume's attributes as they are, so a pod of namespace ml
# could name itself vision there; it cannot know its own uid beforehand, so
# pod information whose uid is not the target's pod is not believed
F=$(tgt 00000000-0000-4000-8000-000000000007)
mkdir -p "$(dirname "$F")"
# shellcheck disable=SC2046
out=$(csi publish vol-f "$F" dataset=vision $(pod 00000000-0000-4000-8000-00000000000b vision)) &&
	die "forged pod information gave dataset vision: $out"
contains PERMISSION_DENIED <<<"$out" || die "forged pod information: $out"
is_mnt "$F" && die "forged pod information: the volume was mounted"
grep -q "not believed" "$T/csi.log" || die "the plugin did not log the forged pod information"
# shellcheck disable=SC2046
out=$(csi publish vol-f "$F" dataset=vision $(pod 00000000-0000-4000-8000-000000000007 vision)) ||
	die "the same pod with kubelet's own pod information: $out"
csi unpublish vol-f "$F" >/dev/null || die "unpublish vol-f"
log "pod information whose uid is not the target's pod: not believed (namespace vision refused), kubelet's: believed"

# --- warmup=wait: the dataset is in the cache before the pod's containers start
W=$(tgt 00000000-0000-4000-8000-0000000000aa)
r0=$(stat_get "$ROOT" backend_reads)
root0=$(awk -F'\t' '$1 == "0" { print $3 }' "$ROOT/.stagefs/quota")
# shellcheck disable=SC2046
out=$(csi publish vol-w "$W" dataset=coco warmup=wait $(pod 00000000-0000-4000-8000-0000000000aa ml)) ||
	die "publish with warmup: $out"
r1=$(stat_get "$ROOT" backend_reads)
assert_gt "$r1" "$r0" "backend reads of the warmup"
drop_caches
diff -r "$T/coco" "$W" >/dev/null || die "the warmed volume differs"
assert_eq "$(stat_get "$ROOT" backend_reads)" "$r1" "backend reads after a warmup=wait publish"
contains "warmup of coco for ml/p-a: DONE" "$T/csi.log" || die "the warmup was not logged: $(tail -3 "$T/csi.log")"
# charged to namespace ml (a [quota] rule): its own line, holding the bytes
"$PYTHON" - "$(cat "$ROOT/.stagefs/quota")" "${root0:-0}" <<'PY' || die "the warmup is not charged to namespace ml: $(cat "$ROOT/.stagefs/quota")"
import sys
rows = {l.split("\t")[1]: l.split("\t") for l in sys.argv[1].splitlines() if not l.startswith("#")}
ml = rows["namespace:ml"]
assert int(ml[2]) == 6 * 300 * 1024 and ml[3] == str(1 << 30), ml
assert int(rows.get("root", ["", "", "0"])[2]) == int(sys.argv[2]), rows
PY
csi unpublish vol-w "$W" >/dev/null
# a namespace without a quota: its warmup would be charged to no one, refused
W2=$(tgt 00000000-0000-4000-8000-0000000000ab)
r1=$(stat_get "$ROOT" backend_reads)
# shellcheck disable=SC2046
out=$(csi publish vol-w2 "$W2" dataset=imagenet warmup=wait $(pod 00000000-0000-4000-8000-0000000000ab nlp)) ||
	die "publish with a refused warmup: $out"
contains "warmup of imagenet for nlp/p-b: ERR" "$T/csi.log" || die "the refused warmup was not logged: $(tail -3 "$T/csi.log")"
contains "no cache quota" "$T/csi.log" || die "no reason for the refused warmup: $(tail -3 "$T/csi.log")"
assert_eq "$(stat_get "$ROOT" backend_reads)" "$r1" "backend reads of a refused warmup"
csi unpublish vol-w2 "$W2" >/dev/null
log "warmup=wait: every chunk cached before the publish returned, charged to the pod's namespace; refused for a namespace without a quota"

# --- namespaces the rules allow and do not
VUID=00000000-0000-4000-8000-00000000000b
V=$(tgt $VUID)
# shellcheck disable=SC2046
out=$(csi publish vol-v "$V" dataset=vision $(pod 00000000-0000-4000-8000-00000000000b vision)) || die "vision's own dataset: $out"
cmp "$V/f1" "$T/vision/f1" || die "vision/f1 through the volume"
# a reader in that pod's cgroup (kubelet's systemd layout) is counted under
# the pod's namespace and name, which the plugin told the daemon
CG=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
if [[ -n $CG && -w $CG ]]; then
	PODCG=$CG/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${VUID//-/_}.slice/cri-containerd-sfs$$.scope
	mkdir -p "$PODCG"
	bash -c 'echo $$ >"$1/cgroup.procs" && exec cat "$2/f2" "$2/f3"' _ "$PODCG" "$V" >/dev/null ||
		die "a reader in the pod's cgroup failed"
	for d in "$PODCG" "${PODCG%/*}" "${PODCG%/*/*}" "${PODCG%/*/*/*}"; do rmdir "$d" 2>/dev/null || true; done
	stats_dump "$ROOT" | "$PYTHON" -c '
import json, sys
jobs = {j["job"]: j for j in json.load(sys.stdin)["jobs"]}
j = jobs.get("k8s:vision/p-b")
assert j and j["read_bytes"] >= 2 * 300 * 1024, "no job k8s:vision/p-b with its bytes: %s" % sorted(jobs)
' || die "the pod's reads are not counted under its name"
	log "a reader in the pod's cgroup is counted as k8s:vision/p-b"
else
	log "no writable cgroup v2 hierarchy: the pod's job label is not checked"
fi
csi unpublish vol-v "$V" >/dev/null
D=$(tgt 00000000-0000-4000-8000-00000000000d)
# shellcheck disable=SC2046
out=$(csi publish vol-d "$D" dataset=vision $(pod 00000000-0000-4000-8000-00000000000d ml)) && die "namespace ml was given vision: $out"
contains "PERMISSION_DENIED" <<<"$out" || die "a denied namespace: $out"
contains "namespace 'ml' may not read dataset 'vision'" <<<"$out" || die "no reason given: $out"
is_mnt "$D" && die "a denied volume was mounted"
out=$(csi publish vol-d "$D" dataset=vision) && die "a pod of no known namespace was given vision: $out"
contains "PERMISSION_DENIED" <<<"$out" || die "an unknown namespace: $out"
contains "podInfoOnMount" <<<"$out" || die "no hint at podInfoOnMount: $out"
# shellcheck disable=SC2046
out=$(csi publish vol-n "$D" dataset=nosuch $(pod 00000000-0000-4000-8000-00000000000d ml)) && die "a missing dataset was published"
contains "NOT_FOUND" <<<"$out" || die "a missing dataset: $out"
# shellcheck disable=SC2046
out=$(csi publish vol-n "$D" dataset=../etc $(pod 00000000-0000-4000-8000-00000000000d ml)) && die "a bad name was published"
contains "INVALID_ARGUMENT" <<<"$out" || die "a bad name: $out"
out=$(csi publish vol-b "$D" dataset=imagenet --block) && die "a block volume was published"
contains "INVALID_ARGUMENT" <<<"$out" || die "a block volume: $out"
out=$(csi stage vol-s "$T/stage") && die "NodeStageVolume succeeded"
contains "UNIMPLEMENTED" <<<"$out" || die "NodeStageVolume: $out"
log "namespaces: allowed, denied with a reason, unknown denied; bad requests refused"

# --- the daemon crashed and a new one mounted the root (a new FUSE
# connection): the old bind is stale, publishing again replaces it
B=$(tgt 00000000-0000-4000-8000-00000000000e)
# shellcheck disable=SC2046
csi publish vol-b "$B" dataset=imagenet $(pod 00000000-0000-4000-8000-00000000000e ml) >/dev/null || die "publish before the restart"
kill_daemon "$B/f1"
fusermount3 -u -z "$ROOT" 2>/dev/null || umount -l "$ROOT"
sfs_mount "" "$ROOT" -c "$CONF"
# shellcheck disable=SC2046
out=$(csi publish vol-b "$B" dataset=imagenet $(pod 00000000-0000-4000-8000-00000000000e ml)) || die "publish after a restart: $out"
cmp "$B/f2" "$T/imagenet/f2" || die "the volume after the daemon's restart"
assert_eq "$(grep -c " $B " /proc/self/mountinfo)" 1 "mounts at the target after the republish"
log "daemon crashed and remounted: publishing again replaced the stale bind"

# --- the daemon dead (SIGKILL: its FUSE mount and the pod's bind go stale):
# unpublish still works, without touching the dead mount
C=$(tgt 00000000-0000-4000-8000-00000000000c)
# shellcheck disable=SC2046
csi publish vol-c "$C" dataset=imagenet $(pod 00000000-0000-4000-8000-00000000000c ml) >/dev/null || die "publish before the kill"
kill_daemon "$C/f1"
out=$(csi probe) || die "Probe with the daemon dead failed: $out"
contains 'value: true' <<<"$out" && die "Probe says ready with the daemon dead: $out"
out=$(timeout 20 /usr/bin/python3 "$REPO/tests/csi_client.py" "$SOCK" unpublish vol-c "$C") ||
	die "unpublish of a stale mount: $out"
is_mnt "$C" && die "the stale mount is still there"
out=$(timeout 20 /usr/bin/python3 "$REPO/tests/csi_client.py" "$SOCK" unpublish vol-b "$B") ||
	die "unpublish of the other stale mount: $out"
is_mnt "$B" && die "the other stale mount is still there"
# shellcheck disable=SC2046
out=$(csi publish vol-e "$(tgt 00000000-0000-4000-8000-00000000000f)" dataset=imagenet $(pod 00000000-0000-4000-8000-00000000000f ml)) && die "published with the daemon dead"
contains "UNAVAILABLE" <<<"$out" || die "publish with the daemon dead: $out"
fusermount3 -u -z "$ROOT" 2>/dev/null || umount -l "$ROOT"
log "daemon dead: stale volumes unpublished, publish UNAVAILABLE"
