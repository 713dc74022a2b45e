# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by tests/integration/csi*.sh (after tests/lib.sh, in the mount
# namespace of their own they re-exec into): the CSI plugin beside a
# daemon's root, and kubelet's side of the calls.
#
# csi_need: skip without Python's grpc or the generated csi/csi_pb2.py.
# csi_start ROOT [ARG...]: start the plugin on $T/csi/csi.sock for the
#   daemon's root ROOT (ARGs: more plugin options); on exit it is stopped,
#   the pods' volumes under $PODS are unmounted, csi_cleanup_more runs if
#   the test defines it, then tests/lib.sh's cleanup.
# csi CALL ARG...: a CSI call over the socket (tests/csi_client.py).
# tgt UID: kubelet's volume path of pod UID, under $PODS.
# pod UID NS: the volume context kubelet gives pod UID of namespace NS
#   (podInfoOnMount); its name is p-<last character of UID>.

SOCK=$T/csi/csi.sock
PODS=$T/kubelet/pods
CSI_PID=

csi_need() {
	/usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null ||
		skip "python3-grpcio or python3-protobuf is not installed (./install-deps installs them)"
	[[ -f $REPO/csi/csi_pb2.py ]] ||
		skip "csi/csi_pb2.py is not built (./configure found no protoc: install protobuf-compiler)"
}

_csi_on_exit() {
	local rc=$?
	trap - ERR
	set +e
	[[ -z $CSI_PID ]] || { kill "$CSI_PID" 2>/dev/null; wait "$CSI_PID" 2>/dev/null; }
	# the pods' volumes, so that the daemon's mount can go
	awk -v p="$PODS/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo |
		while read -r m; do umount -l "$m" 2>/dev/null; done
	declare -F csi_cleanup_more >/dev/null && csi_cleanup_more
	(exit "$rc")
	_lib_on_exit
}

csi_start() {
	local root=$1
	shift
	trap _csi_on_exit EXIT
	/usr/bin/python3 "$REPO/csi/stagefs_csi.py" --endpoint "unix://$SOCK" --root "$root" "$@" \
		>"$T/csi.log" 2>&1 &
	CSI_PID=$!
	wait_for -t 20 test -S "$SOCK" || die "the plugin did not listen: $(cat "$T/csi.log")"
}

csi() { /usr/bin/python3 "$REPO/tests/csi_client.py" "$SOCK" "$@"; }
tgt() { echo "$PODS/$1/volumes/kubernetes.io~csi/data/mount"; }
pod() {
	echo "csi.storage.k8s.io/pod.name=p-${1: -1}" "csi.storage.k8s.io/pod.namespace=$2" \
		"csi.storage.k8s.io/pod.uid=$1" "csi.storage.k8s.io/ephemeral=true"
}
