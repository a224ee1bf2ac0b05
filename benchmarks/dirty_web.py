"""Build a labelled dirty-web corpus (JSONL) from the real corpora, with no download.

Every row is {"id", "text", "kind", "clean", "source"}: an oracle for what a curation pipeline
should keep and what it should drop. The build is deterministic: the same corpora and seed give
the same bytes. Raw material is real text wherever possible; the pools a kind draws from are
disjoint from the pools of the clean kinds, so a junk document never shares a paragraph with a
clean one (a dedup step must not be able to "remove junk" by matching it to clean text, nor
drop clean text as a copy of junk).

Clean kinds (must be kept):
  clean_prose        book passages of ~2,500-4,000 characters cut at paragraph boundaries
                     (books/austen but Northanger Abbey and Persuasion, books/spurgeon-treasury-
                     of-david).
  clean_docs         the main text of real English documentation pages (resiliparse
                     extract_plain_text(html, main_content=True); python3.11-doc without its
                     genindex pages, developers-reference, debian-reference,
                     installation-guide-amd64), cut at a paragraph boundary to at most ~8,000
                     characters.
  mojibake           the main text of other real documentation pages (debian-handbook and
                     installation-guide-i386 in de/es/fr/it/pt(-br), which hold accented
                     letters, and English pages with typographic quotes) encoded as UTF-8 and
                     decoded as cp1252 (latin-1 where cp1252 cannot decode a byte): "Ã©",
                     "â€™". Only pages ftfy repairs back to the original exactly are used; a
                     pipeline must keep them and repair them.

Junk kinds (must be removed):
  boilerplate_only   8-40 lines of one real page's chrome only: the short lines (<= 100
                     characters, no sentence of 9+ words) of its plain text that main-content
                     extraction drops: navigation, tables of contents, "Next", "Previous topic",
                     copyright and theme footers, search boxes.
  keyword_stuffed    one or two real sentences, then 2-3 keywords (real words) stuffed into 20-60
                     ad-copy phrases ("Buy K online", "K cheap", "best K deals", "K K K").
  shop_template      one product-page template (name, price, SKU, colour, size, rating, stock,
                     "Add to cart", shipping and returns lines); only its slots change.
  link_list          40-150 anchor texts of real HTML links, one per line, as bullets or
                     "A | B | C" rows.
  tag_cloud          50-190 real words and link texts as tags, separated by spaces, commas or
                     " · ", some with counts ("debian (12)").
  encoded_blob       base64 of real bytes (zlib-compressed real source files) in 76-column
                     lines, sometimes behind a "data:...;base64," prefix.
  minified_code      a real JavaScript file (code/javascript/lodash) with comments removed and
                     all whitespace runs collapsed onto one line.
  repeated_paragraph one real paragraph repeated 4-15 times.
  shuffled_words     5-20 real sentences whose words are shuffled across the passage while each
                     sentence keeps its length, capital first letter, commas and full stop:
                     well-formed sentences of word salad.
  tiny_fragment      1-12 consecutive words of a real sentence or heading.

No two clean documents are near-copies (a page shares under half its word 5-grams with every
earlier one): an oracle of distinct documents, so near-duplicate removal of a clean page is a
loss, not a dedup doing its job.

Held out (`heldout.jsonl`, never in the corpus): more clean_prose passages and clean_docs pages
from the same pools, the text a model trained on any arm is scored on. The reference
(`reference/`, for the perplexity gate and the classifier: "good text" a user would name) comes
from other files of the same kinds, disjoint from both by file: Northanger Abbey and Persuasion;
the maint-guide (en, de) and debian-reference (de, fr) text sources; linux-doc's English .rst
sources. Its de/fr files cover two of the mojibake kind's five languages.

Junk raw material: books/bible-en-web and the English debian-history text (sentences and
paragraphs), reference/wordlists/american-english (words), the real HTML (chrome, link texts),
code/ (bytes to encode, JavaScript to minify).

    python benchmarks/dirty_web.py --corpora /work/real_corpora --out dirty.jsonl [--per-kind 300]
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import sys
import zlib
from pathlib import Path
from typing import Callable, Iterator

import ftfy
from resiliparse.extract.html2text import extract_plain_text

CLEAN_KINDS = ("clean_prose", "clean_docs", "mojibake")
JUNK_KINDS = ("boilerplate_only", "keyword_stuffed", "shop_template", "link_list", "tag_cloud",
              "encoded_blob", "minified_code", "repeated_paragraph", "shuffled_words", "tiny_fragment")
KINDS = CLEAN_KINDS + JUNK_KINDS

CLEAN_DOC_SITES = ("python3.11-doc", "developers-reference/en", "debian-reference/en", "installation-guide-amd64/en")
REFERENCE_BOOKS = ("northanger-abbey.txt", "persuasion.txt")  # austen novels kept out of the corpus
REFERENCE_SOURCES = ("maint-guide-txt/en.txt", "maint-guide-txt/de.txt", "debian-reference-txt/de.txt",
                     "debian-reference-txt/fr.txt")
MOJIBAKE_SITES = tuple(f"debian-handbook/{lang}" for lang in ("de", "es", "fr", "it", "pt-br")) + \
    tuple(f"installation-guide-i386/{lang}" for lang in ("de", "es", "fr", "it", "pt")) + \
    ("debian-handbook/en", "debian-history/en")
MAX_DOC_CHARS = 8000
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


# --------------------------------------------------------------------------- raw material
def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, hard-wrapped lines joined."""
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def _cut(paragraphs: list[str], lo: int, hi: int) -> Iterator[str]:
    """Consecutive paragraphs joined into passages of lo..hi characters."""
    buf: list[str] = []
    for p in paragraphs:
        if len(p) > hi:
            continue
        if sum(map(len, buf)) + len(p) > hi:
            if sum(map(len, buf)) >= lo:
                yield "\n\n".join(buf)
            buf = []
        buf.append(p)
    if sum(map(len, buf)) >= lo:
        yield "\n\n".join(buf)


def _html_pages(corpora: Path, sites: tuple[str, ...]) -> list[Path]:
    pages: list[Path] = []
    for site in sites:
        for p in sorted((corpora / "web_html" / site).rglob("*.html")):
            rel = str(p.relative_to(corpora / "web_html"))
            if "genindex" in p.name or "/translations/" in rel or "py-modindex" in p.name:
                continue  # index pages are lists, not documentation prose
            pages.append(p)
    return pages


def _rel(path: Path) -> str:
    """web_html/<site>/... of a page, its source label."""
    parts = path.parts
    return "/".join(parts[parts.index("web_html"):])


def _main_text(path: Path) -> str:
    """A page's main text, cut at a paragraph boundary to at most MAX_DOC_CHARS."""
    text = extract_plain_text(path.read_text(encoding="utf-8", errors="replace"), main_content=True)
    out, size = [], 0
    for para in re.split(r"\n\s*\n", text.strip()):
        if size + len(para) > MAX_DOC_CHARS and out:
            break
        out.append(para.strip())
        size += len(para) + 2
    return "\n\n".join(out)


def _chrome(path: Path) -> list[str]:
    """Lines of a page's plain text that main-content extraction drops: its page chrome."""
    html = path.read_text(encoding="utf-8", errors="replace")
    main = {line.strip() for line in extract_plain_text(html, main_content=True).splitlines()}
    full = [line.strip() for line in extract_plain_text(html, main_content=False).splitlines()]
    # Short lines only: some sites (debian-handbook) put real prose in sidebars that main-content
    # extraction also drops; a long line or a sentence of 9+ words is content, not chrome.
    return [line for line in full if line and line not in main and re.search(r"\w", line)
            and len(line) <= 100 and not (line.endswith(".") and len(line.split()) > 8)]


def _anchors(path: Path) -> list[str]:
    html = path.read_text(encoding="utf-8", errors="replace")
    found = (" ".join(re.sub(r"<[^>]+>", " ", a).split()) for a in re.findall(r"<a\b[^>]*>(.*?)</a>", html, re.S))
    return [a for a in found if 2 <= len(a) <= 80 and re.search(r"[A-Za-z]", a) and "&" not in a]


class Material:
    """The real text every kind is made of, loaded once, in a fixed order."""

    def __init__(self, corpora: Path) -> None:
        books = corpora / "books"
        austen = [f for f in sorted((books / "austen").glob("*.txt")) if f.name not in REFERENCE_BOOKS]
        prose = [p for f in austen + sorted((books / "spurgeon-treasury-of-david").glob("*.txt"))
                 for p in _paragraphs(f.read_text(encoding="utf-8", errors="replace"))]
        self.prose = list(_cut(prose, 2500, 4000))
        self.doc_pages = _html_pages(corpora, CLEAN_DOC_SITES)
        self.moji_pages = _html_pages(corpora, MOJIBAKE_SITES)
        junk_text = [f.read_text(encoding="utf-8", errors="replace") for f in sorted((books / "bible-en-web").glob("*.txt"))]
        junk_text.append((corpora / "reference/doc-sources/debian-history-txt/en.txt").read_text(encoding="utf-8"))
        self.junk_paragraphs = [p for t in junk_text for p in _paragraphs(t) if 200 <= len(p) <= 1500]
        self.sentences = [s for p in self.junk_paragraphs for s in _SENT.split(p) if 40 <= len(s) <= 300]
        words = (corpora / "reference/wordlists/american-english.txt").read_text(encoding="utf-8").split()
        self.words = [w for w in words if w.isalpha() and w.islower() and 4 <= len(w) <= 12]
        chrome_pages = self.doc_pages[::7] + _html_pages(corpora, ("trafilatura-tests", "debian-handbook/en"))[::3]
        self.chrome_sites = [c for c in (_chrome(p) for p in chrome_pages) if len(c) >= 8]
        self.anchors = sorted({a for p in chrome_pages for a in _anchors(p)})
        self.code_files = sorted((corpora / "code/python/cpython3.11-stdlib").rglob("*.py"))
        self.js_files = [p for p in sorted((corpora / "code/javascript/lodash").glob("*.js")) if p.stat().st_size > 1500]


# --------------------------------------------------------------------------- clean kinds
def _mojibake(text: str) -> str | None:
    """UTF-8 bytes read as cp1252 (latin-1 where cp1252 has no character for a byte); None
    when the text has nothing to garble or ftfy would not restore it exactly."""
    if text.isascii():
        return None
    raw = text.encode("utf-8")
    try:
        garbled = raw.decode("cp1252")
    except UnicodeDecodeError:
        garbled = raw.decode("latin-1")
    return garbled if ftfy.fix_text(garbled) == text else None


class Distinct:
    """Admits a text only when it shares under `max_share` of its word 5-grams with every text
    admitted before (an inverted index of 5-gram hashes: linear in the words)."""

    def __init__(self, max_share: float = 0.5) -> None:
        self.max_share = max_share
        self.index: dict[int, list[int]] = {}
        self.n = 0

    def admit(self, text: str) -> bool:
        words = text.split()
        grams = {hash(tuple(words[i:i + 5])) for i in range(max(0, len(words) - 4))}
        shared: dict[int, int] = {}
        for g in grams:
            for j in self.index.get(g, ()):
                shared[j] = shared.get(j, 0) + 1
        if grams and shared and max(shared.values()) >= self.max_share * len(grams):
            return False
        for g in grams:
            self.index.setdefault(g, []).append(self.n)
        self.n += 1
        return True


def _take(pool: Iterator[tuple[str, str]], n: int, distinct: Distinct) -> list[tuple[str, str]]:
    """The first n (source, text) of the pool whose text is no near-copy of one taken before."""
    out: list[tuple[str, str]] = []
    for source, text in pool:
        if len(out) == n:
            break
        if distinct.admit(text):
            out.append((source, text))
    return out


def clean_rows(m: Material, rng: random.Random, n: int, heldout: int = 0
               ) -> tuple[list[tuple[str, str, str, str]], list[dict[str, str]]]:
    """(kind, text, source, original text) for the three clean kinds, n each, all distinct; and
    `heldout` more clean_prose passages and clean_docs pages each, for evaluation only (drawn
    after the corpus's from the same shuffled pools, so disjoint from them)."""
    distinct = Distinct()
    prose = (("books", t) for t in rng.sample(m.prose, len(m.prose)))
    pages = ((_rel(p), _main_text(p)) for p in rng.sample(m.doc_pages, len(m.doc_pages)))
    pages = ((src, t) for src, t in pages if len(t) >= 500)
    moji = ((_rel(p), _main_text(p)) for p in rng.sample(m.moji_pages, len(m.moji_pages)))
    rows = [("clean_prose", t, src, t) for src, t in _take(prose, n, distinct)]
    rows += [("clean_docs", t, src, t) for src, t in _take(pages, n, distinct)]
    made = 0
    for src, text in moji:
        if made == n:
            break
        bad = _mojibake(text) if len(text) >= 500 else None
        if bad and distinct.admit(text):
            made += 1
            rows.append(("mojibake", bad, src, text))
    held = [{"id": f"heldout-prose-{i:04d}", "text": t, "kind": "clean_prose"}
            for i, (_, t) in enumerate(_take(prose, heldout, distinct))]
    held += [{"id": f"heldout-docs-{i:04d}", "text": t, "kind": "clean_docs"}
             for i, (_, t) in enumerate(_take(pages, heldout, distinct))]
    return rows, held


def write_reference(corpora: Path, out: Path) -> list[Path]:
    """Copy the reference files (disjoint from the corpus and the held-out text by file) into
    `out`; linux-doc's English .rst sources go in as one file per source file."""
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in REFERENCE_BOOKS:
        written.append(out / f"austen-{name}")
        written[-1].write_bytes((corpora / "books" / "austen" / name).read_bytes())
    for rel in REFERENCE_SOURCES:
        written.append(out / rel.replace("/", "-"))
        written[-1].write_bytes((corpora / "reference" / "doc-sources" / rel).read_bytes())
    rst_root = corpora / "reference" / "doc-sources" / "linux-doc-rst"
    for f in sorted(rst_root.rglob("*.rst")):
        rel = f.relative_to(rst_root)
        if rel.parts[0] == "translations":
            continue
        written.append(out / ("linux-doc-" + "-".join(rel.parts)[:-4] + ".txt"))
        written[-1].write_bytes(f.read_bytes())
    return written


# --------------------------------------------------------------------------- junk kinds
def boilerplate_only(m: Material, rng: random.Random) -> str:
    lines = rng.choice(m.chrome_sites)
    k = rng.randint(min(8, len(lines)), min(40, len(lines)))
    start = rng.randrange(0, len(lines) - k + 1)
    return "\n".join(lines[start:start + k])


def keyword_stuffed(m: Material, rng: random.Random) -> str:
    keys = rng.sample(m.words, rng.randint(2, 3))
    phrase = " ".join(keys)
    ads = [f"Buy {phrase} online.", f"{phrase.capitalize()} cheap.", f"Best {phrase} deals.",
           f"{phrase} {phrase} {phrase}", f"Top 10 {phrase}.", f"{phrase.capitalize()} near me.",
           f"Discount {phrase} free shipping.", f"{keys[0]} {keys[-1]} {phrase}"]
    body = [rng.choice(ads) for _ in range(rng.randint(20, 60))]
    lead = " ".join(rng.sample(m.sentences, rng.randint(1, 2)))
    return lead + "\n\n" + " ".join(body)


_SHOP = """{name} | {brand} Store

Home > {category} > {name}

{name}
by {brand}
★★★★☆ {rating} ({reviews} reviews)

${price}  (was ${was})  Save {save}%
SKU: {sku}
Colour: {colour}
Size: {size}
Availability: {stock}

Quantity: 1
Add to cart
Add to wishlist

Free shipping on orders over $50. 30-day returns.
Share: Facebook | Twitter | Pinterest | Email

Customers also bought: {also}

© 2026 {brand} Store. All rights reserved. Privacy Policy | Terms of Service | Cookie settings"""


def shop_template(m: Material, rng: random.Random) -> str:
    w = lambda: rng.choice(m.words).capitalize()  # noqa: E731 - a slot filler
    price = rng.randint(5, 400) + rng.choice((0.99, 0.49, 0.0))
    return _SHOP.format(
        name=f"{w()} {w()} {rng.choice(('Pro', 'Max', 'Lite', 'Classic', 'X'))}", brand=w(), category=w(),
        rating=f"{rng.uniform(3, 5):.1f}", reviews=rng.randint(0, 4000), price=f"{price:.2f}",
        was=f"{price * 1.3:.2f}", save=30, sku=f"{rng.randint(10**7, 10**8 - 1)}-{w()[:3].upper()}",
        colour=rng.choice(("Black", "White", "Navy", "Red", "Olive")), size=rng.choice(("S", "M", "L", "XL", "One size")),
        stock=rng.choice(("In stock", "Only 3 left", "Ships in 2-3 days")),
        also=", ".join(f"{w()} {w()}" for _ in range(4)))


def link_list(m: Material, rng: random.Random) -> str:
    links = rng.sample(m.anchors, rng.randint(40, min(150, len(m.anchors))))
    if rng.random() < 0.5:
        return "\n".join(f"{rng.choice(('*', '-', '•'))} {a}" for a in links)
    return "\n".join(" | ".join(links[i:i + 5]) for i in range(0, len(links), 5))


def tag_cloud(m: Material, rng: random.Random) -> str:
    tags = rng.sample(m.words, rng.randint(40, 150)) + rng.sample(m.anchors, rng.randint(10, 40))
    rng.shuffle(tags)
    tags = [f"{t} ({rng.randint(1, 99)})" if rng.random() < 0.3 else t for t in tags]
    return rng.choice((" ", ", ", " · ")).join(tags)


def encoded_blob(m: Material, rng: random.Random) -> str:
    raw = zlib.compress(rng.choice(m.code_files).read_bytes())[: rng.randint(1500, 9000)]
    b64 = base64.b64encode(raw).decode("ascii")
    if rng.random() < 0.5:
        return f"data:image/png;base64,{b64}"
    return "\n".join(b64[i:i + 76] for i in range(0, len(b64), 76))


def minified_code(m: Material, rng: random.Random) -> str:
    src = rng.choice(m.js_files).read_text(encoding="utf-8", errors="replace")
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    src = re.sub(r"(?m)^\s*//.*$", "", src)
    return re.sub(r"\s*([{}();,=:+<>?|&])\s*", r"\1", " ".join(src.split()))


def repeated_paragraph(m: Material, rng: random.Random) -> str:
    return "\n\n".join([rng.choice(m.junk_paragraphs)] * rng.randint(4, 15))


def shuffled_words(m: Material, rng: random.Random) -> str:
    """Real sentences' words shuffled across the passage; each sentence keeps its length, its
    commas (after the same word positions), a capital first letter and its full stop."""
    start = rng.randrange(0, len(m.sentences) - 20)
    sentences = [s.split() for s in m.sentences[start:start + rng.randint(5, 20)]]
    pool = [re.sub(r"[^\w'-]", "", w).lower() for s in sentences for w in s]
    pool = [w for w in pool if w] or ["word"]
    rng.shuffle(pool)
    out, it = [], iter(pool * 2)
    for s in sentences:
        words = [next(it) + ("," if w.endswith(",") else "") for w in s]
        words[0] = words[0].capitalize()
        out.append(" ".join(words).rstrip(",") + ".")
    return " ".join(out)


def tiny_fragment(m: Material, rng: random.Random) -> str:
    words = rng.choice(m.sentences + m.anchors).split()
    k = rng.randint(1, min(12, len(words)))
    start = rng.randrange(0, len(words) - k + 1)
    return " ".join(words[start:start + k])


JUNK: dict[str, Callable[[Material, random.Random], str]] = {
    f.__name__: f for f in (boilerplate_only, keyword_stuffed, shop_template, link_list, tag_cloud,
                            encoded_blob, minified_code, repeated_paragraph, shuffled_words, tiny_fragment)}


# --------------------------------------------------------------------------- the corpus
def build(corpora: Path, per_kind: int = 300, seed: int = 41, heldout: int = 0) -> tuple[list[dict], list[dict]]:
    """The labelled rows, in a seeded shuffled order (ids `dw-<kind>-<n>`; `_original` holds a
    clean row's text before any garbling, the oracle for repair; write_jsonl leaves it out), and
    the held-out clean rows (ids `heldout-<prose|docs>-<n>`)."""
    m = Material(corpora)
    rng = random.Random(seed)
    rows: list[dict] = []
    counts: dict[str, int] = {}

    def add(kind: str, text: str, source: str, original: str | None) -> None:
        counts[kind] = counts.get(kind, 0) + 1
        rows.append({"id": f"dw-{kind}-{counts[kind]:04d}", "text": text, "kind": kind,
                     "clean": kind in CLEAN_KINDS, "source": source, "_original": original})

    clean, held = clean_rows(m, rng, per_kind, heldout)
    for kind, text, source, original in clean:
        add(kind, text, source, original)
    for kind, make in JUNK.items():
        for _ in range(per_kind):
            add(kind, make(m, rng), "synthetic:" + kind, None)
    rng.shuffle(rows)
    return rows, held


def write_jsonl(rows: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({k: v for k, v in row.items() if not k.startswith("_")}, ensure_ascii=False) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpora", type=Path, default=Path("/work/real_corpora"), help="Real corpora root.")
    ap.add_argument("--out", type=Path, required=True, help="JSONL file to write.")
    ap.add_argument("--per-kind", type=int, default=300, help="Documents per kind.")
    ap.add_argument("--seed", type=int, default=41, help="Seed of every random choice.")
    ap.add_argument("--heldout", type=int, default=0, help="Held-out clean passages and pages (each) to write beside OUT.")
    ap.add_argument("--reference", type=Path, default=None, help="Directory to copy the reference files into.")
    args = ap.parse_args()
    if not (args.corpora / "books").is_dir():
        print(f"{args.corpora}: not a real-corpora root (shared/corpora/fetch_real_corpora.sh)", file=sys.stderr)
        return 2
    rows, held = build(args.corpora, args.per_kind, args.seed, args.heldout)
    write_jsonl(rows, args.out)
    print(f"{len(rows)} documents, {len(KINDS)} kinds -> {args.out}")
    if held:
        write_jsonl(held, args.out.with_name("heldout.jsonl"))
        print(f"{len(held)} held-out clean documents -> {args.out.with_name('heldout.jsonl')}")
    if args.reference:
        print(f"{len(write_reference(args.corpora, args.reference))} reference files -> {args.reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
