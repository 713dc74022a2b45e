#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""fleet_sim.py: how peer groups behave for a whole fleet (docs/fleet.md).

    tools/bench/fleet_sim.py [--nodes 1000] [--dataset-gb 150] [--group 8,16,32,64,1000]
                       [--rack 32] [--nic-gbs 12.5] [--peer-gbs G] [--ceph-gbs 40]
                       [--oversub 3] [--chunk-mb 4] [--sim-chunks 384]

Three parts, each printed as a table:

1. The fluid model, per group size g: the bytes Ceph serves (N/g copies of
   the dataset), and the time for every node to hold the whole dataset with
   sharded warmup, the largest of
     Ceph:   each group pulls the dataset once through its share of Ceph's
             bandwidth, g/N of it:         N*D / (g * ceph)
     node:   each node takes in D (D/g from Ceph, the rest from peers) and
             sends D*(g-1)/g:              D / min(nic, peer)
     spine:  in a group wider than a rack, the share (g-r)/g of the peer
             bytes crosses the spine, whose per-node bandwidth is nic/oversub.
   Groups are independent but for Ceph, shared fairly.

2. A small discrete simulation of one group (fluid flows, equal shares at
   each node's uplink and downlink and of the group's Ceph share, 16
   chunks in flight a node, owners fetching a chunk once and serving it as
   it arrives), scaled down to --sim-chunks chunks, to check the model's
   time and show what it leaves out: an epoch where every node reads in the
   same order, so that every node asks the same owner at once, against
   shuffled orders and sharded warmup.

3. Membership churn with the daemon's own rendezvous hash (XXH3-64 of the
   chunk id seeded with the hash of "a.b.c.d:port", src/peer/peer.c): the share
   of chunks that move when one member of a group leaves or joins.

--peer-gbs is the transport's rate a node can serve and take (default: the
NIC's); feed it the figure tools/bench.sh peers measured here to see what
the implementation, not the wire, allows.  The defaults are assumptions,
stated in docs/fleet.md, not measurements.
"""
import argparse
import random
import struct

try:
    import xxhash
except ImportError:  # part 3 needs it (Debian: python3-xxhash)
    xxhash = None


def fluid(a, g):
    n, d = a.nodes, a.dataset_gb
    g = min(g, n)
    groups = n / g
    node = min(a.nic_gbs, a.peer_gbs)
    t_ceph = n * d / (g * a.ceph_gbs)
    t_node = d / node
    cross = max(0.0, (g - a.rack) / g)
    t_spine = d * cross / (a.nic_gbs / a.oversub) if cross else 0.0
    t = max(t_ceph, t_node, t_spine)
    limit = {t_ceph: "Ceph", t_node: "node", t_spine: "spine"}[t]
    return groups * d, t, limit, t_ceph, t_node, t_spine


def sim_group(g, chunks, nic, ceph_share, order, inflight=16, dt_chunks=0.25):
    """Seconds (in chunk-transfer units at rate 1) until every node has every
    chunk.  nic, ceph_share: chunks per unit time.  order: 'sharded',
    'shuffled' or 'same'."""
    rnd = random.Random(7)
    owner = [rnd.randrange(g) for _ in range(chunks)]
    has = [set() for _ in range(g)]
    ceph_done = set()
    ceph_flows = {}  # chunk -> remaining
    queue = []
    for i in range(g):
        if order == "sharded":
            mine = [c for c in range(chunks) if c % g == i]
            rest = [c for c in range(chunks) if c % g != i]
            rnd.shuffle(mine)
            rnd.shuffle(rest)
            queue.append(mine + rest)
        elif order == "shuffled":
            q = list(range(chunks))
            rnd.shuffle(q)
            queue.append(q)
        else:
            queue.append(list(range(chunks)))
    pos = [0] * g
    flows = []  # [src(-1 ceph)|owner, dst, chunk, remaining, waiting_for_ceph]
    active = [0] * g
    t = 0.0
    dt = dt_chunks
    while True:
        # start requests
        for i in range(g):
            while active[i] < inflight and pos[i] < chunks:
                c = queue[i][pos[i]]
                pos[i] += 1
                if c in has[i]:
                    continue
                o = owner[c]
                active[i] += 1
                if c not in ceph_done and c not in ceph_flows:
                    ceph_flows[c] = 1.0  # the owner reads it from Ceph once
                # its own chunk needs no transfer once the owner (itself) has it
                flows.append([o, i, c, 0.0 if o == i else 1.0, True])
        if not flows and not ceph_flows and all(p >= chunks for p in pos):
            break
        # rates: equal shares
        up = [0] * g
        down = [0] * g
        for f in flows:
            if not f[4] and f[0] != f[1]:
                up[f[0]] += 1
                down[f[1]] += 1
        nceph = len(ceph_flows)
        # Ceph reads land at the owner: they use its downlink too
        for c in ceph_flows:
            down[owner[c]] += 1
        for c in list(ceph_flows):
            r = min(ceph_share / nceph, nic / down[owner[c]])
            ceph_flows[c] -= r * dt
            if ceph_flows[c] <= 0:
                del ceph_flows[c]
                ceph_done.add(c)
                has[owner[c]].add(c)
        done = []
        for f in flows:
            if f[4]:
                if f[2] in ceph_done:
                    f[4] = False
                    if f[0] == f[1]:
                        done.append(f)
                continue
            if f[0] == f[1]:
                done.append(f)
                continue
            r = min(nic / up[f[0]], nic / down[f[1]])
            f[3] -= r * dt
            if f[3] <= 0:
                done.append(f)
        for f in done:
            flows.remove(f)
            has[f[1]].add(f[2])
            active[f[1]] -= 1
        t += dt
    return t


def owner_of(addrs, seeds, cid):
    key = struct.pack("<QQ", cid >> 64, cid & (2**64 - 1))
    best, bs = None, -1
    for a, s in zip(addrs, seeds):
        v = xxhash.xxh3_64_intdigest(key, seed=s)
        if v > bs:
            best, bs = a, v
    return best


def churn(g, nchunks=20000):
    addrs = ["10.0.%d.%d:7480" % (i // 250, i % 250 + 1) for i in range(g + 1)]
    seeds = [xxhash.xxh3_64_intdigest(a.encode()) for a in addrs]
    rnd = random.Random(3)
    ids = [rnd.getrandbits(128) for _ in range(nchunks)]
    base = [owner_of(addrs[:g], seeds[:g], c) for c in ids]
    left = [owner_of(addrs[1:g], seeds[1:g], c) for c in ids]
    joined = [owner_of(addrs, seeds, c) for c in ids]
    moved_left = sum(b != l for b, l in zip(base, left)) / nchunks
    moved_join = sum(b != j for b, j in zip(base, joined)) / nchunks
    # a move is only ever to or from the member that changed
    assert all(b == l or b == addrs[0] for b, l in zip(base, left))
    assert all(b == j or j == addrs[g] for b, j in zip(base, joined))
    return moved_left, moved_join


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--dataset-gb", type=float, default=150)
    p.add_argument("--group", default="8,16,32,64,1000")
    p.add_argument("--rack", type=int, default=32)
    p.add_argument("--nic-gbs", type=float, default=12.5, help="GB/s per node (100 GbE)")
    p.add_argument("--peer-gbs", type=float, default=None, help="transport GB/s per node (default: the NIC)")
    p.add_argument("--ceph-gbs", type=float, default=40, help="Ceph's aggregate read GB/s")
    p.add_argument("--oversub", type=float, default=3, help="spine oversubscription")
    p.add_argument("--chunk-mb", type=float, default=4)
    p.add_argument("--sim-chunks", type=int, default=384)
    a = p.parse_args()
    if a.peer_gbs is None:
        a.peer_gbs = a.nic_gbs
    groups = [int(x) for x in a.group.split(",")]

    print("1. fluid model: %d nodes x %d GPUs, %.0f GB dataset, Ceph %.0f GB/s, "
          "node %.1f GB/s (transport %.1f), racks of %d, spine 1:%.0f"
          % (a.nodes, a.gpus, a.dataset_gb, a.ceph_gbs, a.nic_gbs, a.peer_gbs, a.rack, a.oversub))
    print("   %-8s %12s %10s %8s %10s %10s %10s" % ("group", "Ceph GB", "warm s", "limit", "Ceph s", "node s", "spine s"))
    ind = None
    for g in [1] + groups:
        cb, t, lim, tc, tn, ts = fluid(a, g)
        if g == 1:
            ind = t
        print("   %-8s %12.0f %10.1f %8s %10.1f %10.1f %10.1f"
              % ("none" if g == 1 else g, cb, t, lim, tc, tn, ts))
    print("   (none: every node reads the dataset from Ceph, %.0fx its size)" % a.nodes)

    print("\n2. one group simulated, %d chunks, 16 in flight a node; time in units of one"
          " chunk over one NIC" % a.sim_chunks)
    print("   %-6s %-14s %-10s %10s %10s %8s" % ("group", "Ceph share", "order", "simulated", "model", "ratio"))
    for g in [x for x in groups if x <= 32]:
        # the group's Ceph share in chunks per unit: ceph / (nodes/g) / nic;
        # then a Ceph fast enough not to limit, to show the nodes' own limits
        for label, share in (("fleet's", a.ceph_gbs * g / a.nodes / a.nic_gbs),
                             ("unlimited", float(g))):
            model = max(a.sim_chunks / share, a.sim_chunks)
            for order in ("sharded", "shuffled", "same"):
                t = sim_group(g, a.sim_chunks, 1.0, share, order)
                print("   %-6d %-14s %-10s %10.0f %10.0f %8.2f" % (g, label, order, t, model, t / model))

    if xxhash is None:
        print("\n3. churn: skipped (python3-xxhash missing)")
        return
    print("\n3. membership churn, the daemon's rendezvous hash, 20,000 chunks")
    print("   %-6s %14s %14s %10s" % ("group", "one leaves", "one joins", "1/g"))
    for g in [x for x in groups if x <= 256]:
        l, j = churn(g)
        print("   %-6d %13.1f%% %13.1f%% %9.1f%%" % (g, 100 * l, 100 * j, 100 / g))


if __name__ == "__main__":
    main()
