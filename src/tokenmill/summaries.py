"""A stage's summary as one line a person reads: the few numbers that tell how the stage went, with
thousands separators and units, never a Python dict or list.

The summaries themselves stay dicts: they are what `.stages/<stage>.json`, the `stage_done` event
and `--json` carry for machines. This module only words them for the console, the report's Stages
table and the logs. A key it does not know (a stage that grew a field) is still shown, as
`key value`, so nothing is hidden and nothing prints as `{...}`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Union

# what a summary holds: JSON values (the summaries are written as JSON)
Value = Union[None, bool, int, float, str, list["Value"], Mapping[str, "Value"]]
Summary = Mapping[str, Value]


def count(n: Value) -> str:
    """An integer count with thousands separators (692, 14,506,620); anything else as `plain`."""
    return f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else plain(n)


def size(n: Value) -> str:
    """Bytes with a unit: 512 B, 14.5 MB, 2.0 GB (decimal units, as disks and `ls -h --si` count)."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return plain(n)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def duration(seconds: Value) -> str:
    """0.8 s, 24.4 s, 3 min 5 s, 2 h 4 min."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
        return plain(seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    if m < 60:
        return f"{m} min {s} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


def number(x: Value, digits: int = 3) -> str:
    """A measured float to `digits` decimals (bits per byte, losses, accuracies); ints as counts."""
    if isinstance(x, float) and math.isfinite(x):
        return f"{x:.{digits}f}"
    return count(x)


def plain(v: object) -> str:
    """Any JSON value as words: a mapping as `key value, key value`, a list comma-separated,
    None as `none`, booleans as yes/no. Never a repr with braces, brackets or quotes."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, Mapping):
        return ", ".join(f"{k} {plain(x)}" for k, x in v.items()) or "none"
    if isinstance(v, (list, tuple, set, frozenset)):
        return ", ".join(plain(x) for x in v) or "none"
    return str(v)


def _per_bucket(values: Value, fmt: Callable[[Value], str]) -> str:
    if not isinstance(values, Mapping):
        return plain(values)
    return ", ".join(f"{b} {fmt(v)}" for b, v in values.items())


def _curate(s: Summary) -> list[str]:
    counts = []
    if "docs_in" in s:
        counts.append(f"{count(s['docs_in'])} documents in" + (f" ({size(s['bytes_in'])})" if "bytes_in" in s else ""))
    if "docs_out" in s:
        kept, read = s["docs_out"], s.get("docs_in")
        share = [f"{kept / read:.1%}"] if isinstance(kept, int) and isinstance(read, int) and read > 0 else []
        share += [size(s["bytes_out"])] if "bytes_out" in s else []
        counts.append(f"{count(kept)} kept" + (f" ({', '.join(share)})" if share else ""))
    if "docs_rejected" in s:
        quarantined = s.get("docs_quarantined")
        unread = (
            f" ({count(quarantined)} of them unreadable, quarantined)" if isinstance(quarantined, int) and quarantined else ""
        )
        counts.append(f"{count(s['docs_rejected'])} removed{unread}")
    parts = [", ".join(counts)]
    buckets = s.get("buckets")
    if isinstance(buckets, Mapping) and buckets:
        docs = {b: (v.get("docs_out") if isinstance(v, Mapping) else v) for b, v in buckets.items()}
        parts.append("documents per bucket: " + _per_bucket(docs, count))
    replaced = s.get("pii_replaced")
    if isinstance(replaced, Mapping):  # the pii step rewrote text: say how much (per bucket in _funnel.json)
        parts.append(("PII replaced: " + _per_bucket(replaced, count)) if replaced else "no PII replaced")
    return parts


def _tokenizer(s: Summary) -> list[str]:
    parts = []
    if "vocab_size" in s:
        parts.append(f"vocabulary {count(s['vocab_size'])}")
    if "bytes_per_token" in s:
        parts.append("bytes per token: " + _per_bucket(s["bytes_per_token"], lambda v: number(v, 2)))
    if s.get("fast_encoder_identical") is False:
        parts.append("the fast encoder's tokens DIFFER from the tokenizer's")
    return parts


def _tokenize(s: Summary) -> list[str]:
    splits = {b: v for b, v in s.items() if isinstance(v, Mapping) and "train" in v}
    if not splits:
        return []

    def tokens(side: str) -> int:
        return sum(n for v in splits.values() if isinstance(n := v.get(side), int))

    parts = [f"{count(tokens('train'))} training tokens, {count(tokens('val'))} held out"]
    parts.append(
        "per bucket (training / held out): "
        + ", ".join(f"{b} {count(v.get('train'))} / {count(v.get('val'))}" for b, v in splits.items())
    )
    if "encoder" in s:
        parts.append(f"encoder {plain(s['encoder'])}")
    return parts


def _train(s: Summary) -> list[str]:
    counts = [f"{count(s['steps'])} steps"] if "steps" in s else []
    counts += [f"{count(s['tokens'])} tokens"] if "tokens" in s else []
    counts += [f"{count(s['params'])} parameters"] if "params" in s else []
    parts = [", ".join(counts)]
    if "final_loss" in s:
        parts.append(f"final loss {number(s['final_loss'])}")
    if s.get("resumed_from"):
        parts.append(f"resumed from {plain(s['resumed_from'])}")
    return parts


def _eval(s: Summary) -> list[str]:
    parts = []
    bpb, uni = s.get("bpb"), s.get("unigram_bpb")
    if isinstance(bpb, Mapping):
        base = uni if isinstance(uni, Mapping) else {}
        cells = [f"{b} {number(v)}" + (f" (unigram {number(base[b])})" if b in base else "") for b, v in bpb.items()]
        parts.append(("step " + count(s["step"]) + ", " if "step" in s else "") + "bits per byte: " + ", ".join(cells))
    if isinstance(s.get("tasks"), Mapping):
        parts.append("accuracy: " + _per_bucket(s["tasks"], number))
    if isinstance(s.get("bpb_by_position"), Mapping):
        parts.append("bits per byte by position: " + _per_bucket(s["bpb_by_position"], number))
    if "passkey" in s:
        parts.append(f"passkey {number(s['passkey'])}")
    if "flagged" in s:
        flagged = s["flagged"]
        parts.append("contamination flagged in " + plain(flagged) if flagged else "no contamination flagged")
    return parts


def _report(s: Summary) -> list[str]:
    parts = [plain(s["path"])] if "path" in s else []
    if s.get("tensorboard"):
        parts.append(f"TensorBoard scalars in {plain(s['tensorboard'])}")
    if s.get("warning"):
        parts.append(f"warning: {plain(s['warning'])}")
    return parts


# per stage: its wording, and the keys it covers (the others follow as `key value`)
_STAGES: dict[str, tuple[Callable[[Summary], list[str]], frozenset[str]]] = {
    "curate": (
        _curate,
        frozenset(
            {"docs_in", "bytes_in", "docs_out", "bytes_out", "docs_rejected", "docs_quarantined", "buckets", "pii_replaced"}
        ),
    ),
    "tokenizer": (_tokenizer, frozenset({"vocab_size", "tokenizer_sha256", "bytes_per_token", "fast_encoder_identical"})),
    "tokenize": (_tokenize, frozenset({"encoder"})),
    "train": (_train, frozenset({"steps", "tokens", "final_loss", "params", "resumed_from"})),
    "eval": (_eval, frozenset({"step", "bpb", "unigram_bpb", "tasks", "passkey", "flagged", "bpb_by_position"})),
    "report": (_report, frozenset({"path", "tensorboard", "warning"})),
}


def summary_line(stage: str, summary: Summary) -> str:
    """One line for a person: `692 documents in (14.5 MB), 640 kept (92.5%, 8.6 MB), 52 removed;
    documents per bucket: web 400, code 240; 24.4 s`. A stage or key this module does not know is shown as
    `key value`; `seconds` comes last, as a duration."""
    words, known = _STAGES.get(stage, (lambda s: [], frozenset()))
    parts = words(summary)
    if stage == "tokenize":  # its keys are the buckets: every mapping with a train count is covered
        known = known | {k for k, v in summary.items() if isinstance(v, Mapping) and "train" in v}
    parts += [f"{k.replace('_', ' ')} {plain(v)}" for k, v in summary.items() if k not in known and k != "seconds"]
    line = "; ".join(p for p in parts if p)
    if "seconds" in summary:
        line = f"{line}; {duration(summary['seconds'])}" if line else duration(summary["seconds"])
    return line or "done"
