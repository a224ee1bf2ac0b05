"""Names the PII step replaces, per bucket of text, under the frozen rule of
benchmarks/frozen/pii_private_persons.json (written and committed before the default it judges).

Every collection named there is run through the curate step `pii` exactly as `tokenmill curate`
runs it at its defaults (the step class, a default CurateConfig); HTML pages go through the curate
extractor first. Per bucket it reports documents, words, names replaced, names per 100,000 words
and the first examples in context (after masking, so "Mr. <NAME>" shows what was lost), and the
names on a line with no e-mail, phone or address placeholder (no contact details beside them).

Contact recall (mail and changelogs), with gold made by parsers that are not the detector's code:
  mail        display names of From/To/Cc/Reply-To/Sender, parsed by Python's email package
              (email.message_from_string + email.utils.getaddresses); a name counts as found when it
              no longer appears in the masked message's headers
  changelog   the maintainer name of each Debian changelog trailer line, by the format Debian
              Policy 4.4 gives (" -- NAME <EMAIL>  DATE"); found when " -- NAME <" is gone

    .venv/bin/python benchmarks/record.py benchmarks/results/pii_private.json --result /tmp/pii_private.json -- \
        benchmarks/bench_pii_private.py --corpora ../real_corpora --json /tmp/pii_private.json
"""

from __future__ import annotations

import argparse
import email
import email.utils
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from tokenmill.data.config import CurateConfig  # noqa: E402
from tokenmill.data.document import Doc  # noqa: E402
from tokenmill.data.steps.extract import extract  # noqa: E402
from tokenmill.data.steps.pii import Pii  # noqa: E402

FROZEN = Path(__file__).resolve().parent / "frozen" / "pii_private_persons.json"
EXAMPLES = 8
_TRAILER = re.compile(r"^ -- (?P<name>[^<\n]+?) <[^>\n]+>  ", re.MULTILINE)
_PLACEHOLDER = re.compile(r"<NAME>")
_CONTACT = ("<EMAIL>", "<PHONE>", "<ADDRESS>")


def names_without_contact(masked: str) -> int:
    """<NAME> placeholders on a line with no e-mail, phone or address placeholder: names the policy
    (a private person is marked by contact details beside the name) does not call for."""
    return sum(line.count("<NAME>") for line in masked.splitlines() if not any(c in line for c in _CONTACT))


def _texts(root: Path, spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(relative path, text) of every file of one collection, HTML pages as extracted text."""
    base = root / spec["path"]
    for path in sorted(p for p in base.rglob(spec.get("glob", "*")) if p.is_file()):
        raw = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix in (".html", ".htm"):
            text, _ = extract(raw)
            if not text:
                continue
            raw = text
        yield str(path.relative_to(root)), raw


def _mask(step: Pii, rel: str, text: str) -> tuple[str, dict[str, int]]:
    doc = Doc(id=rel, text=text, source="bench", url=rel, bucket="bench", license="unknown", format="text")
    step.process(doc)
    return doc.text or "", dict(doc.pii)


def _examples(masked: str, rel: str, out: list[str]) -> None:
    for m in _PLACEHOLDER.finditer(masked):
        if len(out) >= EXAMPLES:
            return
        left, right = masked[max(0, m.start() - 40) : m.start()], masked[m.end() : m.end() + 40]
        out.append(f"{rel}: …{left}<NAME>{right}…".replace("\n", " ⏎ "))


def _mail_gold(text: str) -> list[str]:
    msg = email.message_from_string(text)
    fields = [v for k in ("From", "To", "Cc", "Reply-To", "Sender") for v in msg.get_all(k, [])]
    return [n for n, addr in email.utils.getaddresses([str(f) for f in fields]) if re.search(r"[^\W\d_]{2}", n) and "@" not in n]


def _headers(text: str) -> str:
    return text.split("\n\n", 1)[0]


def _recall(kind: str, text: str, masked: str) -> tuple[int, int]:
    """(gold names, names no longer readable where the parser found them)."""
    if kind == "mail":
        gold, head = _mail_gold(text), _headers(masked)
        return len(gold), sum(1 for n in gold if n not in head)
    names = [m.group("name") for m in _TRAILER.finditer(text)]
    return len(names), sum(1 for n in names if f" -- {n} <" not in masked)


def score_bucket(root: Path, step: Pii, bucket: dict[str, Any]) -> dict[str, Any]:
    per: dict[str, Any] = {}
    for spec in bucket["collections"]:
        row = {"documents": 0, "words": 0, "names": 0, "names_without_contact": 0, "addresses": 0, "examples": [], "gold": 0,
               "found": 0}
        for rel, text in _texts(root, spec):
            masked, counts = _mask(step, rel, text)
            row["documents"] += 1
            row["words"] += len(text.split())
            row["names"] += counts.get("name", 0)
            row["addresses"] += counts.get("address", 0)
            row["names_without_contact"] += names_without_contact(masked)
            _examples(masked, rel, row["examples"])
            if spec.get("recall"):
                gold, found = _recall(spec["recall"], text, masked)
                row["gold"] += gold
                row["found"] += found
        row["names_per_100k_words"] = round(1e5 * row["names"] / max(row["words"], 1), 3)
        row["contact_recall"] = round(row["found"] / row["gold"], 4) if row["gold"] else None
        per[spec["path"]] = row
    return per


def verdict(rule: dict[str, Any], buckets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each check of the frozen decision rule, with its measured value and whether it holds."""
    checks = []
    for path in rule["zero_names"]:
        value = next(b[path]["names"] for b in buckets.values() if path in b)
        checks.append({"check": f"names replaced in {path} = 0", "value": value, "holds": value == 0})
    for name in rule["at_most_per_100k"]["buckets"]:
        words = sum(c["words"] for c in buckets[name].values())
        names = sum(c["names_without_contact"] for c in buckets[name].values())
        value = round(1e5 * names / max(words, 1), 3)
        limit = rule["at_most_per_100k"]["limit"]
        checks.append({"check": f"{name}: names without contact details per 100k words <= {limit}", "value": value,
                       "holds": value <= limit})
    for path, limit in rule["contact_recall_at_least"].items():
        value = next(b[path]["contact_recall"] for b in buckets.values() if path in b)
        checks.append({"check": f"{path}: contact recall >= {limit}", "value": value, "holds": value is not None and value >= limit})
    return {"checks": checks, "all_hold": all(c["holds"] for c in checks)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, required=True, help="the real corpora (shared/corpora/fetch_real_corpora.sh)")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args()
    frozen = json.loads(FROZEN.read_text())
    step = Pii(CurateConfig())
    buckets = {name: score_bucket(args.corpora, step, b) for name, b in frozen["evaluation"].items()}
    result = {"frozen": str(FROZEN.relative_to(FROZEN.parents[2])), "pii_kinds": CurateConfig().pii.model_dump(mode="json"),
              "buckets": buckets, "verdict": verdict(frozen["decision_rule"], buckets)}
    for name, b in buckets.items():
        for path, row in b.items():
            recall = "" if row["contact_recall"] is None else f"  contact recall {row['contact_recall']:.3f} of {row['gold']}"
            print(f"{name:14s} {path:40s} {row['documents']:5d} docs {row['words']:9,d} words "
                  f"{row['names']:6d} names ({row['names_per_100k_words']:.1f}/100k){recall}")
    for c in result["verdict"]["checks"]:
        print(f"{'holds' if c['holds'] else 'FAILS':6s} {c['check']}: {c['value']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
