"""Text a user reads cites papers, public sources or our docs — never the private source documents the
project was specified from ("seed 002 §2.3" points to nothing a user has). Help, error messages and the
report's HTML are string literals in src/, so scanning the shipped files covers them."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = re.compile(r"\bseeds? ?0\d\d\b|\bDESIGN §|\bDESIGN \"", re.IGNORECASE)
SHIPPED = ("src/tokenmill/**/*.py", "src/tokenmill/**/*.yaml", "src/tokenmill/**/*.txt", "docs/*.md", "examples/**/*")


def _shipped_files() -> list[Path]:
    files = {p for pattern in SHIPPED for p in ROOT.glob(pattern) if p.is_file()}
    return sorted(files | {ROOT / "README.md", ROOT / "BENCHMARKS.md"})


def test_no_user_facing_text_cites_the_private_source_documents() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
        for path in _shipped_files()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not found, "cite the paper, the public source or docs/ instead:\n" + "\n".join(found)


def test_the_scan_sees_the_files_that_hold_help_and_messages() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _shipped_files()}
    assert {"src/tokenmill/cli.py", "src/tokenmill/report/data_section.py", "README.md", "docs/training.md"} <= names
    assert PRIVATE.search("see Seed 002 §2.3") and PRIVATE.search("(seeds 000/001)") and not PRIVATE.search("seed 1234")
