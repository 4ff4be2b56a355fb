#!/usr/bin/env python3
"""Summary of an Nsight Compute SASS stall export (scripts/ncu_stalls.sh): samples per stall reason
over address ranges (offsets from the kernel's first instruction, as cuobjdump -sass prints them)
and the instructions with the most samples.

  python3 scripts/stall_summary.py stalls.csv[.gz] [--range NAME:LO-HI ...] [--top N]
"""
import argparse
import csv
import gzip


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    return rows[start], rows[start + 1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--range", action="append", default=[], help="NAME:LO-HI, hex offsets")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    hdr, data = load(a.csv)
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    col = {h: hdr.index(h) for h in reasons}
    addr, src = hdr.index("Address"), hdr.index("Source")
    base = int(data[0][addr], 16)

    def num(x):
        try:
            return float(x)
        except ValueError:
            return 0.0

    def off(r):
        return int(r[addr], 16) - base

    def samples(r):
        return sum(num(r[col[h]]) for h in reasons)

    total = sum(samples(r) for r in data)
    ranges = [("all", 0, 1 << 40)]
    for spec in a.range:
        name, span = spec.rsplit(":", 1)
        lo, hi = (int(x, 16) for x in span.split("-"))
        ranges.append((name, lo, hi))
    for name, lo, hi in ranges:
        sel = [r for r in data if lo <= off(r) < hi]
        per = {h: sum(num(r[col[h]]) for r in sel) for h in reasons}
        n = sum(per.values()) or 1.0
        top = sorted(per.items(), key=lambda x: -x[1])[:8]
        print(f"{name}: {len(sel)} instructions, {100 * n / total:.1f} % of the samples; "
              + ", ".join(f"{h[6:]} {100 * v / n:.1f}" for h, v in top))
    print(f"top {a.top} instructions (offset, % of all samples, two main reasons):")
    for r in sorted(data, key=lambda r: -samples(r))[:a.top]:
        two = sorted(((num(r[col[h]]), h[6:]) for h in reasons), reverse=True)[:2]
        print(f"  {off(r):05x} {100 * samples(r) / total:5.1f} % {r[src].strip()[:56]:56} "
              f"{two[0][1]} {two[0][0]:.0f}, {two[1][1]} {two[1][0]:.0f}")


if __name__ == "__main__":
    main()
