"""Build the word lists the PII step's `name` kind ships with (src/tokenmill/data/steps/resources/).

Nothing is downloaded at run time: the lists are derived once, here, from two Debian word-list
packages fetched by shared/corpora/fetch_real_corpora.sh into /work/real_corpora/reference/wordlists:

  propernames.txt       miscfiles 1.5+dfsg-4 (/usr/share/dict/propernames, inherited from BSD;
                        MANIFEST.tsv lists the collection as "public domain / GPL-2+"): 1,516 given names.
  american-english.txt  wamerican 2020.12.07-2 (SCOWL size 50, Copyright 2000-2014 Kevin Atkinson,
                        permissive licence: use, copy, modify, distribute and sell with the notice kept).

Outputs (one word a line, '#' lines are comments):
  pii_given_names.txt   propernames as is; the step itself treats those that are also English words
                        ("Bill", "Mark", "Will", "Rose") as weaker evidence.
  pii_proper_nouns.txt  the capitalised SCOWL entries (first names, surnames, places): evidence that a
                        capitalised word is a name and not a sentence-initial ordinary word.
  pii_english_words.txt the lower-case SCOWL entries without possessives: "Default", "Value", "Table" at
                        the start of a line are these words capitalised, not names.

    .venv/bin/python benchmarks/build_pii_name_lists.py [--src /work/real_corpora/reference/wordlists]
"""

from __future__ import annotations

import argparse
from pathlib import Path

RESOURCES = Path(__file__).resolve().parents[1] / "src/tokenmill/data/steps/resources"
NOTICE = (
    "# Derived by benchmarks/build_pii_name_lists.py from {src} ({pkg}; {lic}).\n"
    "# SCOWL word lists: Copyright 2000-2014 Kevin Atkinson. Permission to use, copy, modify, distribute and sell\n"
    "# these word lists, the associated scripts, the output created from the scripts, and its documentation for any\n"
    "# purpose is hereby granted without fee, provided that the above copyright notice appears in all copies.\n"
)


def _read(path: Path) -> list[str]:
    return [w.strip() for w in path.read_text(encoding="utf-8", errors="replace").splitlines() if w.strip()]


def build(src: Path, out: Path) -> dict[str, int]:
    given = _read(src / "propernames.txt")
    scowl = [w for w in _read(src / "american-english.txt") if "'" not in w]
    lower = sorted({w for w in scowl if w[0].islower()})
    proper = sorted({w for w in scowl if w[0].isupper() and not w.isupper()})
    given_kept = sorted(set(given))
    files = {
        "pii_given_names.txt": (given_kept, "propernames.txt", "miscfiles 1.5+dfsg-4", "public domain / GPL-2+"),
        "pii_proper_nouns.txt": (proper, "american-english.txt", "wamerican 2020.12.07-2", "SCOWL licence"),
        "pii_english_words.txt": (lower, "american-english.txt", "wamerican 2020.12.07-2", "SCOWL licence"),
    }
    out.mkdir(parents=True, exist_ok=True)
    for name, (words, s, pkg, lic) in files.items():
        (out / name).write_text(NOTICE.format(src=s, pkg=pkg, lic=lic) + "\n".join(words) + "\n", encoding="utf-8")
    return {name: len(words) for name, (words, *_rest) in files.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=Path("/work/real_corpora/reference/wordlists"))
    ap.add_argument("--out", type=Path, default=RESOURCES)
    args = ap.parse_args()
    print(build(args.src, args.out))


if __name__ == "__main__":
    main()
