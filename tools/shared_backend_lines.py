#!/usr/bin/env python3
"""Lines written twice: for each file X.rs in both src/store/postgres/ and
src/store/sqlite/ (but schema.rs, the generated table declarations), for the
demo's pair src/demo/queries/{postgres,sqlite}.rs, and for the protocol
crate's key stores crates/idempotency/src/{postgres,sqlite}.rs, how many meaningful
lines difflib finds in both, in the same order. Meaningful: stripped of
whitespace, neither empty, nor a comment (//, ///, //!), nor only closing or
opening punctuation (braces, brackets, parentheses, commas, semicolons).

Usage: python3 tools/shared_backend_lines.py [ROOT]   (ROOT: a checkout, default .)
Prints one line per pair and the total."""
import difflib
import pathlib
import re
import sys

PUNCT = re.compile(r"^[{}()\[\],;.]*$")


def meaningful(path):
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("//") or PUNCT.match(line):
            continue
        lines.append(line)
    return lines


def shared(a, b):
    matcher = difflib.SequenceMatcher(None, meaningful(a), meaningful(b), autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks())


def main(argv):
    root = pathlib.Path(argv[0] if argv else ".")
    pg, lite = root / "src/store/postgres", root / "src/store/sqlite"
    pairs = [(pg / p.name, p) for p in sorted(lite.glob("*.rs")) if (pg / p.name).exists() and p.name != "schema.rs"]
    demo = root / "src/demo/queries"
    if (demo / "postgres.rs").exists() and (demo / "sqlite.rs").exists():
        pairs.append((demo / "postgres.rs", demo / "sqlite.rs"))
    keys = root / "crates/idempotency/src"
    if (keys / "postgres.rs").exists() and (keys / "sqlite.rs").exists():
        pairs.append((keys / "postgres.rs", keys / "sqlite.rs"))
    total = 0
    for a, b in pairs:
        n = shared(a, b)
        total += n
        print(f"{n:4d}  {a.relative_to(root)} ~ {b.relative_to(root)}")
    print(f"{total:4d}  total")


if __name__ == "__main__":
    main(sys.argv[1:])
