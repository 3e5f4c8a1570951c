"""Where a kernel's instructions and stall samples go, per source line.

Input: the CSV of `ncu -i REPORT --page source --csv --print-source cuda,sass`
for a report taken with `--section SourceCounters --import-source yes` of a
library built with `JAXWARP_NVCC_FLAGS=-lineinfo`. Prints the lines with the
most warp stall samples (a proxy for time) and their share of executed
instructions.

    python experiments/tools/ncu_lines.py source.csv [--top 40]
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
from pathlib import Path


def per_line(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    inst: collections.Counter = collections.Counter()
    stall: collections.Counter = collections.Counter()
    text: dict = {}
    current, cols = "?", None
    with opener(path, "rt") as fh:
        for row in csv.reader(fh):
            if not row:
                continue
            if row[0] == "File Path":
                current = Path(row[1]).name
            elif row[0] == "Line No":
                cols = (row.index("Instructions Executed"),
                        row.index("Warp Stall Sampling (All Samples)"))
            elif cols and row[0].isdigit():
                key = (current, int(row[0]))
                text[key] = row[1].strip()
                try:
                    inst[key] += int(row[cols[0]])
                    stall[key] += int(row[cols[1]])
                except ValueError:  # "-": no SASS on this line
                    pass
    return inst, stall, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    inst, stall, text = per_line(args.csv)
    ti, ts = sum(inst.values()) or 1, sum(stall.values()) or 1
    print(f"instructions executed (warp level) {ti}, stall samples {ts}")
    for key, v in stall.most_common(args.top):
        print(f"stall {100 * v / ts:5.1f}%  inst {100 * inst[key] / ti:5.1f}%  "
              f"{key[0]}:{key[1]}  {text[key][:80]}")


if __name__ == "__main__":
    main()
