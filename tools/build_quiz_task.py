"""Build src/tokenmill/configs/tasks/quiz_qa.jsonl, the small generative task with known answers
that ships with tokenmill, from bsdgames' quiz(6) data files (BSD-3-Clause).

    python tools/build_quiz_task.py /work/real_corpora/eval/bsdgames-quiz

Capitals of Europe and Asia and the fill-in-the-blank arithmetic file, in tokenmill's generic
JSONL layout {"prompt", "answer": [accepted answers]}. A quiz line is `question:answer`, where
`a|b` lists alternatives, `[a|b]` alternatives inside a word, `{x}` optional text and `\\`
escapes the next character; every expansion of the answer is accepted, the first listed (the
one with the fewest accent marks) is what a few-shot prompt shows. Answers start with a space:
a shot is prompt + first answer verbatim, as lm-evaluation-harness joins them with " ".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "tokenmill" / "configs" / "tasks" / "quiz_qa.jsonl"


def _split_top(text: str, sep: str = "|") -> list[str]:
    """Split at `sep` outside brackets and braces (escapes kept for the expander)."""
    parts, depth, cur, i = [], 0, "", 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur, i = cur + text[i : i + 2], i + 2
            continue
        depth += c in "[{"
        depth -= c in "]}"
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    return parts + [cur]


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at `start`."""
    depth, i = 0, start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        depth += text[i] in "[{"
        depth -= text[i] in "]}"
        if depth == 0:
            return i
        i += 1
    raise ValueError(f"unbalanced brackets in {text!r}")


def expand(text: str, optional_first: bool) -> list[str]:
    """Every string the quiz pattern `text` stands for, in listed order (with `{x}` before
    without it when optional_first)."""
    out: list[str] = []
    for alt in _split_top(text):
        forms = [""]
        i = 0
        while i < len(alt):
            c = alt[i]
            if c == "\\" and i + 1 < len(alt):
                forms, i = [f + alt[i + 1] for f in forms], i + 2
            elif c in "[{":
                end = _closing(alt, i)
                inner = expand(alt[i + 1 : end], optional_first)
                if c == "{":
                    inner = inner + [""] if optional_first else [""] + inner
                forms, i = [f + s for f in forms for s in inner], end + 1
            else:
                forms, i = [f + c for f in forms], i + 1
        out += forms
    return list(dict.fromkeys(out))


def printable(forms: list[str]) -> list[str]:
    """Forms without control characters: quiz spells some letters as terminal overstrikes
    ("o\\b/" for ø), which are no text a model writes."""
    return [f for f in forms if all(ch.isprintable() for ch in f)]


def plain_first(forms: list[str]) -> list[str]:
    """`forms` with the first of those carrying the fewest accent marks (quiz spells é as 'e or e') moved to the front."""
    best = min(range(len(forms)), key=lambda j: (sum(not (ch.isalnum() or ch == " ") for ch in forms[j]), j))
    return [forms[best]] + forms[:best] + forms[best + 1 :]


def quiz_lines(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            q, a = _split_top(line, ":")[:2]
            pairs.append((q, a))
    return pairs


def build(root: Path) -> list[dict]:
    items, seen = [], set()
    for name in ("europe", "asia"):
        for q, a in quiz_lines(root / name):
            country = plain_first(printable(expand(_split_top(q)[0], optional_first=False)))[0]
            if country in seen:  # Russia, Turkey, ... are in both files
                continue
            seen.add(country)
            answers = plain_first(printable(expand(a, optional_first=True)))
            items.append({"prompt": f"Question: What is the capital of {country}?\nAnswer:", "answer": [" " + x for x in answers]})
    for q, a in quiz_lines(root / "arith"):
        q = q if "=" in q else q.replace(" ...", " = ...")  # one line reads "614 - 9 ...:605"
        items.append({"prompt": f"Question: Which number is ... in {q}?\nAnswer:", "answer": [" " + a]})
    return items


def main() -> None:
    items = build(Path(sys.argv[1]))
    OUT.write_text("".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items), encoding="utf-8")
    print(f"{OUT}: {len(items)} items")


if __name__ == "__main__":
    main()
