#!/usr/bin/env python3
"""Sums the generative checker's run lines (target/tmp/generative.txt) per backend and mode.

A soak writes one line per run (a backend, a fault, a seed); this prints one Markdown row per
backend and mode with the totals over its faults, for docs/FAULTS.md. Usage:

    scripts/generative-summary.py [target/tmp/generative.txt]
"""

import re
import sys
from collections import OrderedDict

LINE = re.compile(
    r"^\[(?P<label>.+?) / (?P<fault>.+?)(?: / (?P<keys>\d+) keys)? seed=(?P<seed>\d+)\] "
    r"(?P<ops>\d+) operations, (?P<holds>\d+) holds in (?P<time>[\d.]+)(?P<unit>ms|s|µs) "
    r"\((?P<strikes>\d+) strikes; mix [\d/]+\): violations (?P<violations>\d+), untold (?P<untold>\d+), "
    r"unseen (?P<unseen>\d+), lost updates (?P<lost_updates>\d+), non-increasing (?P<non_incr>\d+), "
    r"(?:repeated fences (?P<repeated>\d+), fence regressions (?P<regressions>\d+), )?lost holds (?P<lost_holds>\d+), permanent errors (?P<permanent>\d+), key free again after "
    r"(?P<free>None|Some\((?P<free_v>[\d.]+)(?P<free_u>ns|µs|ms|s)\))$"
)
SECONDS = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
SUMMED = ["ops", "holds", "strikes", "violations", "untold", "unseen", "lost_updates", "non_incr",
          "repeated", "regressions", "lost_holds", "permanent"]


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "target/tmp/generative.txt"
    modes: "OrderedDict[str, dict]" = OrderedDict()
    skipped = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = LINE.match(line.strip())
            if not m:
                skipped += 1
                continue
            row = modes.setdefault(m["label"], {k: 0 for k in SUMMED} | {
                "runs": 0, "faults": set(), "time": 0.0, "worst_free": 0.0, "blocked": 0})
            row["runs"] += 1
            row["faults"].add(m["fault"])
            row["time"] += float(m["time"]) * SECONDS[m["unit"]]
            for k in SUMMED:
                # Lines written before the checker counted fence repeats have none.
                row[k] += int(m[k] or 0)
            if m["free"] == "None":
                row["blocked"] += 1
            else:
                row["worst_free"] = max(row["worst_free"], float(m["free_v"]) * SECONDS[m["free_u"]])
    print("| backend and mode | runs | faults | operations | holds | time | strikes | violations | untold "
          "| unseen | lost updates | non-incr. | repeated fences | fence regressions | lost holds | "
          "permanent errors | key blocked after | slowest free again |")
    print("|---" * 18 + "|")
    for label, r in modes.items():
        print(f"| {label} | {r['runs']} | {len(r['faults'])} | {r['ops']:,} | {r['holds']:,} | "
              f"{r['time'] / 60:.1f} min | {r['strikes']:,} | {r['violations']} | {r['untold']} | "
              f"{r['unseen']} | {r['lost_updates']} | {r['non_incr']} | {r['repeated']} | "
              f"{r['regressions']} | {r['lost_holds']:,} | "
              f"{r['permanent']} | {r['blocked']} | {r['worst_free'] * 1000:.1f} ms |")
    if skipped:
        print(f"\n({skipped} lines not run reports: primitives' lines or others, not summed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
