#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""csi_client.py: kubelet's side of the CSI calls, for tests/integration/csi.sh.

    csi_client.py SOCKET info | caps | probe | nodeinfo | nodecaps
    csi_client.py SOCKET publish VOLUME_ID TARGET [--ro] [--block] [KEY=VALUE...]
    csi_client.py SOCKET unpublish VOLUME_ID TARGET
    csi_client.py SOCKET stage VOLUME_ID TARGET

Makes the call over the plugin's unix socket with the message classes the
plugin uses (csi/csi_pb2.py, from the spec's csi.proto) and prints "OK" and
the reply's fields, or "ERR CODE: message" (the gRPC status) and exits 1.
KEY=VALUE pairs become the volume context, as kubelet fills it (the
volumeAttributes, and with podInfoOnMount csi.storage.k8s.io/pod.*).
"""
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "csi"))
import csi_pb2 as pb  # noqa: E402


def call(ch, service, name, req):
    resp = getattr(pb, name + "Response")
    fn = ch.unary_unary("/csi.v1.%s/%s" % (service, name),
                        request_serializer=type(req).SerializeToString,
                        response_deserializer=resp.FromString)
    return fn(req, timeout=30)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    sock, cmd, rest = argv[1], argv[2], argv[3:]
    ch = grpc.insecure_channel("unix://" + sock)
    try:
        if cmd == "info":
            r = call(ch, "Identity", "GetPluginInfo", pb.GetPluginInfoRequest())
        elif cmd == "caps":
            r = call(ch, "Identity", "GetPluginCapabilities", pb.GetPluginCapabilitiesRequest())
        elif cmd == "probe":
            r = call(ch, "Identity", "Probe", pb.ProbeRequest())
        elif cmd == "nodeinfo":
            r = call(ch, "Node", "NodeGetInfo", pb.NodeGetInfoRequest())
        elif cmd == "nodecaps":
            r = call(ch, "Node", "NodeGetCapabilities", pb.NodeGetCapabilitiesRequest())
        elif cmd in ("publish", "stage"):
            vid, target = rest[0], rest[1]
            ctx = {}
            cap = pb.VolumeCapability(
                access_mode=pb.VolumeCapability.AccessMode(
                    mode=pb.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY))
            ro = False
            for a in rest[2:]:
                if a == "--ro":
                    ro = True
                elif a == "--block":
                    cap.block.SetInParent()
                else:
                    k, _, v = a.partition("=")
                    ctx[k] = v
            if not cap.HasField("block"):
                cap.mount.SetInParent()
            if cmd == "stage":
                r = call(ch, "Node", "NodeStageVolume", pb.NodeStageVolumeRequest(
                    volume_id=vid, staging_target_path=target, volume_capability=cap))
            else:
                r = call(ch, "Node", "NodePublishVolume", pb.NodePublishVolumeRequest(
                    volume_id=vid, target_path=target, volume_capability=cap, readonly=ro,
                    volume_context=ctx))
        elif cmd == "unpublish":
            r = call(ch, "Node", "NodeUnpublishVolume",
                     pb.NodeUnpublishVolumeRequest(volume_id=rest[0], target_path=rest[1]))
        else:
            print("unknown command %s" % cmd, file=sys.stderr)
            return 2
    except grpc.RpcError as e:
        print("ERR %s: %s" % (e.code().name, e.details()))
        return 1
    print("OK " + str(r).replace("\n", " ").strip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
