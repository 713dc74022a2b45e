#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""aubench_agree.py: stagefs's job row against tools/bench/aubench's own figures.

    aubench_agree.py row MNT JOB
    aubench_agree.py check [--json] MNT JOB BEFORE TRIAL

row:   JOB's counters in MNT/.stagefs/stats as one JSON object (zeros where
       the job has no row yet), once they stopped changing (the daemon
       takes passthrough figures in once a second and a RELEASE after
       close() returned): the "before" of a trial.
check: after a trial (TRIAL: aubench's JSON line for it, BEFORE: the row
       taken before it), wait until the row has settled, then print what
       stagefs counted for the trial (the difference), what the tool
       measured, and whether they agree:

  bytes  exact (no byte of the difference labelled read_bytes_estimated):
         equal to the bytes the readers' read(2) calls returned; where the
         tool left files before their end ("partial_files"), at least
         those and at most the sizes of the files opened ("opened_bytes"):
         the kernel's readahead fetches past where a reader stopped, never
         past the end of the file.  Estimated: within 10 % of the tool's,
         or, with files left in part, within the estimate's bounds (what
         was read .. the sizes of the files opened).
  stall  stall_ns / active_ns over the trial between the tool's two shares
         of its readers' active time (counted as stagefs counts it;
         tools/bench/aubench.c), each widened by 5 points: at least the share
         lost (reader_stall: time blocked in open/read/close beyond the
         cheapest epoch's cost per byte), at most the share blocked
         (reader_blocked_s: all of that time).  stagefs counts the whole
         time of a READ that waited for a fetch, what it would have cost
         from the cache included, so on a backend about as fast as the
         cache its share lies above the lost share; where the waits
         dominate the two shares meet and this is "within 5 points".
         A trial in which no READ of the job missed the cache
         (cache_misses unchanged) had nothing to stall on: its share must
         be within 5 points of 0, whatever the readers lost; a warm epoch
         slower than the other is the disk's or the CPU's noise, not a
         wait for data.
  rate   stagefs's bytes over the trial's wall time (less any staging)
         beside the tool's: it agrees when the bytes do.

With --json the verdict is one JSON object instead of a line of text.
Exit status: 0 agree, 1 disagree, 2 usage or unreadable stats.
"""
import json
import subprocess
import sys
import time

FIELDS = ("read_bytes", "read_bytes_estimated", "passthrough_read_bytes", "stall_ns",
          "active_ns", "files_read", "cache_misses")
BYTES_EST_TOL = 0.10	# estimated bytes: within 10 % (tests/integration/feedrate_truth.sh)
STALL_TOL = 0.05	# stall share: within 5 points (idem)
SETTLE_S = 15		# longest wait for the row to settle
POLL_S = 1.2		# longer than the daemon's 1 s drain of passthrough figures


def die(msg):
    print(msg, file=sys.stderr)
    sys.exit(2)


def read_row(mnt, job):
    """JOB's counters in MNT/.stagefs/stats, zeros without a row."""
    out = subprocess.run(["timeout", "10", "cat", mnt + "/.stagefs/stats"],
                         capture_output=True, text=True)
    if out.returncode:
        die(f"aubench_agree: cannot read {mnt}/.stagefs/stats: {out.stderr.strip()}")
    try:
        d = json.loads(out.stdout)
    except ValueError as e:
        die(f"aubench_agree: {mnt}/.stagefs/stats is not JSON: {e}")
    row = dict.fromkeys(FIELDS, 0)
    for j in d.get("jobs", []):
        if j.get("job") == job:
            for k in FIELDS:
                row[k] = j.get(k) or 0
    row["passthrough_accounting"] = d.get("passthrough_accounting", "off")
    return row


def settled_row(mnt, job, want_bytes=0):
    """The row once two reads POLL_S apart agree and it holds at least
    WANT_BYTES; after SETTLE_S, the last read (the check then says why)."""
    end = time.monotonic() + SETTLE_S
    prev = read_row(mnt, job)
    while True:
        time.sleep(POLL_S)
        row = read_row(mnt, job)
        if row == prev and row["read_bytes"] >= want_bytes:
            return row
        if time.monotonic() > end:
            return row
        prev = row


def check(mnt, job, before, trial):
    after = settled_row(mnt, job, before["read_bytes"] + 0.9 * trial["bytes"])
    d = {k: after[k] - before[k] for k in FIELDS}
    tool_bytes, opened, partial = trial["bytes"], trial.get("opened_bytes", 0), trial.get("partial_files", 0)
    secs = trial["wall_s"] - trial.get("staging_s", 0)
    est = d["read_bytes_estimated"] > 0
    got = d["read_bytes"]
    bad = []
    if not est and not partial:
        rule = "exact"
        ok = got == tool_bytes
    elif not est:
        rule = "exact, files read in part: read .. opened"
        ok = tool_bytes <= got <= opened
    else:
        rule = "estimated: within 10 %"
        ok = abs(got - tool_bytes) <= BYTES_EST_TOL * tool_bytes
        if not ok and partial and tool_bytes <= got <= opened:
            rule, ok = "estimated, files read in part: read .. opened", True
    if not ok:
        bad.append(f"bytes {got} vs the tool's {tool_bytes} ({rule}; opened {opened})")
    sfs_stall = d["stall_ns"] / d["active_ns"] if d["active_ns"] > 0 else None
    tool_stall = trial["reader_stall"]
    act = trial["reader_active_s"]
    tool_blocked = min(1.0, trial["reader_blocked_s"] / act) if act > 0 else 0.0
    if sfs_stall is None:
        bad.append("stagefs counted no active time: its stall share is undefined")
    elif d["cache_misses"] == 0:
        if sfs_stall > STALL_TOL:
            bad.append(f"stall share {sfs_stall:.3f} with no READ missing the cache (more than 5 points)")
    elif sfs_stall < tool_stall - STALL_TOL:
        bad.append(f"stall share {sfs_stall:.3f} below the tool's lost share {tool_stall:.3f} (by more than 5 points)")
    elif sfs_stall > tool_blocked + STALL_TOL:
        bad.append(f"stall share {sfs_stall:.3f} above the tool's blocked share {tool_blocked:.3f} (by more than 5 points)")
    v = {
        "agree": not bad,
        "why": bad,
        "bytes_rule": rule,
        "stagefs": {"bytes": got, "bytes_estimated": d["read_bytes_estimated"],
                    "passthrough_bytes": d["passthrough_read_bytes"],
                    "mb_per_s": got / secs / 1e6 if secs > 0 else 0,
                    "stall_s": d["stall_ns"] / 1e9, "active_s": d["active_ns"] / 1e9,
                    "stall": sfs_stall, "files_read": d["files_read"],
                    "accounting": after["passthrough_accounting"]},
        "tool": {"bytes": tool_bytes, "opened_bytes": opened, "partial_files": partial,
                 "mb_per_s": tool_bytes / secs / 1e6 if secs > 0 else 0,
                 "blocked_s": trial["reader_blocked_s"], "lost_s": trial["reader_lost_s"],
                 "active_s": act, "stall": tool_stall, "blocked": tool_blocked},
    }
    return v


def line(v):
    s, t = v["stagefs"], v["tool"]
    st = "-" if s["stall"] is None else f"{s['stall']:.3f}"
    return (f"stagefs {s['mb_per_s']:6.1f} MB/s {s['bytes'] / 1e6:8.1f} MB"
            f"{' (est.)' if s['bytes_estimated'] else ' (exact)'} stall {st}"
            f" ({s['stall_s']:.1f} of {s['active_s']:.1f} s)"
            f" | tool {t['mb_per_s']:6.1f} MB/s {t['bytes'] / 1e6:8.1f} MB stall {t['stall']:.3f}"
            f"..{t['blocked']:.3f} (lost {t['lost_s']:.1f}, blocked {t['blocked_s']:.1f} of {t['active_s']:.1f} s)"
            f" | {'agree' if v['agree'] else 'DISAGREE: ' + '; '.join(v['why'])}")


def main(argv):
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    if len(argv) == 3 and argv[0] == "row":
        print(json.dumps(settled_row(argv[1], argv[2])))
        return 0
    if len(argv) == 5 and argv[0] == "check":
        try:
            before, trial = json.loads(argv[3]), json.loads(argv[4])
        except ValueError as e:
            die(f"aubench_agree: BEFORE or TRIAL is not JSON: {e}")
        v = check(argv[1], argv[2], before, trial)
        print(json.dumps(v) if as_json else line(v))
        return 0 if v["agree"] else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
