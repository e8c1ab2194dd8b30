#!/usr/bin/env python3
"""The dependency review that `cargo deny check licenses` would do, offline: every crate that a
published crate of this workspace (or the dlock CLI) links, normal and build dependencies with
every feature on, must carry a license from ALLOWED (an SPDX expression: OR needs one allowed
side, AND needs both). Prints the licenses with their crate counts; exits 1 on a violation.
With `--shipped FILE` it also writes those crates as `name version` lines, for the advisory
check (`crates/advisory-check`, RustSec's database offline)."""
import json
import re
import subprocess
import sys

ALLOWED = {
    "MIT", "Apache-2.0", "Apache-2.0 WITH LLVM-exception", "BSD-2-Clause", "BSD-3-Clause",
    "ISC", "Zlib", "Unicode-3.0", "Unicode-DFS-2016", "CC0-1.0", "BSL-1.0", "Unlicense",
    "0BSD", "MPL-2.0", "CDLA-Permissive-2.0",
}
# Test-only and benchmark crates: what they link is never shipped to a user.
UNSHIPPED = {"lock-testkit", "lock-bench", "advisory-check"}


def allowed(expr: str) -> bool:
    """Evaluates an SPDX expression (also the old `A/B` form) against ALLOWED."""
    tokens = re.findall(r"\(|\)|[^\s()]+(?:\s+WITH\s+[^\s()]+)?", expr.replace("/", " OR "))
    pos = 0

    def parse_or():
        nonlocal pos
        ok = parse_and()
        while pos < len(tokens) and tokens[pos] == "OR":
            pos += 1
            ok = parse_and() or ok
        return ok

    def parse_and():
        nonlocal pos
        ok = parse_atom()
        while pos < len(tokens) and tokens[pos] == "AND":
            pos += 1
            ok = parse_atom() and ok
        return ok

    def parse_atom():
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            ok = parse_or()
            pos += 1  # ")"
            return ok
        return tok in ALLOWED

    return parse_or()


def main() -> int:
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--all-features", "--locked"]))
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    roots = [m for m in meta["workspace_members"] if packages[m]["name"] not in UNSHIPPED]
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid]["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if kinds & {None, "build"}:
                todo.append(dep["pkg"])
    counts, bad = {}, []
    for pid in seen:
        p = packages[pid]
        if p["source"] is None:
            continue  # this workspace
        lic = p.get("license") or ""
        counts[lic] = counts.get(lic, 0) + 1
        if not lic or not allowed(lic):
            bad.append(f'{p["name"]} {p["version"]}: {lic or "no license field"}')
    if "--shipped" in sys.argv:
        out = sys.argv[sys.argv.index("--shipped") + 1]
        names = sorted({f'{packages[p]["name"]} {packages[p]["version"]}' for p in seen if packages[p]["source"]})
        with open(out, "w") as f:
            f.write("\n".join(names) + "\n")
    for lic, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"{n:4}  {lic}")
    print(f"{sum(counts.values())} crates linked by the shipped crates")
    if bad:
        print("not in the allowed list:\n  " + "\n  ".join(sorted(bad)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
