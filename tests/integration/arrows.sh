#!/usr/bin/env bash
# The house's arrows: src/ includes nothing from outside src/ (and no FUSE header), prefetch/ only src/, gpudirect/ slurm/ tools/ never fuse/ or prefetch/, nothing includes tests/; and no two C files call each other round a circle, except the one inside src/cache/ that cache_i.h documents.
# SPDX-License-Identifier: Apache-2.0
. "$(dirname "$0")/../lib.sh"
command -v git >/dev/null || skip "no git"
git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1 || skip "$REPO is not a git checkout (the file list comes from git ls-files)"
cd "$REPO"
"$PYTHON" - <<'PY' || die "the arrows (above)"
import os, re, subprocess, sys

files = [f for f in subprocess.run(["git", "ls-files"], capture_output=True, text=True).stdout.split()
         if f.endswith((".c", ".h")) and not f.startswith(("tests/", "fuse/bpf/"))]
bad = []

def strip(s):
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    s = re.sub(r"//[^\n]*", "", s)
    return re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', s)

def resolve(src, name):
    for base in (os.path.dirname(src), "src", "."):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.exists(p):
            return p
    return None

# 1. includes: which top folder may include which
may = {
    "src": {"src"},
    "prefetch": {"prefetch", "src"},
    "fuse": {"fuse", "prefetch", "src"},
    "gpudirect": {"gpudirect", "src"},
    "slurm": {"slurm", "src"},
    "tools": {"tools", "src", "gpudirect"},
}
nincl = 0
for f in files:
    top = f.split("/")[0]
    text = open(f).read()
    if top == "src" and re.search(r"#include\s*<fuse", text):
        bad.append(f"{f}: src/ includes a FUSE header")
    for m in re.finditer(r'#include "([^"]+)"', text):
        t = resolve(f, m.group(1))
        if not t:
            continue
        nincl += 1
        # configure's outputs at the top (config.h is force-included;
        # version.h is included by the files that print the version)
        if t in ("config.h", "version.h"):
            continue
        ttop = t.split("/")[0]
        if ttop not in may.get(top, {top}):
            bad.append(f"{f} includes {t}: {top}/ may not use {ttop}/")

# 2. calls between files: the strongly connected parts of "file A calls a
# function file B defines"
srcs = {f: strip(open(f).read()) for f in files if f.endswith(".c")}
defs = {}
for f, s in srcs.items():
    for m in re.finditer(r"^(?!static)[a-z_][\w \*]*?\b(\w+)\([^;{]*\)\s*\{", s, re.M):
        defs.setdefault(m.group(1), f)
g = {}
for f, s in srcs.items():
    for name in set(re.findall(r"\b(\w+)\s*\(", s)):
        t = defs.get(name)
        if t and t != f:
            g.setdefault(f, set()).add(t)
sys.setrecursionlimit(10000)
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in g.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(sorted(comp))
for v in list(g):
    if v not in index:
        visit(v)
allowed = {"src/cache/"}
for comp in sccs:
    dirs = {os.path.dirname(f) + "/" for f in comp}
    if len(dirs) == 1 and dirs <= allowed:
        print("the designed circle:", " ".join(comp))
        continue
    bad.append("a circle of calls: " + " -> ".join(comp))
if not os.path.exists("src/cache/cache_i.h") or "THE ONE CIRCLE" not in open("src/cache/cache_i.h").read():
    bad.append("src/cache/cache_i.h does not document its circle")
print(f"{len(files)} files, {nincl} includes, {sum(len(v) for v in g.values())} file-to-file call arrows")
if bad:
    print("\n".join(bad))
    sys.exit(1)
PY
log "ok: the arrows run one way"
