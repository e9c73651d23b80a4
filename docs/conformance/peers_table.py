"""The side-by-side table of docs/conformance.md from peers.sh's reports:
one column per server, one line per row of the checker, a cell giving both
runs (0 ms and 50 ms of work per charge) when they differ, the rows whose
verdict depends on timing marked †. The FAIL and SKIP evidence, bounded,
goes to WORK_DIR/details.md.

    python3 peers_table.py WORK_DIR
"""

import json
import sys
from pathlib import Path

COLUMNS = [
    ("charges atomic", ["charges-atomic"]),
    ("charges key-first", ["charges-key-first"]),
    ("express-idempotency", ["express-0", "express-50"]),
    ("@node-idempotency/nestjs", ["nest-0", "nest-50"]),
    ("fastapi-idempotency-key", ["fastapi-0", "fastapi-50"]),
    ("asgi-idempotency-header", ["asgi-0", "asgi-50"]),
    ("django-idempotency-key", ["django-0", "django-50"]),
]

# Rows whose verdict depends on how the duplicates of one run happened to
# overlap (a 409 for a request in flight to look at, a race window hit): the
# same server can get another verdict on a rerun. One run per cell shows one
# of them, so the row says so.
TIMING = {"concurrent-one-resource", "concurrent-answers", "concurrent-retry-after", "problem-details"}
TIMING_NOTE = (
    "† timing-dependent: the verdict depends on whether duplicates overlapped a request "
    "in flight in that run; a rerun of the same server can differ."
)


def load(work: Path, label: str):
    path = work / f"{label}.json"
    code = (work / f"{label}.code").read_text().strip()
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        report = None
    return report, code


def cell(values: list[str]) -> str:
    if len(set(values)) == 1:
        return values[0]
    return "; ".join(f"{ms} ms: {v}" for ms, v in zip(["0", "50"], values))


def main() -> None:
    work = Path(sys.argv[1])
    runs = {label: load(work, label) for _, labels in COLUMNS for label in labels}
    first = next(r for r, _ in runs.values() if r)
    print("| row | strength | " + " | ".join(name for name, _ in COLUMNS) + " |")
    print("| --- | --- |" + " --- |" * len(COLUMNS))
    for i, row in enumerate(first["rows"]):
        cells = []
        for _, labels in COLUMNS:
            values = []
            for label in labels:
                report, _ = runs[label]
                values.append(report["rows"][i]["result"] if report else "no report")
            cells.append(cell(values))
        mark = " †" if row["id"] in TIMING else ""
        print(f"| `{row['id']}`{mark} | {row['strength']} | " + " | ".join(cells) + " |")
    codes = [cell([runs[label][1] for label in labels]) for _, labels in COLUMNS]
    print("| exit status | | " + " | ".join(codes) + " |")
    print()
    print(TIMING_NOTE)
    with open(work / "details.md", "w") as out:
        for name, labels in COLUMNS:
            for label in labels:
                report, code = runs[label]
                out.write(f"\n## {name} ({label}), exit {code}\n\n")
                if not report:
                    out.write((work / f"{label}.err").read_text()[:500] + "\n")
                    continue
                for row in report["rows"]:
                    if row["result"] != "PASS" or row["evidence"]:
                        out.write(f"- {row['id']} {row['result']}: {row['evidence'][:300]}\n")


if __name__ == "__main__":
    main()
