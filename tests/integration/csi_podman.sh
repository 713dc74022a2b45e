#!/usr/bin/env bash
# Containers read datasets through published CSI volumes: podman (runc) runs unprivileged containers (uid 1000, no capabilities, no network, a busybox root file system from Debian's package) in pods' cgroups as kubelet lays them out; a pod of namespace vision reads its namespace-only dataset byte-exact and is counted as k8s:vision/POD, a pod of namespace ml reads another dataset and is counted under its own row; vision's cache is charged to the namespace and held to its [quota] rule, ml's to the container's uid; the ml pod given vision's directory anyway, and a host user, are refused by the daemon itself; stagefs top sums each namespace's jobs into a row.
# timeout: 180
# SPDX-License-Identifier: Apache-2.0
if [[ -z ${SFS_CSI_NS:-} ]]; then
	command -v unshare >/dev/null || { echo "SKIP: no unshare (util-linux)"; exit 77; }
	exec unshare -m --propagation private env SFS_CSI_NS=1 bash "$0" "$@"
fi
. "$(dirname "$0")/../lib.sh"
need_mount
need_users sfs_alice
for c in podman runc; do
	command -v $c >/dev/null || skip "no $c (./install-deps installs podman and runc)"
done
T=$TEST_TMPDIR
# shellcheck source=tests/lib_csi.sh
. "$REPO/tests/lib_csi.sh"
csi_need
CG=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
[[ -n $CG && -w $CG ]] || skip "no writable cgroup v2 hierarchy for the pods' cgroups"

# the containers' root file system: Debian's static busybox, unpacked
(cd "$T" && apt-get download busybox-static >"$T/apt.log" 2>&1) ||
	skip "cannot fetch the Debian package busybox-static: $(tail -1 "$T/apt.log")"
mkdir -p "$T/rootfs"
dpkg-deb -x "$T"/busybox-static_*.deb "$T/rootfs"
mkdir -p "$T/rootfs/"{data,proc,sys,dev,tmp,etc}
[[ -x $T/rootfs/bin/busybox ]] || die "busybox-static has no /bin/busybox"

ROOT=$T/datasets
rand_files $((200 * 1024)) 4 "$T/vision" "$T/imagenet"
chmod -R a+rX "$T/vision" "$T/imagenet"
CONF=$T/stagefs.conf
cat >"$CONF" <<EOC
[stagefs]
chunk_size = 1M
allow_other = yes

[dataset vision]
source = dir://$T/vision
allow = namespace:vision

[dataset imagenet]
source = dir://$T/imagenet

[quota]
namespace:vision = 400K
EOC
sfs_mount "" "$ROOT" -c "$CONF"

PARENT=kubepods/sfstest$$
# the pods' cgroups podman made in every hierarchy, deepest first
csi_cleanup_more() {
	find /sys/fs/cgroup -depth -type d -path "*/$PARENT*" -exec rmdir {} \; 2>/dev/null
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do rmdir "$d" 2>/dev/null; done
}
csi_start "$ROOT"
UA=00000000-0000-4000-8000-0000000000a1 UB=00000000-0000-4000-8000-0000000000b2
TA=$(tgt "$UA") TB=$(tgt "$UB")
mkdir -p "$(dirname "$TA")" "$(dirname "$TB")"
csi publish vol-a "$TA" dataset=vision csi.storage.k8s.io/pod.namespace=vision \
	csi.storage.k8s.io/pod.name=train-a csi.storage.k8s.io/pod.uid=$UA >/dev/null || die "publish for pod a"
csi publish vol-b "$TB" dataset=imagenet csi.storage.k8s.io/pod.namespace=ml \
	csi.storage.k8s.io/pod.name=train-b csi.storage.k8s.io/pod.uid=$UB >/dev/null || die "publish for pod b"

# run_pod UID VOLUME CMD...: an unprivileged container in pod UID's cgroup
# (POD_JOB: its STAGEFS_JOB)
run_pod() {
	local uid=$1 vol=$2
	shift 2
	podman --runtime runc --cgroup-manager cgroupfs run --rm --network none \
		${POD_JOB:+-e "STAGEFS_JOB=$POD_JOB"} \
		--cgroup-parent "/$PARENT/pod$uid" --user 1000:1000 --cap-drop all \
		--security-opt no-new-privileges --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
		-v "$vol:/data:ro" --rootfs "$T/rootfs" /bin/busybox "$@"
}
sums() { (cd "$1" && sha256sum f1 f2 f3 f4); }

out=$(run_pod "$UA" "$TA" sh -c 'cd /data && sha256sum f1 f2 f3 f4' 2>"$T/pa.err") ||
	die "pod a could not read its volume: $(cat "$T/pa.err")"
[[ $out == "$(sums "$T/vision")" ]] || die "pod a read wrong bytes: $out"
out=$(run_pod "$UB" "$TB" sh -c 'cd /data && sha256sum f1 f2 f3 f4' 2>"$T/pb.err") ||
	die "pod b could not read its volume: $(cat "$T/pb.err")"
[[ $out == "$(sums "$T/imagenet")" ]] || die "pod b read wrong bytes: $out"
stats_dump "$ROOT" | "$PYTHON" -c '
import json, sys
jobs = {j["job"]: j["read_bytes"] for j in json.load(sys.stdin)["jobs"]}
a, b = jobs.get("k8s:vision/train-a", 0), jobs.get("k8s:ml/train-b", 0)
want = 4 * 200 * 1024
assert want <= a < 2 * want and want <= b < 2 * want, "rows per pod: %s" % jobs
' || die "the pods' reads are not counted each under its own pod"
log "two pods: byte-exact, each counted under k8s:NAMESPACE/POD"
# vision's pod is charged to its namespace (a [quota] rule), held to 400K
# (two of its four files), whatever uid it runs as; ml's (no rule) to its
# uid, 1000
"$PYTHON" - "$(cat "$ROOT/.stagefs/quota")" <<'PY' || die "the namespace's quota: $(cat "$ROOT/.stagefs/quota")"
import sys
rows = {l.split("\t")[1]: l.split("\t") for l in sys.argv[1].splitlines() if not l.startswith("#")}
v = rows["namespace:vision"]
assert 200 * 1024 <= int(v[2]) <= 400 * 1024 and v[3] == str(400 * 1024), v
u = [r for r in rows.values() if r[0] == "1000"][0]
assert int(u[2]) == 4 * 200 * 1024, u
PY
# and reads on, byte-exact, past its quota (what does not fit is not cached)
out=$(run_pod "$UA" "$TA" sh -c 'cd /data && sha256sum f1 f2 f3 f4' 2>"$T/pa.err") ||
	die "pod a could not read its volume again: $(cat "$T/pa.err")"
[[ $out == "$(sums "$T/vision")" ]] || die "pod a read wrong bytes over its quota: $out"
log "namespace vision: charged as one tenant, held to its quota; namespace ml: to its uid"

# a pod names its own job (STAGEFS_JOB) inside its namespace only: ml's
# pod, running as the same uid, cannot pose as vision's
stats_dump "$ROOT" >"$T/stats0.json"
POD_JOB=resnet run_pod "$UA" "$TA" cat /data/f1 >/dev/null || die "pod a with STAGEFS_JOB"
POD_JOB=k8s:vision/train-a run_pod "$UB" "$TB" cat /data/f2 >/dev/null || die "pod b posing as vision"
stats_dump "$ROOT" | "$PYTHON" -c '
import json, sys
def jobs(d):
    return {j["job"]: j for j in d["jobs"]}
before, after = jobs(json.load(open(sys.argv[1]))), jobs(json.load(sys.stdin))
# opens: counted whether or not the page cache had the bytes
r = after.get("k8s:vision/resnet")
assert r and r["opens"] == 1 and r["namespace"] == "vision", "k8s:vision/resnet: %s" % r
assert after["k8s:vision/train-a"]["opens"] == before["k8s:vision/train-a"]["opens"], "vision row moved"
assert after["k8s:ml/train-b"]["opens"] == before["k8s:ml/train-b"]["opens"] + 1, "ml row"
assert after["k8s:ml/train-b"]["namespace"] == "ml"
' "$T/stats0.json" || die "jobs named by pods: $(stats_dump "$ROOT" | head -c 2000)"
log "a pod's STAGEFS_JOB stays in its namespace; posing as another's is not taken"

# stagefs top: a row per namespace, its jobs summed (vision: train-a and resnet)
"$STAGEFS" top --once --json "$ROOT" >"$T/top.json" || die "stagefs top --once --json failed"
"$PYTHON" - "$T/top.json" <<'PY' || die "top's namespace rows: $(cat "$T/top.json")"
import json, sys
d = json.load(open(sys.argv[1]))
ns = {n["namespace"]: n for n in d["namespaces"]}
assert set(ns) == {"vision", "ml"}, ns.keys()
for name in ns:
    rows = [j for j in d["jobs"] if j.get("namespace") == name]
    for k in ("read_bytes", "opens", "cache_hits", "cache_misses", "stall_ns", "active_ns"):
        assert ns[name][k] == sum(j[k] for j in rows), (name, k, ns[name][k], rows)
    assert ns[name]["jobs"] == len(rows), (name, ns[name]["jobs"], len(rows))
assert ns["vision"]["jobs"] == 2 and ns["vision"]["read_bytes"] > 0, ns["vision"]
h, m = ns["vision"]["cache_hits"], ns["vision"]["cache_misses"]
assert h + m and abs(ns["vision"]["hit_ratio"] - h / (h + m)) < 1e-3, ns["vision"]
PY
"$STAGEFS" top --once "$ROOT" >"$T/top.txt" || die "stagefs top --once failed"
grep -q "^ns:vision .*(2 jobs)" "$T/top.txt" || die "top's screen has no row for namespace vision: $(cat "$T/top.txt")"
log "stagefs top: a row per namespace, its jobs summed"

# the ml pod given vision's directory by other means: the daemon refuses
# its reads (namespace:vision names no process of namespace ml)
if out=$(run_pod "$UB" "$ROOT/vision" cat /data/f1 2>&1 >/dev/null); then
	die "a pod of namespace ml read the vision dataset"
fi
contains -e "Permission denied" -e "No such file" <<<"$out" || die "pod b reading vision: $out"
# and so is a host user
if as sfs_alice cat "$ROOT/vision/f1" >/dev/null 2>&1; then die "a host user read a namespace-only dataset"; fi
as sfs_alice cat "$ROOT/imagenet/f1" >/dev/null || die "a host user cannot read an open dataset"
log "a namespace the rules do not name is refused by the daemon, in a pod and on the host"
out=$(csi unpublish vol-a "$TA") || die "unpublish a: $out"
out=$(csi unpublish vol-b "$TB" 2>&1) || die "unpublish b: $out"
