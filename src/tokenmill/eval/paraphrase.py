"""A labelled set for the semantic contamination check: paraphrases of benchmark items planted in
real training text, to measure its precision and recall (and the 13-gram rule's, on the same set).

A paraphrase rewrites an item the ways contamination usually looks in a crawl: synonyms for
content words (from WordNet 3.0's synsets when its dictionary is given), function words changed,
and the clauses around a comma or "and" swapped. Half of each task's items (seeded) are planted,
paraphrased, inside training documents; the other half are not, and are the hard negatives (the
same task's template and topic). A detector is then scored by precision and recall over the items.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

FUNCTION_SWAPS = {
    "the": "a",
    "a": "the",
    "can": "may",
    "must": "has to",
    "big": "large",
    "small": "little",
    "use": "employ",
    "gives": "returns",
    "shows": "displays",
}
STOP = {
    "the",
    "a",
    "an",
    "of",
    "to",
    "in",
    "and",
    "or",
    "is",
    "are",
    "was",
    "be",
    "it",
    "that",
    "this",
    "for",
    "on",
    "with",
    "as",
    "by",
    "at",
    "from",
    "which",
    "what",
    "who",
    "not",
    "no",
    "do",
    "does",
    "if",
}


def wordnet_synonyms(root: Path) -> dict[str, list[str]]:
    """word → the other one-word lemmas of its synsets, from WordNet 3.0's data.{noun,verb,adj,adv}."""
    out: dict[str, set[str]] = {}
    for pos in ("noun", "verb", "adj", "adv"):
        path = root / f"data.{pos}"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not a WordNet 3.0 dictionary directory (data.{pos} missing)")
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("  "):  # the licence header
                continue
            parts = line.split()
            n = int(parts[3], 16)
            lemmas = [re.sub(r"\(.*\)$", "", parts[4 + 2 * k]).lower() for k in range(n)]
            single = [w for w in lemmas if w.isalpha()]
            for w in single:
                out.setdefault(w, set()).update(x for x in single if x != w)
    return {w: sorted(s) for w, s in out.items() if s}


def paraphrase(text: str, synonyms: dict[str, list[str]], rng: random.Random, p_synonym: float = 0.6) -> str:
    """Synonyms for content words (each with probability p_synonym), a few function words
    swapped, and the two halves around the first ', ' or ' and ' exchanged."""

    def swap(m: re.Match) -> str:
        w = m.group(0)
        low = w.lower()
        if low in STOP and low in FUNCTION_SWAPS:
            new = FUNCTION_SWAPS[low]
        elif low not in STOP and len(low) > 3 and low in synonyms and rng.random() < p_synonym:
            new = rng.choice(synonyms[low])
        elif low in FUNCTION_SWAPS and rng.random() < 0.5:
            new = FUNCTION_SWAPS[low]
        else:
            return w
        return new.capitalize() if w[0].isupper() else new

    out = re.sub(r"[A-Za-z]+", swap, text)
    for sep in (", ", " and "):
        head, found, tail = out.partition(sep)
        if found and len(head.split()) >= 3 and len(tail.split()) >= 3:
            tail = tail.rstrip(".?! ")
            out = f"{tail[0].upper()}{tail[1:]}{sep}{head[0].lower()}{head[1:]}."
            break
    return out


def plant(
    items: dict[str, list[str]],
    docs: list[tuple[str, str]],
    synonyms: dict[str, list[str]],
    seed: int,
    share: float = 0.5,
    rewrite: bool = True,
) -> tuple[list[tuple[str, str]], dict[str, list[bool]], dict[str, dict[int, str]]]:
    """(documents with paraphrases planted, per task which items were planted, the paraphrases).
    Each planted paraphrase goes after a random sentence end of a random document; with
    rewrite=False the items themselves are planted (the verbatim control)."""
    rng = random.Random(seed)
    docs = list(docs)
    spans: dict[int, list[tuple[int, int]]] = {}  # planted (start, end) per document: never cut into
    labels: dict[str, list[bool]] = {}
    texts: dict[str, dict[int, str]] = {}
    for name, task in items.items():
        chosen = set(rng.sample(range(len(task)), round(share * len(task))))
        labels[name] = [i in chosen for i in range(len(task))]
        texts[name] = {}
        for i in sorted(chosen):
            para = paraphrase(task[i], synonyms, rng) if rewrite else task[i]
            texts[name][i] = para
            k = rng.randrange(len(docs))
            doc_id, text = docs[k]
            taken = spans.setdefault(k, [])
            cuts = [c for c in (m.end() for m in re.finditer(r"[.!?]\s", text)) if not any(a < c < b for a, b in taken)]
            at = rng.choice(cuts or [len(text)])
            insert = f"{para} "
            docs[k] = (doc_id, f"{text[:at]}{insert}{text[at:]}")
            spans[k] = [(a + len(insert), b + len(insert)) if a >= at else (a, b) for a, b in taken]
            spans[k].append((at, at + len(para)))
    return docs, labels, texts


def precision_recall(scores: list[float], labels: list[bool], threshold: float) -> dict[str, float]:
    flagged = [s >= threshold for s in scores]
    tp = sum(f and y for f, y in zip(flagged, labels))
    fp = sum(f and not y for f, y in zip(flagged, labels))
    fn = sum(y and not f for f, y in zip(flagged, labels))
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    return {
        "threshold": threshold,
        "precision": p,
        "recall": r,
        "f1": 2 * p * r / (p + r) if p + r else 0.0,
        "tp": tp,
        "fp": fp,
        "fn": fn,
    }
