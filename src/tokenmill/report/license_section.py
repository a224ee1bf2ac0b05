"""The report's per-license table: for each license id the curated sources named, its documents read,
kept and removed (by the license policy, by other steps), its bytes read and kept, and the permissions
curation judged it by (`licenses` of curated/_funnel.json; data/licenses.py)."""

from __future__ import annotations

from typing import Any

from tokenmill.report.page import table

PERMISSIONS: tuple[tuple[str, str], ...] = (
    ("training", "training"),
    ("redistribution", "redistribution"),
    ("commercial_use", "commercial"),
    ("attribution_required", "attribution"),
    ("share_alike", "share-alike"),
)
HEADER = ["license", "docs read", "kept", "removed by policy", "removed by other steps", "bytes read", "bytes kept"]


def _flag(perms: dict[str, Any] | None, key: str) -> str:
    if perms is None:
        return "?"
    return "yes" if perms.get(key) else "no"


def _row(license_id: str, c: dict[str, Any]) -> list[Any]:
    perms = c.get("permissions")
    name = license_id if perms is None or perms.get("known", True) else f"{license_id} (not in the table: as unknown)"
    return [
        name,
        c["docs"],
        c["kept"],
        c["removed_by_policy"],
        c["removed_by_other_steps"],
        c["bytes_in"],
        c["bytes_kept"],
        *(_flag(perms, key) for key, _ in PERMISSIONS),
    ]


def license_table(licenses: dict[str, dict[str, Any]] | None) -> str:
    """HTML table of the funnel's per-license counts; empty when the funnel has none (older runs)."""
    if not licenses:
        return ""
    rows = [_row(lic, c) for lic, c in licenses.items()]
    return (
        "<p>Per license (the source's <code>license</code>; bytes read are raw input, bytes kept are curated text; "
        "permissions from <code>curate.licenses</code> or the built-in table):</p>"
        + table(HEADER + [label for _, label in PERMISSIONS], rows)
    )


def license_tokens_table(meta: dict[str, Any] | None) -> str:
    """Documents and tokens per license in the token store (`licenses` of tokens/_meta.json)."""
    per = (meta or {}).get("licenses")
    if not per:
        return ""
    zero = {"docs": 0, "tokens": 0}
    rows = [
        [
            lic,
            s.get("train", zero)["docs"],
            s.get("train", zero)["tokens"],
            s.get("val", zero)["docs"],
            s.get("val", zero)["tokens"],
        ]
        for lic, s in per.items()
    ]
    return "<p>Token store per license:</p>" + table(
        ["license", "train docs", "train tokens", "held-out docs", "held-out tokens"], rows
    )
