#!/usr/bin/env bash
# tools/dev/ceph-cluster.sh - throwaway single-node Ceph cluster (1 mon, 1 mgr,
# SPDX-License-Identifier: Apache-2.0
# 1 bluestore OSD on a sparse file) living entirely inside one directory, on
# 127.0.0.1 only, for the stagefs tests and the demo.  See docs/ceph-cluster.md.
#
#   tools/dev/ceph-cluster.sh start DIR      start; prints DIR/ceph.conf (abs) on stdout
#   tools/dev/ceph-cluster.sh stop DIR       stop OSD, mgr, mon; remove DIR (idempotent)
#   tools/dev/ceph-cluster.sh stop-osd DIR   stop only the OSD, wait until it is gone
#   tools/dev/ceph-cluster.sh start-osd DIR  start the OSD again, wait until it serves
#   tools/dev/ceph-cluster.sh status DIR     `ceph -s`; non-zero if not running
#   tools/dev/ceph-cluster.sh env DIR        prints: export CEPH_CONF=DIR/ceph.conf
#   tools/dev/ceph-cluster.sh start --with-fs DIR   start, then `fs`
#   tools/dev/ceph-cluster.sh fs DIR         add an MDS and a CephFS "cephfs" (idempotent)
#   tools/dev/ceph-cluster.sh mount-fs DIR MNT     mount the CephFS on MNT with ceph-fuse
#   tools/dev/ceph-cluster.sh umount-fs DIR MNT    unmount it, wait for ceph-fuse to exit
#   tools/dev/ceph-cluster.sh rm-fs DIR      unmount, remove the CephFS and its pools, stop the MDS
#   tools/dev/ceph-cluster.sh rgw DIR        start a RADOS Gateway (S3) on 127.0.0.1:BASE+30 with
#                                            a user "stagefs" (idempotent); prints its URL; its
#                                            keys are in DIR/rgw/credentials (AWS format, 0600)
#   tools/dev/ceph-cluster.sh stop-rgw DIR   stop the gateway (its buckets stay)
#
# Environment:
#   CEPH_PORT_BASE     first port (default 46789); the cluster uses
#                      BASE..BASE+31 (mon v2 = BASE, mon v1 = BASE+1, daemons
#                      BASE+2..BASE+29, the gateway's HTTP BASE+30).  Bases of parallel clusters must be
#                      at least 32 apart.
#   CEPH_OSD_SIZE      apparent size of the sparse OSD file (default 8G)
#   CEPH_POOL          pool created by start (default stagefs; pg_num 8, size 1)
#   CEPH_START_TIMEOUT seconds start / start-osd may take (default 60)
#   CEPH_STOP_TIMEOUT  seconds a daemon gets after SIGTERM before SIGKILL (default 15)
#   CEPH_STOP_REAP_WAIT seconds stop waits for exited daemons to be reaped by
#                      their parent (init) so `ps` shows no zombies (default 5)
#   CEPH_KEEP_ON_FAIL  1: a failed start leaves DIR in place for debugging
#
# Progress and errors go to stderr; stdout carries only the result.
# Requires: ceph-mon ceph-mgr ceph-osd ceph-common (Ceph 16), ss, python3
# with the rados module (a dependency of ceph-common); the fs commands also
# ceph-mds and ceph-fuse; the rgw commands radosgw and curl.

set -euo pipefail

PROG=${0##*/}
MARKER=.ceph-cluster-sh          # marks a directory this script owns
PORT_SPAN=32
PY=${CEPH_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
    exit 2
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------
# paths

set_dir() {
    [ -n "${1:-}" ] || usage
    local d=$1
    case $d in /*) ;; *) d=$PWD/$d ;; esac
    # normalise without requiring existence
    d=$(realpath -m -- "$d")
    [ "$d" != / ] || die "refusing to use / as the cluster directory"
    # the path goes into ceph.conf, where '#', ';', '$', '=' and blanks mean
    # something: keep it plain
    case $d in *[!A-Za-z0-9._/+@:,-]*) die "cluster directory '$d': use only [A-Za-z0-9._/+@:,-]" ;; esac
    # admin sockets DIR/run/ceph-osd.0.asok must fit sun_path (108 bytes)
    [ "${#d}" -le 80 ] || die "cluster directory '$d' is too long (max 80 characters: admin socket paths)"
    DIR=$d
    CONF=$DIR/ceph.conf
    KEYRING=$DIR/keyring
    RUN=$DIR/run
    LOGD=$DIR/log
}

pidfile() { echo "$RUN/$1.pid"; }          # $1: mon.a | mgr.x | osd.0
logfile() { echo "$LOGD/$1.log"; }

daemon_bin() {
    case $1 in
        mon.*) echo ceph-mon ;;
        mgr.*) echo ceph-mgr ;;
        osd.*) echo ceph-osd ;;
        mds.*) echo ceph-mds ;;
        rgw.*) echo radosgw ;;
    esac
}

# ---------------------------------------------------------------------------
# processes

# pid belongs to daemon $1 of this cluster: argv[0] is the right binary and
# one argument is exactly our ceph.conf path.
is_ours() {
    local pid=$1 bin
    bin=$(daemon_bin "$2")
    [ -r "/proc/$pid/cmdline" ] || return 1
    local -a argv
    mapfile -d '' -t argv < "/proc/$pid/cmdline" 2>/dev/null || return 1
    [ "${#argv[@]}" -gt 0 ] || return 1
    [ "${argv[0]##*/}" = "$bin" ] || return 1
    local a
    for a in "${argv[@]}"; do
        [ "$a" = "$CONF" ] && return 0
    done
    return 1
}

# "Gone" means the process no longer exists, or it is a fully dead zombie
# (state Z with only its main task left; its locks are released).  A process
# whose main thread exited while other threads run also shows state Z but
# still has tasks and still holds the pidfile lock: that is not gone.
is_gone() {
    local pid=$1 st ntask
    [ -d "/proc/$pid" ] || return 0
    st=$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || return 0
    [ -n "$st" ] || return 0
    if [ "$st" = Z ] || [ "$st" = X ]; then
        local tasks=("/proc/$pid/task"/*)
        ntask=${#tasks[@]}
        [ "$ntask" -le 1 ] && return 0
    fi
    return 1
}

# pids of daemon $1 of this cluster: the pid file, plus any process whose
# command line names our ceph.conf (a daemon that died before or while it
# wrote its pid file, or a pid file that was removed).
daemon_pids() {
    local name=$1 bin pf pid f
    bin=$(daemon_bin "$name")
    pf=$(pidfile "$name")
    {
        if [ -s "$pf" ]; then
            pid=$(tr -dc 0-9 < "$pf" 2>/dev/null || true)
            [ -n "$pid" ] && is_ours "$pid" "$name" && echo "$pid"
        fi
        for f in /proc/[0-9]*/cmdline; do
            pid=${f#/proc/}; pid=${pid%/cmdline}
            [ "$pid" = $$ ] && continue
            # cheap pre-filter before the exact check
            grep -qzxF -- "$CONF" "$f" 2>/dev/null || continue
            is_ours "$pid" "$name" && echo "$pid"
        done
    } | sort -un
}

daemon_running() {
    local p
    for p in $(daemon_pids "$1"); do
        is_gone "$p" || return 0
    done
    return 1
}

# wait until every pid in "$2..." is gone, at most $1 seconds
wait_gone() {
    local limit=$1; shift
    local deadline p left
    deadline=$(awk -v n="$(now)" -v l="$limit" 'BEGIN { printf "%.3f", n + l }')
    while :; do
        left=
        for p in "$@"; do is_gone "$p" || left="$left $p"; done
        [ -z "$left" ] && return 0
        awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n >= d) }' && return 1
        sleep 0.1
    done
}

# stop daemon $1 (SIGTERM, deadline, SIGKILL) and wait until it is really gone
stop_daemon() {
    local name=$1 pids p
    pids=$(daemon_pids "$name")
    pids=${pids//$'\n'/ }
    if [ -n "$pids" ]; then
        log "stopping $name (pid $pids)"
        for p in $pids; do kill -TERM "$p" 2>/dev/null || true; done
        # shellcheck disable=SC2086
        if ! wait_gone "${CEPH_STOP_TIMEOUT:-15}" $pids; then
            log "$name did not exit after ${CEPH_STOP_TIMEOUT:-15}s, sending SIGKILL"
            for p in $pids; do is_gone "$p" || kill -KILL "$p" 2>/dev/null || true; done
            # shellcheck disable=SC2086
            wait_gone 10 $pids || { log "$name (pid $pids) survives SIGKILL"; return 1; }
        fi
    fi
    rm -f "$(pidfile "$name")"
    STOPPED_PIDS="$STOPPED_PIDS $pids"
    return 0
}

# A dead daemon stays a zombie until its parent (init, here the VM's
# process_api, which reaps every ~2 s) collects it.  It holds no lock or
# port any more, but wait a little so that `ps` shows nothing afterwards.
wait_reaped() {
    local deadline=$((SECONDS + ${CEPH_STOP_REAP_WAIT:-5})) p left
    while :; do
        left=
        for p in $STOPPED_PIDS; do [ -d "/proc/$p" ] && left="$left $p"; done
        [ -z "$left" ] && return 0
        [ "$SECONDS" -ge "$deadline" ] && { log "note: exited daemon(s)$left not reaped by their parent yet (zombies, harmless)"; return 0; }
        sleep 0.1
    done
}

# ---------------------------------------------------------------------------
# ceph helpers

cephcli() {
    timeout "${CEPH_CLI_TIMEOUT:-30}" ceph -c "$CONF" --connect-timeout 10 "$@"
}

# One python process talks to the cluster through librados (no CLI start-up
# cost per poll).  Modes:
#   osd-new UUID        register osd.0 with the given uuid
#   ready POOL          create POOL if missing; wait: osd up+in, HEALTH_OK,
#                       every PG active+clean, an op on POOL answered
#   osd-up POOL         wait: osd up+in, every PG active+clean, an op on POOL
#                       (or on another pool if POOL does not exist) answered
#   osd-down            wait until the mon has osd.0 down (mark it down if
#                       the OSD was killed without telling the mon)
# Exit 0 on success, 1 on failure / deadline (reason on stderr).
cluster_py() {
    CEPH_PY_DEADLINE=${CEPH_PY_DEADLINE:-${CEPH_START_TIMEOUT:-60}} \
    "$PY" - "$CONF" "$@" <<'PYEOF'
import json, os, sys, time
import rados

conf, mode, args = sys.argv[1], sys.argv[2], sys.argv[3:]
deadline = time.monotonic() + float(os.environ["CEPH_PY_DEADLINE"])
last = ["(no answer from the cluster yet)"]

def left():
    return deadline - time.monotonic()

def fail(msg):
    sys.stderr.write("ceph-cluster: %s\nceph-cluster: last state: %s\n" % (msg, last[0]))
    sys.exit(1)

def connect():
    while True:
        t = max(1, min(10, int(left())))
        c = rados.Rados(conffile=conf, conf={"client_mount_timeout": str(t)})
        try:
            c.connect(timeout=t)
            return c
        except rados.Error as e:
            last[0] = "connect: %s" % e
            try:
                c.shutdown()
            except Exception:
                pass
        if left() <= 0:
            fail("cannot connect to the monitor")
        time.sleep(0.2)

def cmd(c, kind, **kw):
    kw.setdefault("format", "json")
    f = c.mon_command if kind == "mon" else c.mgr_command
    ret, out, err = f(json.dumps(kw), b"", timeout=max(1, min(10, int(left()) + 1)))
    if ret != 0:
        raise RuntimeError("%s %s: %s (%d)" % (kind, kw["prefix"], err.strip(), ret))
    return json.loads(out) if out.strip() else None

def osd_info(c):
    """(osd.0 entry, {pool name: pool id}) from the mon's current osdmap
    (the client's own copy of the map can be older)"""
    d = cmd(c, "mon", prefix="osd dump")
    pools = dict((p["pool_name"], p["pool"]) for p in d.get("pools", []))
    for o in d.get("osds", []):
        if o["osd"] == 0:
            return o, pools
    return {"up": 0, "in": 0, "up_from": 0}, pools

def osd_state(c):
    o, _ = osd_info(c)
    return o["up"], o["in"]

def all_pgs(c, since):
    # (pool id, state) of every PG; a PG last reported before the OSD's
    # current up epoch is stale news from its previous life: not clean
    d = cmd(c, "mgr", prefix="pg ls")
    stats = d.get("pg_stats", []) if isinstance(d, dict) else d
    return [(int(p["pgid"].split(".")[0]),
             p["state"] if int(p.get("reported_epoch", 0)) >= since else "old:" + p["state"])
            for p in stats]

def probe(c, pool):
    # a read of an object that does not exist: needs an active primary,
    # writes nothing.  The client op timeout (10 s) bounds it.
    io = c.open_ioctx(pool)
    try:
        io.stat("ceph-cluster-sh-probe")
    except rados.ObjectNotFound:
        pass
    finally:
        io.close()
    return True

def wait_serving(c, pool, want_health):
    """osd.0 up+in, every PG of every pool active+clean (and POOL has PGs),
    HEALTH_OK if asked, and an op on POOL answered."""
    while True:
        try:
            o, pools = osd_info(c)
            if pool not in pools:
                raise RuntimeError("pool %s does not exist" % pool)
            pool_id = pools[pool]
            up, inn = o["up"], o["in"]
            pgs = all_pgs(c, o.get("up_from", 0)) if up else []
            mine = sum(1 for pid, _ in pgs if pid == pool_id)
            clean = sum(1 for _, st in pgs if st == "active+clean")
            health = cmd(c, "mon", prefix="health")["status"] if want_health else "-"
            last[0] = "osd.0 up=%d in=%d, pgs %d/%d active+clean (%d in pool %s), %s" % (
                up, inn, clean, len(pgs), mine, pool, health)
            if os.environ.get("CEPH_CLUSTER_DEBUG"):
                sys.stderr.write("%.2f %s\n" % (time.time(), last[0]))
            if up and inn and mine > 0 and clean == len(pgs) and \
               (not want_health or health == "HEALTH_OK") and probe(c, pool):
                return
        except (rados.Error, RuntimeError, KeyError, ValueError) as e:
            last[0] = str(e)
        if left() <= 0:
            fail("deadline passed waiting for the cluster")
        time.sleep(0.25)

c = connect()
try:
    if mode == "osd-new":
        while True:
            try:
                cmd(c, "mon", prefix="osd new", uuid=args[0], id=0)
                break
            except (rados.Error, RuntimeError) as e:
                last[0] = str(e)
            if left() <= 0:
                fail("osd new failed")
            time.sleep(0.2)
    elif mode == "ready":
        pool = args[0]
        while True:
            try:
                pools = cmd(c, "mon", prefix="osd pool ls") or []
                if pool not in pools:
                    cmd(c, "mon", prefix="osd pool create", pool=pool, pg_num=8,
                        pgp_num=8, pool_type="replicated", autoscale_mode="off")
                    cmd(c, "mon", prefix="osd pool set", pool=pool, var="size", val="1",
                        yes_i_really_mean_it=True)
                    cmd(c, "mon", prefix="osd pool set", pool=pool, var="min_size", val="1")
                cmd(c, "mon", prefix="osd pool application enable", pool=pool, app="rados",
                    yes_i_really_mean_it=True)
                break
            except (rados.Error, RuntimeError) as e:
                last[0] = str(e)
            if left() <= 0:
                fail("cannot create pool %s" % pool)
            time.sleep(0.2)
        wait_serving(c, pool, True)
    elif mode == "fs":
        # pools and file system (idempotent), then wait for an active MDS
        while True:
            try:
                pools = cmd(c, "mon", prefix="osd pool ls") or []
                for p in ("cephfs_metadata", "cephfs_data"):
                    if p not in pools:
                        cmd(c, "mon", prefix="osd pool create", pool=p, pg_num=8,
                            pgp_num=8, pool_type="replicated", autoscale_mode="off")
                        cmd(c, "mon", prefix="osd pool set", pool=p, var="size", val="1",
                            yes_i_really_mean_it=True)
                fss = [f["name"] for f in (cmd(c, "mon", prefix="fs ls") or [])]
                if "cephfs" not in fss:
                    cmd(c, "mon", prefix="fs new", fs_name="cephfs",
                        metadata="cephfs_metadata", data="cephfs_data")
                break
            except (rados.Error, RuntimeError) as e:
                last[0] = str(e)
            if left() <= 0:
                fail("cannot create the file system")
            time.sleep(0.2)
        while True:
            try:
                d = cmd(c, "mon", prefix="fs dump")
                states = [i["state"] for f in d.get("filesystems", [])
                          for i in f["mdsmap"]["info"].values()]
                last[0] = "mds states %s" % states
                if "up:active" in states:
                    break
            except (rados.Error, RuntimeError, KeyError) as e:
                last[0] = str(e)
            if left() <= 0:
                fail("no active MDS")
            time.sleep(0.25)
        wait_serving(c, "cephfs_data", False)
    elif mode == "osd-up":
        pool = args[0]
        pools = sorted(osd_info(c)[1])
        if pool not in pools:
            pools = [p for p in pools if p != "device_health_metrics"] or pools
            if not pools:
                fail("the cluster has no pool")
            pool = pools[0]
        wait_serving(c, pool, False)
    elif mode == "osd-down":
        marked = False
        while True:
            try:
                up, _ = osd_state(c)
                last[0] = "osd.0 up=%d" % up
                if not up:
                    break
                if not marked and left() < float(os.environ.get("CEPH_MARK_DOWN_AFTER", "0")):
                    cmd(c, "mon", prefix="osd down", ids=["0"])
                    marked = True
            except (rados.Error, RuntimeError) as e:
                last[0] = str(e)
            if left() <= 0:
                fail("the monitor still has osd.0 up")
            time.sleep(0.2)
    else:
        fail("unknown mode %s" % mode)
finally:
    c.shutdown()
PYEOF
}

# ---------------------------------------------------------------------------
# start

check_ports() {
    local base=$1 p taken=
    case $base in ''|*[!0-9]*) die "CEPH_PORT_BASE must be a number (got '$base')" ;; esac
    if [ "$base" -lt 1024 ] || [ $((base + PORT_SPAN - 1)) -gt 65535 ]; then
        die "CEPH_PORT_BASE=$base: need 1024 <= base and base+$((PORT_SPAN - 1)) <= 65535"
    fi
    command -v ss >/dev/null || die "ss (iproute2) is required to check ports"
    local listening
    listening=$(ss -Hltn 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }' | sort -un)
    for p in $(seq "$base" $((base + PORT_SPAN - 1))); do
        if grep -qx "$p" <<<"$listening"; then taken="$taken $p"; fi
    done
    [ -z "$taken" ] ||
        die "port(s)$taken in CEPH_PORT_BASE range $base-$((base + PORT_SPAN - 1)) already in use (another cluster? set CEPH_PORT_BASE)"
}

size_bytes() {
    local s=$1 b
    b=$(numfmt --from=iec -- "$s" 2>/dev/null) || die "CEPH_OSD_SIZE: cannot parse '$s' (use e.g. 8G, 512M)"
    [ "$b" -ge $((1024 * 1024 * 1024)) ] || die "CEPH_OSD_SIZE=$s is too small (bluestore needs >= 1G)"
    echo "$b"
}

write_conf() {
    local base=$1 osd_bytes=$2 fsid=$3
    cat > "$CONF" <<EOF
# generated by tools/dev/ceph-cluster.sh - throwaway single-node cluster.
# Everything lives in $DIR.  See docs/ceph-cluster.md for the reasons.
[global]
fsid = $fsid
mon_initial_members = a
mon_host = [v2:127.0.0.1:$base,v1:127.0.0.1:$((base + 1))]
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_ipv4 = true
ms_bind_ipv6 = false
ms_bind_port_min = $((base + 2))
ms_bind_port_max = $((base + PORT_SPAN - 3))
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
keyring = $KEYRING
run_dir = $RUN
crash_dir = $DIR/crash
log_file = $LOGD/\$name.log
# one OSD: size-1 pools, replicas may share a host
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_max_pg_per_osd = 1000
# HEALTH_OK on a single node with a small root disk
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 5
mon_data_avail_crit = 2
# speed
paxos_propose_interval = 0.1
mgr_stats_period = 1
mon_mgr_digest_period = 1

[mon]
mon_data = $DIR/mon
pid_file = $RUN/\$name.pid
mon_cluster_log_file = $LOGD/cluster.log

[mgr]
mgr_data = $DIR/mgr
pid_file = $RUN/\$name.pid
# only iostat: no restful HTTPS module (certificates, a port, a warning)
mgr_initial_modules = iostat

[osd]
osd_data = $DIR/osd
pid_file = $RUN/\$name.pid
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = $osd_bytes
bluestore_fsck_on_mkfs = false
# the VM disk says rotational=1; the real target is NVMe
bluestore_debug_enforce_settings = ssd
osd_memory_target = 1610612736
osd_crush_initial_weight = 1

[mds]
mds_data = $DIR/mds/\$name
pid_file = $RUN/\$name.pid
# the default 4 GiB is for real metadata servers
mds_cache_memory_limit = 268435456

[client]
log_file = $LOGD/\$name.log
keyring = $KEYRING
# librados blocks forever on a dead cluster without these
rados_osd_op_timeout = 10
rados_mon_op_timeout = 10
client_mount_timeout = 10
EOF
}

STOPPED_PIDS=""
STARTED=0        # set once start has created things that need cleaning up
FAIL_LOGS=""

tail_logs() {
    local n
    for n in "$@"; do
        local f=$LOGD/$n
        [ -s "$f" ] || continue
        echo "----- tail of $f -----" >&2
        # the mon/mgr audit lines are our own polling: leave them out
        grep -v -e 'log_channel(audit)' -e 'handle_command' -e 'log \[DBG\]' \
            -e '^[[:space:]]*$' "$f" |
            tail -n 15 >&2 || true
    done
}

start_fail() {
    log "error: $*"
    # shellcheck disable=SC2086
    tail_logs $FAIL_LOGS
    if [ "$STARTED" = 1 ]; then
        if [ "${CEPH_KEEP_ON_FAIL:-0}" = 1 ]; then
            local d
            for d in mds.a osd.0 mgr.x mon.a; do stop_daemon "$d" || true; done
            log "CEPH_KEEP_ON_FAIL=1: daemons stopped, $DIR left in place"
        else
            do_stop >/dev/null || true
        fi
    fi
    exit 1
}

# run a step of start within what is left of CEPH_START_TIMEOUT, its output
# into DIR/log/setup.log; fail start on error
setup_step() {
    local what=$1; shift
    local left rc=0
    left=$(remaining "$T0")
    awk -v l="$left" 'BEGIN { exit !(l > 0) }' ||
        start_fail "CEPH_START_TIMEOUT (${CEPH_START_TIMEOUT:-60}s) passed before: $what"
    if declare -F "$1" >/dev/null; then
        CEPH_PY_DEADLINE=$left "$@" >>"$LOGD/setup.log" 2>&1 || rc=$?
    else
        timeout -k 5 "$left" "$@" >>"$LOGD/setup.log" 2>&1 || rc=$?
    fi
    [ "$rc" = 0 ] && return 0
    FAIL_LOGS="setup.log $FAIL_LOGS"
    case $rc in
        124|137) start_fail "$what: timed out (CEPH_START_TIMEOUT=${CEPH_START_TIMEOUT:-60}s)" ;;
        *) start_fail "$what failed (exit $rc)" ;;
    esac
}

on_signal() {
    trap - INT TERM HUP
    start_fail "interrupted"
}

do_start() {
    local base=${CEPH_PORT_BASE:-46789}
    local pool=${CEPH_POOL:-stagefs}
    local osd_bytes fsid osd_uuid fstype
    T0=$(now)
    for b in ceph-mon ceph-mgr ceph-osd ceph ceph-authtool monmaptool ss numfmt timeout; do
        command -v "$b" >/dev/null || die "$b not found (apt-get install ceph-mon ceph-mgr ceph-osd ceph-common iproute2)"
    done
    "$PY" -c 'import rados' 2>/dev/null || die "$PY cannot import rados (python3-rados)"
    osd_bytes=$(size_bytes "${CEPH_OSD_SIZE:-8G}")
    if [ -e "$DIR" ]; then
        [ -d "$DIR" ] || die "$DIR exists and is not a directory"
        [ -z "$(ls -A "$DIR")" ] ||
            die "$DIR is not empty (a running or stale cluster? use: $PROG stop $DIR)"
    fi
    check_ports "$base"
    mkdir -p "$DIR"
    : > "$DIR/$MARKER"
    STARTED=1
    trap on_signal INT TERM HUP
    mkdir -p "$RUN" "$LOGD" "$DIR/crash" "$DIR/mon" "$DIR/mgr" "$DIR/osd"

    # bluestore opens its block file with O_DIRECT: tmpfs cannot do that
    fstype=$(stat -f -c %T "$DIR")
    case $fstype in tmpfs|ramfs) start_fail "$DIR is on $fstype; bluestore needs O_DIRECT (use a disk-backed directory)" ;; esac

    fsid=$(cat /proc/sys/kernel/random/uuid)
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    write_conf "$base" "$osd_bytes" "$fsid"
    log "starting cluster in $DIR (ports $base-$((base + PORT_SPAN - 1)), OSD file ${CEPH_OSD_SIZE:-8G})"

    # keys: mon., client.admin, mgr.x, osd.0 in one keyring; the mon imports
    # all of them (with their caps) at mkfs.
    setup_step "ceph-authtool" ceph-authtool --create-keyring "$KEYRING" --gen-key -n mon. --cap mon 'allow *'
    setup_step "ceph-authtool" ceph-authtool "$KEYRING" --gen-key -n client.admin \
        --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *'
    setup_step "ceph-authtool" ceph-authtool "$KEYRING" --gen-key -n mgr.x \
        --cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *'
    setup_step "ceph-authtool" ceph-authtool "$KEYRING" --gen-key -n osd.0 \
        --cap mon 'allow profile osd' --cap mgr 'allow profile osd' --cap osd 'allow *'
    # the MDS's key too, so that `fs` needs no auth change later
    setup_step "ceph-authtool" ceph-authtool "$KEYRING" --gen-key -n mds.a \
        --cap mon 'allow profile mds' --cap mgr 'allow profile mds' --cap osd 'allow *' \
        --cap mds 'allow *'
    setup_step "monmaptool" monmaptool --create --fsid "$fsid" \
        --addv a "[v2:127.0.0.1:$base,v1:127.0.0.1:$((base + 1))]" "$DIR/monmap"

    FAIL_LOGS="mon.a.log"
    setup_step "ceph-mon --mkfs" ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$KEYRING"
    setup_step "starting ceph-mon" ceph-mon -c "$CONF" -i a
    FAIL_LOGS="mgr.x.log"
    setup_step "starting ceph-mgr" ceph-mgr -c "$CONF" -i x
    FAIL_LOGS="mon.a.log"
    setup_step "osd new" cluster_py osd-new "$osd_uuid"
    FAIL_LOGS="osd.0.log"
    setup_step "ceph-osd --mkfs" ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid"
    setup_step "starting ceph-osd" ceph-osd -c "$CONF" -i 0
    log "daemons started after $(elapsed "$T0")s; waiting for HEALTH_OK and pool $pool"

    FAIL_LOGS="osd.0.log mgr.x.log mon.a.log"
    setup_step "waiting for the cluster" cluster_py ready "$pool"
    trap - INT TERM HUP
    rm -f "$DIR/monmap"
    log "HEALTH_OK, osd.0 up+in, pool $pool ready after $(elapsed "$T0")s"
    echo "$CONF"
}

# seconds left of CEPH_START_TIMEOUT since $1 (may be <= 0)
remaining() {
    awk -v a="$1" -v b="$(now)" -v l="${CEPH_START_TIMEOUT:-60}" \
        'BEGIN { printf "%.2f", l - (b - a) }'
}

# ---------------------------------------------------------------------------
# stop / osd / status

owned_dir() {
    [ -e "$DIR/$MARKER" ] && return 0
    [ -f "$CONF" ] && head -n 1 "$CONF" | grep -c '^# generated by tools/\(dev/\)\?ceph-cluster.sh' >/dev/null && return 0
    return 1
}

do_stop() {
    local rc=0 d m
    # clients first: the ceph-fuse mounts made by mount-fs, then the MDS
    if [ -s "$RUN/fuse-mounts" ]; then
        while IFS= read -r m; do
            [ -n "$m" ] && { fuse_umount "$m" || rc=1; }
        done < "$RUN/fuse-mounts"
    fi
    for d in rgw.gw mds.a osd.0 mgr.x mon.a; do
        stop_daemon "$d" || rc=1
    done
    # An MDS that respawned while it was being stopped (it execs itself
    # and daemonizes again: a new pid) escapes the first pass; so may a
    # daemon that was starting.  Look again until none is left.
    [ ! -d "$DIR/mds" ] || sleep 1	# a respawning MDS forks a moment after its exec
    for _ in 1 2 3; do
        local left=
        for d in rgw.gw mds.a osd.0 mgr.x mon.a; do
            [ -z "$(daemon_pids "$d")" ] || left="$left $d"
        done
        [ -n "$left" ] || break
        log "stopping$left again (started or respawned meanwhile)"
        for d in $left; do stop_daemon "$d" || rc=1; done
    done
    [ "$rc" = 0 ] || { log "error: some daemons would not die; $DIR left in place"; return 1; }
    wait_reaped
    if [ -d "$DIR" ]; then
        if owned_dir; then
            rm -rf -- "$DIR"
        elif [ -z "$(ls -A "$DIR")" ]; then
            rmdir -- "$DIR"
        else
            log "error: $DIR was not made by $PROG; not removing it"
            return 1
        fi
    fi
    return 0
}

need_cluster() {
    [ -f "$CONF" ] || die "no cluster in $DIR ($CONF missing)"
}

do_stop_osd() {
    need_cluster
    stop_daemon osd.0 || die "cannot stop osd.0"
    if daemon_running mon.a; then
        # A SIGTERMed OSD tells the mon it is going down (fast shutdown with
        # osd_fast_shutdown_notify_mon).  One that was SIGKILLed does not,
        # and with no peer OSD to report it the mon would keep it "up" for
        # mon_osd_report_timeout (900 s): mark it down after 2 s.
        CEPH_PY_DEADLINE=10 CEPH_MARK_DOWN_AFTER=8 cluster_py osd-down ||
            log "warning: the monitor still reports osd.0 up"
    fi
    log "osd.0 stopped"
}

do_start_osd() {
    need_cluster
    local t0 pool=${CEPH_POOL:-stagefs}
    t0=$(now)
    daemon_running mon.a || die "the monitor of $DIR is not running"
    if daemon_running osd.0; then
        log "osd.0 already running"
    else
        rm -f "$(pidfile osd.0)"
        if ! ceph-osd -c "$CONF" -i 0 >>"$LOGD/setup.log" 2>&1; then
            tail_logs setup.log osd.0.log
            die "ceph-osd failed to start"
        fi
    fi
    if ! CEPH_PY_DEADLINE=${CEPH_START_TIMEOUT:-60} cluster_py osd-up "$pool"; then
        tail_logs osd.0.log
        die "osd.0 did not come up"
    fi
    log "osd.0 up, all PGs active+clean after $(elapsed "$t0")s"
}

do_status() {
    need_cluster
    local d rc=0
    local ds="mon.a mgr.x osd.0"
    [ ! -d "$DIR/mds" ] || ds="$ds mds.a"
    [ ! -d "$DIR/rgw" ] || ds="$ds rgw.gw"
    for d in $ds; do
        if daemon_running "$d"; then
            echo "$d: running (pid $(daemon_pids "$d" | tr '\n' ' ' | sed 's/ $//'))" >&2
        else
            echo "$d: not running" >&2; rc=1
        fi
    done
    daemon_running mon.a || { log "cluster in $DIR is not running"; return 1; }
    cephcli -s || return 1
    return $rc
}

# ---------------------------------------------------------------------------
# CephFS: an MDS, a file system, ceph-fuse mounts (only when asked: the
# tests' clusters do not pay for them)

do_fs() {
    need_cluster
    local t0
    t0=$(now)
    for b in ceph-mds ceph-fuse; do
        command -v "$b" >/dev/null || die "$b not found (apt-get install ceph-mds ceph-fuse)"
    done
    daemon_running mon.a || die "the monitor of $DIR is not running"
    if ! daemon_running mds.a; then
        mkdir -p "$DIR/mds/mds.a"
        rm -f "$(pidfile mds.a)"
        if ! ceph-mds -c "$CONF" -i a >>"$LOGD/setup.log" 2>&1; then
            tail_logs setup.log mds.a.log
            die "ceph-mds failed to start"
        fi
    fi
    if ! CEPH_PY_DEADLINE=${CEPH_START_TIMEOUT:-60} cluster_py fs; then
        tail_logs mds.a.log
        die "the file system did not come up"
    fi
    log "CephFS cephfs up (mds.a active) after $(elapsed "$t0")s"
}

# rm-fs: undo fs (ceph-fuse mounts, the file system, its pools, the MDS)
do_rm_fs() {
    need_cluster
    local m
    if [ -s "$RUN/fuse-mounts" ]; then
        while IFS= read -r m; do
            [ -n "$m" ] && fuse_umount "$m"
        done < "$RUN/fuse-mounts"
    fi
    if cephcli fs ls --format json 2>/dev/null | grep -c '"cephfs"' >/dev/null; then
        cephcli fs fail cephfs >>"$LOGD/setup.log" 2>&1 &&
            cephcli fs rm cephfs --yes-i-really-mean-it >>"$LOGD/setup.log" 2>&1 ||
            die "cannot remove the file system (see $LOGD/setup.log)"
    fi
    for m in cephfs_metadata cephfs_data; do
        cephcli osd pool rm "$m" "$m" --yes-i-really-really-mean-it >>"$LOGD/setup.log" 2>&1 || true
    done
    stop_daemon mds.a || die "cannot stop mds.a"
    rm -rf -- "$DIR/mds"
    log "CephFS removed, mds.a stopped"
}

# ---------------------------------------------------------------------------
# RADOS Gateway: S3 on 127.0.0.1:BASE+30 (only when asked, as the MDS is)

rgw_port() {
    local v2
    v2=$(sed -n 's/^mon_host = \[v2:127.0.0.1:\([0-9]*\),.*/\1/p' "$CONF")
    [ -n "$v2" ] || die "cannot read the port base from $CONF"
    echo $((v2 + 30))
}

# a random string of $2 characters from the set $1
# (no pipe that closes early: SIGPIPE would fail it under pipefail)
rand_str() {
    local s
    s=$(head -c 8192 /dev/urandom | LC_ALL=C tr -dc "$1")
    [ "${#s}" -ge "$2" ] || die "cannot make a random string"
    echo "${s:0:$2}"
}

do_rgw() {
    need_cluster
    local t0 port url code ak sk
    t0=$(now)
    for b in radosgw radosgw-admin curl; do
        command -v "$b" >/dev/null || die "$b not found (apt-get install radosgw curl)"
    done
    daemon_running mon.a || die "the monitor of $DIR is not running"
    port=$(rgw_port)
    url=http://127.0.0.1:$port
    mkdir -p "$DIR/rgw/data"
    chmod 700 "$DIR/rgw"
    if [ ! -s "$DIR/rgw/keyring" ]; then
        ( umask 077; cephcli auth get-or-create client.rgw.gw mon 'allow rw' osd 'allow rwx' \
            > "$DIR/rgw/keyring.new" 2>>"$LOGD/setup.log" ) || die "cannot make the gateway's key (see $LOGD/setup.log)"
        mv "$DIR/rgw/keyring.new" "$DIR/rgw/keyring"
    fi
    if ! daemon_running rgw.gw; then
        rm -f "$(pidfile rgw.gw)"
        if ! radosgw -c "$CONF" -n client.rgw.gw --keyring "$DIR/rgw/keyring" \
            --rgw_frontends "beast endpoint=127.0.0.1:$port" --rgw_data "$DIR/rgw/data" \
            --pid_file "$(pidfile rgw.gw)" --log_file "$(logfile rgw.gw)" \
            --rgw_enable_usage_log=false >>"$LOGD/setup.log" 2>&1; then
            tail_logs setup.log rgw.gw.log
            die "radosgw failed to start"
        fi
    fi
    # the first start creates the gateway's pools before it answers
    until code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/") && [ "$code" = 200 ]; do
        if awk -v r="$(remaining "$t0")" 'BEGIN { exit !(r <= 0) }'; then
            tail_logs rgw.gw.log
            die "the gateway does not answer on $url"
        fi
        sleep 0.2
    done
    if [ ! -s "$DIR/rgw/credentials" ]; then
        ak=$(rand_str A-Z0-9 20)
        sk=$(rand_str A-Za-z0-9 40)
        timeout "${CEPH_CLI_TIMEOUT:-30}" radosgw-admin -c "$CONF" -n client.admin user create \
            --uid=stagefs --display-name=stagefs --access-key="$ak" --secret-key="$sk" \
            >>"$LOGD/setup.log" 2>&1 || die "cannot create the gateway's user (see $LOGD/setup.log)"
        ( umask 077
          printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$ak" "$sk" \
              > "$DIR/rgw/credentials.new" )
        mv "$DIR/rgw/credentials.new" "$DIR/rgw/credentials"
    fi
    log "RADOS Gateway on $url (keys in $DIR/rgw/credentials) after $(elapsed "$t0")s"
    echo "$url"
}

do_stop_rgw() {
    need_cluster
    stop_daemon rgw.gw || die "cannot stop rgw.gw"
    log "rgw.gw stopped"
}

# mount-fs MNT: ceph-fuse, as client.admin, the whole file system; returns
# once MNT is a mount point.  stop unmounts what this made.
do_mount_fs() {
    local mnt=$1 end
    [ -n "$mnt" ] || usage
    need_cluster
    command -v ceph-fuse >/dev/null || die "ceph-fuse not found (apt-get install ceph-fuse)"
    mkdir -p "$mnt"
    mnt=$(realpath -- "$mnt")
    mountpoint -q "$mnt" && die "$mnt is already a mount point"
    # ceph-fuse forks; the parent returns once the mount is made (or failed)
    if ! timeout -k 5 "${CEPH_START_TIMEOUT:-60}" ceph-fuse -c "$CONF" "$mnt" >>"$LOGD/setup.log" 2>&1; then
        tail_logs setup.log client.admin.log
        die "ceph-fuse could not mount $mnt"
    fi
    end=$((SECONDS + 10))
    until mountpoint -q "$mnt"; do
        [ "$SECONDS" -lt "$end" ] || die "$mnt is not a mount point after ceph-fuse"
        sleep 0.1
    done
    grep -qxF -- "$mnt" "$RUN/fuse-mounts" 2>/dev/null || echo "$mnt" >> "$RUN/fuse-mounts"
    log "CephFS mounted on $mnt (ceph-fuse)"
}

# fuse_umount MNT: unmount a ceph-fuse mount of this cluster and wait until
# its ceph-fuse process has exited (a lazy unmount if it is busy)
fuse_umount() {
    local mnt pids p f
    mnt=$(realpath -m -- "$1")
    pids=
    for f in /proc/[0-9]*/cmdline; do
        p=${f#/proc/}; p=${p%/cmdline}
        grep -qzxF -- "$CONF" "$f" 2>/dev/null || continue
        grep -qzxF -- "$mnt" "$f" 2>/dev/null || continue
        [ "$(tr '\0' '\n' < "$f" 2>/dev/null | head -n 1)" = ceph-fuse ] || continue
        pids="$pids $p"
    done
    if mountpoint -q "$mnt"; then
        fusermount3 -u "$mnt" 2>/dev/null || umount "$mnt" 2>/dev/null ||
            umount -l "$mnt" 2>/dev/null || { log "cannot unmount $mnt"; return 1; }
    fi
    # shellcheck disable=SC2086
    if [ -n "$pids" ] && ! wait_gone "${CEPH_STOP_TIMEOUT:-15}" $pids; then
        for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    fi
    if [ -f "$RUN/fuse-mounts" ]; then
        grep -vxF -- "$mnt" "$RUN/fuse-mounts" > "$RUN/fuse-mounts.new" || true
        mv "$RUN/fuse-mounts.new" "$RUN/fuse-mounts"
    fi
    return 0
}

# ---------------------------------------------------------------------------

[ $# -ge 1 ] || usage
cmd=$1; shift
case $cmd in
    start)
        if [ "${1:-}" = --with-fs ]; then
            set_dir "${2:-}"; do_start; do_fs
        else
            set_dir "${1:-}"; do_start
        fi ;;
    fs)        set_dir "${1:-}"; do_fs ;;
    rm-fs)     set_dir "${1:-}"; do_rm_fs ;;
    rgw)       set_dir "${1:-}"; do_rgw ;;
    stop-rgw)  set_dir "${1:-}"; do_stop_rgw ;;
    mount-fs)  set_dir "${1:-}"; do_mount_fs "${2:-}" ;;
    umount-fs) set_dir "${1:-}"; [ -n "${2:-}" ] || usage; fuse_umount "$2" ;;
    stop)      set_dir "${1:-}"; do_stop ;;
    stop-osd)  set_dir "${1:-}"; do_stop_osd ;;
    start-osd) set_dir "${1:-}"; do_start_osd ;;
    status)    set_dir "${1:-}"; do_status ;;
    env)       set_dir "${1:-}"; need_cluster; printf 'export CEPH_CONF=%q\n' "$CONF" ;;
    -h|--help|help) usage ;;
    *) usage ;;
esac
