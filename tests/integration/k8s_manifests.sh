#!/usr/bin/env bash
# deploy/kubernetes renders with kubectl kustomize, every field of it and of its examples is one Kubernetes' object models have, of their type (tests/k8s_schema.py; a misspelt field and an unquoted number fail), and it holds together: the CSIDriver as the plugin needs it (podInfoOnMount, no attach, inline and persistent), the DaemonSet's three containers agree on the plugin socket, the registration path and the datasets root, the mounts kubelet and the pods need propagate, every mount has its volume, the ConfigMap's stagefs.conf passes `stagefs --check` (and a bad one does not); the example pod uses no hostPath and no privilege.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
need_stagefs
command -v kubectl >/dev/null || skip "no kubectl (./install-deps installs kubernetes-client)"
/usr/bin/python3 -c 'import yaml' 2>/dev/null || skip "no python3-yaml"
/usr/bin/python3 -c 'import kubernetes.client' 2>/dev/null ||
	skip "no python3-kubernetes (./install-deps installs it): the manifests' fields cannot be checked"
T=$TEST_TMPDIR
D=$REPO/deploy/kubernetes

# kubectl --dry-run=client needs an API server's discovery; kustomize does not
kubectl kustomize "$D" >"$T/all.yaml" 2>"$T/kustomize.err" || die "kubectl kustomize: $(cat "$T/kustomize.err")"
# every field against Kubernetes' own object models, which the API server's
# are generated from as well (a misspelt field, a number for a string)
out=$(/usr/bin/python3 "$REPO/tests/k8s_schema.py" "$T/all.yaml" "$D"/examples/*.yaml 2>&1) ||
	die "the manifests against Kubernetes' models: $out"
sed 's/mountPropagation:/mountPropogation:/' "$T/all.yaml" >"$T/typo.yaml"
sed 's/version: "\([0-9]*\)"/version: \1/' "$D/examples/pod-inline.yaml" >"$T/unquoted.yaml"
# schema_fails NAME WHAT: the check fails on $T/NAME.yaml and says WHAT
schema_fails() {
	local out
	if out=$(/usr/bin/python3 "$REPO/tests/k8s_schema.py" "$T/$1.yaml" 2>&1); then
		die "a manifest with a fault ($1) passed the check"
	fi
	contains "$2" <<<"$out" || die "the check on $1 did not say '$2': $out"
}
schema_fails typo "mountPropogation: V1VolumeMount has no such field"
schema_fails unquoted "volumeAttributes.version: str expected"
/usr/bin/python3 - "$T/all.yaml" "$D/examples" "$T/stagefs.conf" <<'EOF' || die "the manifests do not hold together"
import os, sys, yaml

docs = list(yaml.safe_load_all(open(sys.argv[1])))
by = {}
for d in docs:
    assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), d
    by.setdefault(d["kind"], []).append(d)
want = {"Namespace", "ServiceAccount", "ConfigMap", "CSIDriver", "DaemonSet"}
assert set(by) == want, "kinds %s, want %s" % (sorted(by), sorted(want))
for k, ds in by.items():
    if k not in ("Namespace", "CSIDriver"):
        assert all(d["metadata"].get("namespace") == "stagefs-system" for d in ds), k

drv = by["CSIDriver"][0]
assert drv["metadata"]["name"] == "stagefs.io"
s = drv["spec"]
assert s["podInfoOnMount"] is True, "podInfoOnMount: the namespace decides access"
assert s["attachRequired"] is False
assert {"Persistent", "Ephemeral"} <= set(s["volumeLifecycleModes"])

pod = by["DaemonSet"][0]["spec"]["template"]["spec"]
vols = {v["name"]: v for v in pod["volumes"]}
cs = {c["name"]: c for c in pod["containers"]}
assert set(cs) == {"stagefs", "csi-plugin", "node-driver-registrar"}, sorted(cs)
for c in cs.values():
    for m in c.get("volumeMounts", []):
        assert m["name"] in vols, "%s mounts %s, which is no volume" % (c["name"], m["name"])
def mount(c, name):
    return next(m for m in cs[c]["volumeMounts"] if m["name"] == name)
def arg(c, flag):
    args = cs[c].get("args", []) + cs[c].get("command", [])
    return next(a.split("=", 1)[1] for a in args if a.startswith(flag + "="))

# the datasets root: where the daemon mounts, where the plugin binds from
root = cs["stagefs"]["command"][-1]
assert mount("stagefs", "datasets")["mountPath"] == root
assert mount("stagefs", "datasets").get("mountPropagation") == "Bidirectional", \
    "the daemon's FUSE mount must reach the host"
assert arg("csi-plugin", "--root") == root
assert mount("csi-plugin", "datasets")["mountPath"] == root
assert mount("csi-plugin", "datasets").get("mountPropagation") in ("HostToContainer", "Bidirectional")
assert vols["datasets"]["hostPath"]["path"] == root
# the pods' volumes: the plugin's binds go back to kubelet
pm = mount("csi-plugin", "pods-dir")
assert pm["mountPath"] == "/var/lib/kubelet/pods" and pm.get("mountPropagation") == "Bidirectional"
assert vols["pods-dir"]["hostPath"]["path"] == "/var/lib/kubelet/pods"
# the socket: the plugin's endpoint, the registrar's address, kubelet's path
ep = arg("csi-plugin", "--endpoint")
assert ep.startswith("unix://")
sock = ep[len("unix://"):]
assert os.path.dirname(sock) == mount("csi-plugin", "plugin-dir")["mountPath"]
assert arg("node-driver-registrar", "--csi-address") == sock
assert mount("node-driver-registrar", "plugin-dir")["mountPath"] == os.path.dirname(sock)
reg = arg("node-driver-registrar", "--kubelet-registration-path")
assert reg == os.path.join(vols["plugin-dir"]["hostPath"]["path"], os.path.basename(sock)), reg
assert vols["plugin-dir"]["hostPath"]["path"] == "/var/lib/kubelet/plugins/" + drv["metadata"]["name"]
assert mount("node-driver-registrar", "registration-dir")["mountPath"] == "/registration"
assert vols["registration-dir"]["hostPath"]["path"] == "/var/lib/kubelet/plugins_registry"
# the daemon's config from the ConfigMap, its /dev/fuse, its cache on the node
cm = by["ConfigMap"][0]
assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"]
assert "-c" in cs["stagefs"]["command"]
conf = cs["stagefs"]["command"][cs["stagefs"]["command"].index("-c") + 1]
assert os.path.dirname(conf) == mount("stagefs", "config")["mountPath"]
assert os.path.basename(conf) in cm["data"]
open(sys.argv[3], "w").write(cm["data"][os.path.basename(conf)])
assert vols["dev-fuse"]["hostPath"]["path"] == "/dev/fuse"
assert "hostPath" in vols["cache"], "the cache is the node's disk, kept across restarts"
assert cs["stagefs"]["securityContext"].get("privileged") and cs["csi-plugin"]["securityContext"].get("privileged")
assert pod["serviceAccountName"] == by["ServiceAccount"][0]["metadata"]["name"]
assert pod.get("hostPID") is True, "without the host's pids the daemon sees readers in pods as pid 0"

# the examples: what a tenant writes; no hostPath, no privilege
datasets = [l.split()[1].rstrip("]") for l in cm["data"]["stagefs.conf"].splitlines()
            if l.startswith("[dataset ")]
ex = {}
for f in sorted(os.listdir(sys.argv[2])):
    for d in yaml.safe_load_all(open(os.path.join(sys.argv[2], f))):
        ex.setdefault(d["kind"], []).append(d)
p = ex["Pod"][0]["spec"]
for v in p["volumes"]:
    assert "hostPath" not in v
    if "csi" in v:
        assert v["csi"]["driver"] == "stagefs.io" and v["csi"]["readOnly"] is True
        assert v["csi"]["volumeAttributes"]["dataset"] in datasets
for c in p["containers"]:
    sc = c.get("securityContext", {})
    assert not sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False
pv = ex["PersistentVolume"][0]["spec"]
assert pv["csi"]["driver"] == "stagefs.io" and pv["accessModes"] == ["ReadOnlyMany"]
assert pv["csi"]["volumeAttributes"]["dataset"] in datasets
pvc = ex["PersistentVolumeClaim"][0]
assert pvc["spec"]["volumeName"] == ex["PersistentVolume"][0]["metadata"]["name"]
print("ok: %d objects, %d examples" % (len(docs), sum(len(v) for v in ex.values())))
EOF
out=$("$STAGEFS" -c "$T/stagefs.conf" --check) || die "the ConfigMap's stagefs.conf: $out"
contains "ok: 2 datasets" <<<"$out" || die "stagefs --check: $out"
sed 's/namespace:vision/namespace:Vision/' "$T/stagefs.conf" >"$T/bad.conf"
if out=$("$STAGEFS" -c "$T/bad.conf" --check 2>&1); then die "a bad config passed --check: $out"; fi
contains "bad.conf:[0-9]*: 'namespace:Vision'" <<<"$out" || die "--check on a bad config: $out"
log "deploy/kubernetes: renders, holds together, its stagefs.conf checks"
