"""Build benchmarks/labels/pii_names.jsonl: real text with gold name and address spans, and texts without names.

Sources (shared/corpora/fetch_real_corpora.sh, /work/real_corpora):
  changelog   pii/debian-changelogs: entries ("pkg (version) dist; urgency=" to the " -- " trailer),
              deduplicated (the manpages-* and linux-* files are copies), at most 12 a package.
  copyright   pii/debian-copyright: paragraphs that hold a Copyright field and an e-mail, at most 6 a file.
  mail        pii/email-messages: the header block of each message.
  code        code/*: 3,000-character windows from the middle of files (line 60 on: past the licence
              and author header, which holds names by design).
  dictionary  reference/dictd/gcide entries and reference/wordnet-3.0/data.noun glosses.
  manpage     reference/manpages/en: the DESCRIPTION section.
  address     windows around the street lines of real files (ADDRESSES); only addresses are labelled there.

Gold spans, and where each comes from ("gold" field of a record):
  structural  derived by rule from the format, not by the detector: the text between " -- " and " <"
              of a changelog trailer; the name in a "  [ Name ]" changelog line; on Copyright lines the
              text between the years and "<e-mail>"; in From/To/Cc/Reply-To/Sender headers the quoted
              or bare display name before "<" and the name in parentheses after an address. Holders
              that are organisations were removed by hand (ORGANISATIONS). complete = false: names in
              free text of these records are not labelled, so only recall is read from them.
  hand        HAND_CHANGELOG: 50 changelog entries (hash order, among those whose body names someone
              or says "thanks"/"by"/"from"), read line by line; every person name in the entry is listed,
              free text included ("Thanks to Craig Small", "Patch by ..."); those spans carry "origin": "hand".
              HAND_CREDITS: 40 more entries, outside that sample, whose body credits someone (CREDIT:
              "thanks to", "patch from", "reported by" ...), read the same way. In both, the lines with a
              cue or two capitalised words were read.
              complete = true.
  none        code, dictionary, manpage records: meant to hold no names, but read by hand wherever the
              detector fired, and the real names found there are labelled (HAND_NONAME: WordNet glosses
              of people, gcide quotation sources, an __author__). Only over-removal is read from them:
              names the detector did not fire on were not searched for.

Split: a record's "split" is "heldout" when sha1 of its source file name starts with 0-7, else "tune";
the detector's rules were adjusted on tune records only, and the benchmark reports both.

    .venv/bin/python benchmarks/build_pii_name_labels.py [--root /work/real_corpora] [--out benchmarks/labels/pii_names.jsonl]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Iterator

OUT = Path(__file__).resolve().parent / "labels" / "pii_names.jsonl"
ENTRY_HEAD = re.compile(r"^\S.*\(.*\).*;.*urgency=", re.MULTILINE)
TRAILER = re.compile(r"^ -- (.+?) <[^>\n]*>", re.MULTILINE)
BRACKET = re.compile(r"^[ \t]+\[ (.+?) \][ \t]*$", re.MULTILINE)
YEARS_THEN_MAIL = re.compile(r"(?:\d{4}|\([Cc]\)|©|Copyright:?|,)[ \t]*([^,:<>\d()\"\n]+?)[ \t]*<[^>\n]*@", re.MULTILINE)
PREFIX = re.compile(r"^(?:(?:by|and|©|Dr\.|Mr\.|Prof\.)\s+)+")
HEADER = re.compile(r"^(?:From|To|Cc|Reply-To|Sender):[^\n]*(?:\n[ \t][^\n]*)*", re.MULTILINE | re.IGNORECASE)
QUOTED = re.compile(r"\"([^\"\n]+)\"[ \t]*<")
BARE = re.compile(r"(?:^|[:,])[ \t]*([^\s\"<>,:@()][^\"<>,:@()\n]*?)[ \t]*<[^>\n]*@")
PAREN = re.compile(r"@[\w.-]+[ \t]+\(([^()\n]+)\)")
CUE = re.compile(r"[Tt]hank|\b[Bb]y [A-Z]|\b[Ff]rom [A-Z]|[Pp]atch|[A-Z][a-z]+ [A-Z][a-z]+")

# Copyright holders with an e-mail that are not persons (read from the structural list by hand).
ORGANISATIONS: set[str] = {
    "ASPLINUX", "Crosswire Packaging Team", "Debian Japanese List", "Debian Janitor", "Jenkins",  # groups, bots
    "Dingus Lovers", "Internet Mail Delivery", "Mail Delivery Subsystem", "Sender",  # test-mail lists, daemons, placeholders
}
# Hand-read changelog entries: sha1(entry)[:10] -> the person names in its free text (every occurrence
# is labelled), added to the structural trailer and "[ Name ]" spans. An empty list: read, none found.
HAND_CHANGELOG: dict[str, list[str]] = {
    "0023fea9fe": [], "0086086eb6": [], "038b3ecf28": ["Pascal Hakim"], "03c606c084": [], "045d515f33": [],
    "05073af89b": [], "055a5e041d": [], "055ec7ac3c": [], "05efc8d839": [], "068adfd5ac": [], "0908f196bc": [],
    "0961ab9316": ["Christian Perrier"], "09707c6b19": [], "0a5a7d0346": [], "0a68c5e4af": [], "0ac6d5d70a": [],
    "0b61969d34": [], "0c57e888a8": [], "0cf5257bae": [], "0d20b3bd54": ["William Brioschi"], "0d9039f22f": [],
    "0dd07966fe": ["Ken Bloom", "Kjetil Kjernsmo"], "0dee65f532": ["David Madore"], "0f554dea43": [],
    "1086a46c62": ["Craig Small"], "11a1771e94": [],  # "from Hamm": a Debian release
    "11b893f0ef": ["Reuben Thomas"], "1277e170ad": ["Eric Mackay", "Markus Kolb"], "129d94ed58": ["Milan Hodoscek"],
    "12a48e8992": ["Niko Tyni"], "12e0f5a14b": ["Sebastian Hagen"], "13852e70e7": [], "158ca6fa13": ["Rusty Russell"],
    "166c09627d": [], "17c4ebd80a": [], "17fd41d5c5": [], "188e223f09": [], "18b65518f1": ["Chris Lamb"],
    "1972a1a067": [], "1981c69d09": [], "1a28baa215": [], "1a86ba375d": ["Matt Kraai"], "1aac95bcf2": [],
    "1ab4a964ba": [], "1bddae6259": [], "1c4b525dfc": ["Antonio Terceiro"], "1cbf61066a": [], "1d3d75e326": [],
    "1dc40c6c51": [], "1dfb978ff2": [],  # "Collins Westminster Desk Companion": a book
}
# A second hand-read set: the first 40 (hash order) of the other entries whose body has a credit cue
# (CREDIT), so free-text names are not a handful. Names wrapped over two lines are labelled whole.
CREDIT = re.compile(
    r"[Tt]hanks? (?:to|for)|[Pp]atch (?:from|by)|[Rr]eported by|[Nn]oted by|[Ss]potted by|[Ss]uggested by|[Bb]ased on .* by"
    r"|[Cc]ontributed by|[Pp]rovided by"
)
HAND_CREDITS: dict[str, list[str]] = {
    "228c2ee092": ["Matt Kraai"], "2667ec7d42": ["Pádraig Brady"], "268bfe4d2c": ["Sven Joachim"],
    "290d33cb7b": ["Helmut Grohne"], "2b0fad10db": ["Barack Obama", "Dean Bob", "Joseph Smidt"], "2e1b46dee4": [],
    "343887ecf3": ["Vikas N Kumar", "Vikas"], "363da54030": ["Ben Wong"], "41e73a0f78": ["Joel Stanley"],
    "4440c1f104": ["Cyril Brulebois"], "481871a93e": ["Ben Asselstine"], "4b2dadf399": ["Matthew Wilcox"],
    "4daad2f880": ["Alexandre Ghiti", "Eduard Bloch", "Vincent Smeets", "Mark Hindley"], "504150d9af": ["Igor Khavkine"],
    "5972a2c861": ["Michael Walle"], "59c375df59": ["Steve Langasek"], "5c4672e788": ["Alan Curry"],
    "63df88d551": ["Stuart Lamble"], "64f74e831c": ["Laszlo Boszormenyi"], "69e71f3726": ["Guillem Jover"],
    "6afc35ecfa": ["Andreas Beckmann"], "6d0618da6c": ["David Engel"], "6d76118b12": [], "6ed88cb92c": ["Craig Small"],
    "712cd509eb": ["Manoj Srivastava"], "716c0745f7": ["Petr Salinger"], "726adb82b9": ["Guillaume Rousse"],
    "74bb74aabf": ["Niels Thykier", "Tobias"], "75febc4670": ["Peter Palfrader", "George Miller"],
    "794b495029": ["Matthew Chapman", "Reuben Thomas"], "7c49846e03": [], "7dd0588a97": ["Steve Langasek", "Jakub Wilk"],
    "7efdabcf90": ["Branden Robinson"], "8160728a9f": [], "82dfaa82cf": ["Dean Menezes", "Benoit Sibaud"],
    "83b15a442b": ["Leonardo Rochael Almeida"], "8448529873": ["Malcolm Parsons", "Malcolm"], "8695ce8656": ["Mike Hommey"],
    "8ad84b7618": ["Sven Joachim"], "8af16f60d2": ["Andreas Jochens"],
}
# Real names found by hand in code / dictionary / manpage records: record key -> names.
HAND_NONAME: dict[str, list[str]] = {
    "code/python/cpython3.11-stdlib/json/__init__.py": ["Bob Ippolito"],  # __author__
    "gcide:Work": ["K.", "J.", "W."],  # "--Sir K.\n  Digby": quotation sources, wrapped
    "gcide:Sisters of Mercy": ["T."],
    "gcide:Hussar": ["King Matthais"],
    "gcide:Jehad": ["James Bryce"],
    "wordnet:40": ["Henry Ford"],
    "wordnet:360": ["King Arthur", "Anne Sullivan", "Helen Keller"],
    "wordnet:440": ["Robert Walpole"],
    "wordnet:480": ["Erle Stanley Gardner"],
    "wordnet:640": ["Jessica Tandy"],
    "wordnet:760": ["Gary Kasparov", "Douglas Elton Fairbanks"],
    "wordnet:840": ["Andrew Jackson", "William Herschel", "George Washington"],
    "wordnet:960": ["Hume Cronyn"],
    "wordnet:1080": ["Richard Rodgers"],
}


# Every file of pii/, code/, reference/manpages/en and reference/doc-sources where ADDRESS_GREP (a plain street /
# PO box pattern, not the detector) finds a street line, with the hand-read personal or example addresses
# in it; organisation addresses (the FSF's in GPL headers, CNRI's and BeOpen's in the Python licence)
# are left unlabelled: they locate no person, and the detector must leave them.
ADDRESS_GREP = re.compile(
    r"\b\d{1,5} [A-Z][a-z]+(?: [A-Z][a-z]+)? (?:Street|St\.?|Avenue|Ave\.?|Road|Rd\.?|Boulevard|Blvd\.?|Lane|Drive|Way|Place)\b"
    r"|P\.? ?O\.? Box \d+"
)
ADDRESSES: dict[str, list[str]] = {
    "reference/doc-sources/python3.11-rst/library/re.rst": ["155 Elm Street", "436 Finley Avenue", "662 South Dogwood Way",
                                                          "919 Park Place"],
    "reference/doc-sources/python3.11-rst/library/ssl.rst": ["16 Allen Rd"],
    "code/c/linux-uapi-headers/linux/if_eql.h": ["6803 Whittier Ave", "McLean VA 22101"],
    "reference/doc-sources/python3.11-rst/license.rst": [],
    "pii/debian-copyright/bash.copyright": [],
    "pii/debian-copyright/libpython3.11-minimal.copyright": [],
    "code/perl/perl5.36-modules/Getopt/Long.pm": [],
    "code/perl/perl5.36-modules/AutoSplit.pm": [],
    "code/c/linux-uapi-headers/linux/spi/spidev.h": [],
    "code/c/linux-uapi-headers/linux/hid.h": [],
    "code/c/linux-uapi-headers/linux/dvb/video.h": [],
    "code/c/linux-uapi-headers/mtd/ubi-user.h": [],
}


def address_records(root: Path) -> Iterator[dict[str, Any]]:
    """12-line windows around each street line of the ADDRESSES files; only address spans are labelled."""
    for rel, addresses in ADDRESSES.items():
        lines = (root / rel).read_text(encoding="utf-8", errors="replace").splitlines(True)
        hits = [i for i, ln in enumerate(lines) if ADDRESS_GREP.search(ln)]
        for j, i in enumerate(h for k, h in enumerate(hits) if k == 0 or h - hits[k - 1] > 12):
            text = "".join(lines[max(0, i - 6) : i + 6])
            yield {"text": text, "bucket": "address", "source": rel, "key": f"{rel}#{j}", "split": _split(rel),
                   "gold": "hand", "complete": True, "pii": _spans_of(text, addresses, "address")}


def _sha(s: str) -> str:
    return hashlib.sha1(s.encode("utf-8")).hexdigest()


def _split(source: str) -> str:
    return "heldout" if _sha(Path(source).name)[0] in "01234567" else "tune"


def _spans_of(text: str, names: list[str], kind: str = "name") -> list[dict[str, Any]]:
    """Every occurrence of each name (its words may be split by any white space, a line break too);
    longer names first, and a shorter one inside a longer one ("Vikas" in "Vikas N Kumar") is skipped."""
    spans: list[dict[str, Any]] = []
    for name in sorted(set(names), key=len, reverse=True):
        pattern = r"\s+".join(re.escape(w) for w in name.split(" "))
        for m in re.finditer(rf"(?<!\w){pattern}(?!\w)", text):
            if not any(s["start"] < m.end() and m.start() < s["end"] for s in spans):
                spans.append({"start": m.start(), "end": m.end(), "kind": kind})
    return sorted(spans, key=lambda s: (s["start"], s["end"]))


def _group_spans(text: str, pattern: re.Pattern[str], drop: set[str]) -> list[dict[str, Any]]:
    out = []
    for m in pattern.finditer(text):
        name = PREFIX.sub("", m.group(1).strip())
        if name and name not in drop and any(c.isalpha() for c in name):
            s = m.start(1) + m.group(1).index(name)
            out.append({"start": s, "end": s + len(name), "kind": "name", "origin": "structural"})
    return out


def changelog_entries(root: Path) -> Iterator[tuple[str, str]]:
    seen: set[str] = set()
    for path in sorted((root / "pii/debian-changelogs").iterdir()):
        text = path.read_text(encoding="utf-8", errors="replace")
        starts = [m.start() for m in ENTRY_HEAD.finditer(text)] + [len(text)]
        entries = [text[a:b].strip("\n") + "\n" for a, b in zip(starts, starts[1:])]
        entries = [e for e in entries if len(e) <= 4000 and e not in seen and TRAILER.search(e)]
        seen.update(entries)
        for e in sorted(entries, key=_sha)[:12]:
            yield path.name, e


def credit_entries(root: Path, sampled: set[str]) -> Iterator[tuple[str, str]]:
    """The first 40 (hash order) entries outside the sample whose body credits someone (CREDIT)."""
    seen: set[str] = set()
    found = []
    for path in sorted((root / "pii/debian-changelogs").iterdir()):
        text = path.read_text(encoding="utf-8", errors="replace")
        starts = [m.start() for m in ENTRY_HEAD.finditer(text)] + [len(text)]
        for a, b in zip(starts, starts[1:]):
            e = text[a:b].strip("\n") + "\n"
            if len(e) > 4000 or e in seen or e in sampled or not TRAILER.search(e):
                continue
            seen.add(e)
            body = [ln for ln in e.splitlines()[1:] if not ln.startswith(" -- ") and not BRACKET.match(ln)]
            if any(CREDIT.search(ln) for ln in body):
                found.append((path.name, e))
    yield from sorted(found, key=lambda x: _sha(x[1]))[:40]


def changelog_records(root: Path) -> Iterator[dict[str, Any]]:
    sampled = list(changelog_entries(root))
    hand = {**HAND_CHANGELOG, **HAND_CREDITS}
    for source, entry in [*sampled, *credit_entries(root, {e for _, e in sampled})]:
        key = _sha(entry)[:10]
        rec = {"text": entry, "bucket": "changelog", "source": source, "key": key, "split": _split(source)}
        spans = _group_spans(entry, TRAILER, ORGANISATIONS) + _group_spans(entry, BRACKET, ORGANISATIONS)
        if key in hand:  # free-text names read by hand, marked so their recall is reported apart
            spans += [{**sp, "origin": "hand"} for sp in _spans_of(entry, hand[key])]
        unique: dict[tuple[int, int], dict[str, Any]] = {}
        for sp in spans:  # a trailer name also listed by hand stays structural
            unique.setdefault((sp["start"], sp["end"]), sp)
        spans = sorted(unique.values(), key=lambda s: s["start"])
        if key in hand:
            yield {**rec, "gold": "hand", "complete": True, "pii": spans}
        else:
            yield {**rec, "gold": "structural", "complete": False, "pii": spans}


def copyright_records(root: Path) -> Iterator[dict[str, Any]]:
    for path in sorted((root / "pii/debian-copyright").iterdir()):
        text = path.read_text(encoding="utf-8", errors="replace")
        paras = [p for p in text.split("\n\n") if "Copyright" in p and "@" in p]
        for i, para in sorted(enumerate(paras), key=lambda ip: _sha(ip[1]))[:6]:
            para = para[:4000] + "\n"
            lines = "".join(ln if ln.startswith(("Copyright", " ", "\t")) else " " * len(ln) for ln in para.splitlines(True))
            spans = _group_spans(lines, YEARS_THEN_MAIL, ORGANISATIONS) + _group_spans(lines, QUOTED, ORGANISATIONS)
            spans = sorted({(s["start"], s["end"]): s for s in spans}.values(), key=lambda s: s["start"])
            if spans:
                yield {"text": para, "bucket": "copyright", "source": path.name, "key": f"{path.name}#{i}",
                       "split": _split(path.name), "gold": "structural", "complete": False, "pii": spans}


def mail_records(root: Path) -> Iterator[dict[str, Any]]:
    for path in sorted((root / "pii/email-messages").rglob("*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        head = text.split("\n\n", 1)[0] + "\n"
        spans: list[dict[str, Any]] = []
        for h in HEADER.finditer(head):
            block = h.group()
            for pat in (QUOTED, BARE, PAREN):
                for s in _group_spans(block, pat, ORGANISATIONS):
                    spans.append({**s, "start": s["start"] + h.start(), "end": s["end"] + h.start()})
        spans = sorted({(s["start"], s["end"]): s for s in spans}.values(), key=lambda s: s["start"])
        yield {"text": head, "bucket": "mail", "source": path.name, "key": path.name, "split": _split(path.name),
               "gold": "structural", "complete": False, "pii": spans}


def code_records(root: Path, n: int = 60) -> Iterator[dict[str, Any]]:
    files = sorted((p for p in (root / "code").rglob("*") if p.is_file() and p.stat().st_size > 8000), key=lambda p: _sha(str(p)))
    for path in files[:n]:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines(True)
        text = "".join(lines[60:])[:3000]
        yield _noname("code", path, text)


def _noname(bucket: str, path: Path | str, text: str, key: str | None = None) -> dict[str, Any]:
    key = key or str(path).split("/real_corpora/")[-1]
    return {"text": text, "bucket": bucket, "source": str(path).split("/real_corpora/")[-1], "key": key,
            "split": _split(key), "gold": "none", "complete": True, "pii": _spans_of(text, HAND_NONAME.get(key, []))}


def dictionary_records(root: Path, n: int = 60) -> Iterator[dict[str, Any]]:
    d = root / "reference/dictd/gcide"
    body = gzip.open(d / "gcide.dict.gz", "rb").read()
    b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    dec = lambda s: sum(b64.index(c) * 64**i for i, c in enumerate(reversed(s)))  # noqa: E731
    index = [ln.split("\t") for ln in (d / "gcide.index").read_text(encoding="utf-8", errors="replace").splitlines()]
    index = [row for row in index if len(row) == 3 and not row[0].startswith("00")]
    for word, off, size in sorted(index, key=lambda r: _sha(r[0]))[:n]:
        text = body[dec(off) : dec(off) + dec(size)].decode("utf-8", errors="replace")[:3000]
        yield _noname("dictionary", f"reference/dictd/gcide/{word}", text, key=f"gcide:{word}")
    glosses = (root / "reference/wordnet-3.0/data.noun").read_text(encoding="utf-8", errors="replace").splitlines()
    glosses = [g.split(" | ", 1)[1] for g in glosses if " | " in g]
    for i in range(0, min(len(glosses), n * 40), 40):  # every 40th gloss, 40 glosses a record
        chunk = "\n".join(sorted(glosses, key=_sha)[i : i + 40]) + "\n"
        yield _noname("dictionary", "reference/wordnet-3.0/data.noun", chunk, key=f"wordnet:{i}")
        if i >= 40 * 30:
            break


def manpage_records(root: Path, n: int = 40) -> Iterator[dict[str, Any]]:
    pages = sorted((p for p in (root / "reference/manpages/en").rglob("*") if p.is_file()), key=lambda p: _sha(str(p)))
    kept = 0
    for path in pages:
        text = path.read_text(encoding="utf-8", errors="replace")
        m = re.search(r"^\.SH\s+\"?DESCRIPTION\"?\s*$(.*?)(?=^\.SH|\Z)", text, re.MULTILINE | re.DOTALL)
        if not m or len(m.group(1)) < 500:
            continue
        yield _noname("manpage", path, m.group(1)[:3000])
        kept += 1
        if kept >= n:
            return


def build(root: Path) -> list[dict[str, Any]]:
    recs = [*changelog_records(root), *copyright_records(root), *mail_records(root)]
    recs += [*address_records(root), *code_records(root), *dictionary_records(root), *manpage_records(root)]
    return recs


def write(recs: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path("/work/real_corpora"))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    recs = build(args.root)
    write(recs, args.out)
    counts: dict[str, int] = {}
    for r in recs:
        counts[f"{r['bucket']}/{r['gold']}/{r['split']}"] = counts.get(f"{r['bucket']}/{r['gold']}/{r['split']}", 0) + 1
    print(json.dumps({"records": len(recs), "bytes": args.out.stat().st_size, "by": dict(sorted(counts.items()))}))


if __name__ == "__main__":
    main()
