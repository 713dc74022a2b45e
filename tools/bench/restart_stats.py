#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""restart_stats.py: the figures of tools/bench.sh restart.

  restart_stats.py calls TRACE [--events FILE | --every MS]
      TRACE is what `readbench loop -o` wrote: one record per open, read or
      close (two native int64s: the call's end, CLOCK_REALTIME ns, and
      duration_ns << 3 | failed << 2 | op).  Prints one JSON line: calls,
      failed calls, p50/p99/max of every call's latency (ms), when the
      slowest ended (max_end_s, epoch seconds), and, with
      --events (one "NS LABEL" line per takeover asked for: `date +%s%N`
      just before the kill), the worst call ending in each window from one
      event to the next (the last one runs to the trace's end): the pause
      a reader saw, p50/p99/max over the windows, and which call it was.
      --every MS cuts the trace into windows of MS instead, from its first
      call: the same figure where nothing was killed (the baseline).

  restart_stats.py log LOG FIRST LAST [crash|planned]
      LOG is the mount's log (supervisor and daemons, log_level=info).
      For the takeovers of daemon generations FIRST..LAST, of the kind
      given (default both): the daemon's own pause ("took the mount over
      ... N ms after the daemon before ended") as JSON on the first line
      (n, p50, p99, max, ms), the values on the second ("values: ..."),
      then where the time went, phase by phase: the gap between one
      milestone line of the log and the next, named after the later one,
      median and max over the takeovers (ms) and share of their sum.

Percentiles are nearest-rank: with 20 takeovers, p99 is the worst one.
"""
import array
import bisect
import json
import math
import re
import sys

OPS = ("open", "read", "close")


def pct(sorted_vals, p):
    if not sorted_vals:
        return 0.0
    k = max(0, math.ceil(p / 100.0 * len(sorted_vals)) - 1)
    return sorted_vals[min(k, len(sorted_vals) - 1)]


def median(vals):
    s = sorted(vals)
    n = len(s)
    if not n:
        return 0.0
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def cmd_calls(argv):
    trace = argv[0]
    events = every = None
    if "--events" in argv:
        events = argv[argv.index("--events") + 1]
    if "--every" in argv:
        every = float(argv[argv.index("--every") + 1])
    a = array.array("q")
    with open(trace, "rb") as f:
        data = f.read()
    a.frombytes(data[:len(data) // 16 * 16])
    ends = a[0::2]
    durs = a[1::2]
    n = len(ends)
    lat = sorted((d >> 3) / 1e6 for d in durs)
    failed = sum(1 for d in durs if d & 4)
    slowest = max(range(n), key=lambda i: durs[i] >> 3) if n else None
    out = {"calls": n, "failed": failed,
           "p50_ms": round(pct(lat, 50), 3), "p99_ms": round(pct(lat, 99), 3),
           "max_ms": round(lat[-1], 3) if lat else 0,
           "max_end_s": round(ends[slowest] / 1e9, 3) if n else 0}
    cuts = []
    if events:
        with open(events) as f:
            cuts = [int(line.split()[0]) for line in f if line.strip()]
    elif every and n:
        t = min(ends)
        last = max(ends)
        step = int(every * 1e6)
        while t < last:
            cuts.append(t)
            t += step
    if cuts:
        cuts.sort()
        worst = [0.0] * len(cuts)
        wop = [""] * len(cuts)
        for i in range(n):
            w = bisect.bisect_right(cuts, ends[i]) - 1
            if w < 0:
                continue
            ms = (durs[i] >> 3) / 1e6
            if ms > worst[w]:
                worst[w] = ms
                wop[w] = OPS[durs[i] & 3]
        s = sorted(worst)
        out.update({"windows": len(cuts), "pause_p50_ms": round(pct(s, 50), 1),
                    "pause_p99_ms": round(pct(s, 99), 1), "pause_max_ms": round(s[-1], 1),
                    "window_ms": int((cuts[-1] - cuts[0]) / 1e6 / max(1, len(cuts) - 1))})
        for op in OPS:
            out["worst_" + op] = wop.count(op)
    print(json.dumps(out))
    return 0


LINE = re.compile(r"^\S+ (\d\d):(\d\d):(\d\d)\.(\d\d\d) \w+: (.*)$")
DOWN = [
    (re.compile(r"^supervisor: the daemon was killed by signal"), "crash"),
    (re.compile(r"^supervisor: the daemon exited with status"), "crash"),
    (re.compile(r"^supervisor: restarting the daemon of"), "planned"),
]
# milestones, in the order a takeover passes them; the time up to one is
# named after it (a milestone missing from a log merges into the next)
MILESTONES = [
    (re.compile(r"^handing .* over to the next daemon"),
     "old daemon: stops, answers what it holds"),
    (re.compile(r"^supervisor: daemon \d+ takes the mount"),
     "old daemon gone; supervisor forks the next"),
    (re.compile(r"^fd_cache: "), "exec, options, takeover state"),
    (re.compile(r"^cache .* loaded in \d+ ms"), "cache index load (journal)"),
    (re.compile(r"(unchanged since its last scan|no saved scan)"),
     "dataset: its saved scan"),
    (re.compile(r"^I/O engine: \d+ MiB of buffers"), "I/O engine: buffers mapped, registered"),
    (re.compile(r"^FUSE session: "), "FUSE session on the kept /dev/fuse"),
    (re.compile(r"^control socket /"), "passthrough, readahead, control socket"),
    (re.compile(r"^mounted .* on "), "passthrough accounting (BPF load)"),
    (re.compile(r"^took the mount .* over \(daemon generation (\d+)\) (\d+) ms"),
     "resend asked, serving"),
]
TOOK = MILESTONES[-1][0]


def cmd_log(argv):
    path, first, last = argv[0], int(argv[1]), int(argv[2])
    want = argv[3] if len(argv) > 3 else None
    takeovers = []	# (kind, gen, pause_ms, [(phase, ms)])
    cur = None
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            if not m:
                continue
            t = ((int(m.group(1)) * 60 + int(m.group(2))) * 60 + int(m.group(3))) * 1000 + int(m.group(4))
            msg = m.group(5)
            for rx, kind in DOWN:
                if rx.search(msg):
                    cur = {"kind": kind, "t": t, "at": 0, "phases": []}
                    break
            else:
                if cur is None:
                    continue
                for k, (rx, name) in enumerate(MILESTONES):
                    mm = rx.search(msg)
                    if not mm or k < cur["at"]:
                        continue
                    dt = t - cur["t"]
                    if dt < 0:
                        dt += 86400000	# midnight
                    cur["phases"].append((name, dt))
                    cur["t"] = t
                    cur["at"] = k + 1
                    if rx is TOOK:
                        takeovers.append((cur["kind"], int(mm.group(1)), int(mm.group(2)),
                                          cur["phases"]))
                        cur = None
                    break
    sel = [x for x in takeovers if first <= x[1] <= last and (want is None or x[0] == want)]
    pauses = sorted(x[2] for x in sel)
    print(json.dumps({"n": len(sel), "p50_ms": pct(pauses, 50), "p99_ms": pct(pauses, 99),
                      "max_ms": pauses[-1] if pauses else 0,
                      "median_ms": median(pauses)}))
    print("values: " + " ".join(str(x[2]) for x in sel))
    per = {}
    names = []
    for _, _, _, phases in sel:
        seen = {}
        for name, ms in phases:
            seen[name] = seen.get(name, 0) + ms
        for name, ms in seen.items():
            if name not in per:
                per[name] = []
                names.append(name)
            per[name].append(ms)
    order = [name for _, name in MILESTONES if name in per]
    total = sum(sum(v) for v in per.values()) or 1
    print("  %-44s %9s %9s %8s" % ("where the time goes (daemon log, ms)", "median", "max", "share"))
    for name in order:
        v = per[name]
        v += [0] * (len(sel) - len(v))
        print("  %-44s %9.0f %9d %7.0f%%" % (name, median(v), max(v), 100.0 * sum(v) / total))
    top = sorted(order, key=lambda name: -sum(per[name]))[:3]
    if top:
        print("  most of it: " + ", ".join("%s %.0f%%" % (name, 100.0 * sum(per[name]) / total)
                                          for name in top))
    return 0


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("calls", "log"):
        sys.stderr.write(__doc__)
        return 2
    if sys.argv[1] == "calls":
        return cmd_calls(sys.argv[2:])
    return cmd_log(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
