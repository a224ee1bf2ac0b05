"""License permissions: the built-in table, the config's additions, and the policy's verdict per license.

A source names its license by id (`curate.sources[].license`, SPDX where one exists); its permissions
come from `curate.licenses` (the user's entries, which win) or the built-in table below. Lookup is
case-insensitive and knows the deprecated SPDX spellings (GPL-2.0, GPL-2.0+, ...).

Why each built-in entry says what it says (from the license texts; not legal advice, and a user who
reads a license differently overrides its entry under `curate.licenses`):

  training        every open license below grants use "for any purpose" (MIT, BSD, Apache-2.0 §2, PSF-2.0
                  §2, GPL's "run/study/modify" freedoms, GFDL §2) or the CC licenses' reproduction and
                  adaptation rights, which CC's FAQ says cover text and data mining; CC0 and public-domain
                  texts carry no restriction. NC licenses still allow training, just not for commerce.
  redistribution  granted by all of them (under their conditions).
  commercial_use  every license here but the CC NonCommercial ones (CC-BY-NC-4.0 §1(i), 2(a)(1)).
  attribution     MIT, BSD, ISC, Apache-2.0 §4, PSF-2.0 §2 and the GPL/GFDL keep the copyright notice; the
                  CC BY family requires credit (§3(a)); CC0 and public domain do not.
  share_alike     the GPL/LGPL (copyleft on derived works passed on), GFDL §4, CC BY-SA / BY-NC-SA §3(b).
  unknown         grants nothing and assumes every condition: a text of unknown license is not used.

Without a `license_policy` a license id outside the table still loads, as before this table existed
(counted with the permissions of `unknown`); with a policy it is a config error naming the source.
"""

from __future__ import annotations

from typing import Any

from tokenmill.data.config import CurateConfig, LicensePolicy, LicenseSpec

UNKNOWN = "unknown"


def _spec(
    training: bool, redistribution: bool, commercial: bool, attribution: bool, share_alike: bool, notice: str
) -> LicenseSpec:
    return LicenseSpec(
        training=training,
        redistribution=redistribution,
        commercial_use=commercial,
        attribution_required=attribution,
        share_alike=share_alike,
        notice=notice,
    )


# id -> (training, redistribution, commercial_use, attribution_required, share_alike, name)
_TABLE: dict[str, tuple[bool, bool, bool, bool, bool, str]] = {
    "CC0-1.0": (True, True, True, False, False, "Creative Commons Zero 1.0 (public domain dedication)"),
    "public-domain": (True, True, True, False, False, "Public domain (no copyright)"),
    "CC-BY-3.0": (True, True, True, True, False, "Creative Commons Attribution 3.0"),
    "CC-BY-4.0": (True, True, True, True, False, "Creative Commons Attribution 4.0"),
    "CC-BY-SA-3.0": (True, True, True, True, True, "Creative Commons Attribution-ShareAlike 3.0"),
    "CC-BY-SA-4.0": (True, True, True, True, True, "Creative Commons Attribution-ShareAlike 4.0"),
    "CC-BY-NC-4.0": (True, True, False, True, False, "Creative Commons Attribution-NonCommercial 4.0"),
    "CC-BY-NC-SA-4.0": (True, True, False, True, True, "Creative Commons Attribution-NonCommercial-ShareAlike 4.0"),
    "MIT": (True, True, True, True, False, "MIT License"),
    "ISC": (True, True, True, True, False, "ISC License"),
    "BSD-2-Clause": (True, True, True, True, False, "BSD 2-Clause License"),
    "BSD-3-Clause": (True, True, True, True, False, "BSD 3-Clause License"),
    "Apache-2.0": (True, True, True, True, False, "Apache License 2.0"),
    "PSF-2.0": (True, True, True, True, False, "Python Software Foundation License 2.0"),
    "LGPL-2.1-or-later": (True, True, True, True, True, "GNU Lesser GPL 2.1 or later"),
    "GPL-2.0-only": (True, True, True, True, True, "GNU GPL 2.0 only"),
    "GPL-2.0-or-later": (True, True, True, True, True, "GNU GPL 2.0 or later"),
    "GPL-3.0-only": (True, True, True, True, True, "GNU GPL 3.0 only"),
    "GPL-3.0-or-later": (True, True, True, True, True, "GNU GPL 3.0 or later"),
    "GFDL-1.3-only": (True, True, True, True, True, "GNU Free Documentation License 1.3 only"),
    "GFDL-1.3-or-later": (True, True, True, True, True, "GNU Free Documentation License 1.3 or later"),
    UNKNOWN: (False, False, False, True, True, "Unknown license: nothing granted"),
}
BUILTIN: dict[str, LicenseSpec] = {k: _spec(*v) for k, v in _TABLE.items()}
# Deprecated SPDX ids and common spellings -> the id above they mean.
ALIASES: dict[str, str] = {
    "GPL-2.0": "GPL-2.0-only",
    "GPL-2.0+": "GPL-2.0-or-later",
    "GPL-3.0": "GPL-3.0-only",
    "GPL-3.0+": "GPL-3.0-or-later",
    "LGPL-2.1+": "LGPL-2.1-or-later",
    "GFDL-1.3": "GFDL-1.3-only",
    "GFDL-1.3+": "GFDL-1.3-or-later",
    "CC0": "CC0-1.0",
    "PD": "public-domain",
}
_FOLDED: dict[str, str] = {k.casefold(): k for k in BUILTIN} | {k.casefold(): v for k, v in ALIASES.items()}


def table(cfg: CurateConfig) -> dict[str, LicenseSpec]:
    """The built-in licenses with the config's entries added or replacing them (same id, any case)."""
    out = dict(BUILTIN)
    for key, spec in cfg.licenses.items():
        out[_FOLDED.get(key.casefold(), key)] = spec
    return out


def lookup(licenses: dict[str, LicenseSpec], license_id: str) -> LicenseSpec | None:
    """The permissions of a license id: exact, then the config's ids in any case, then built-in / alias."""
    if license_id in licenses:
        return licenses[license_id]
    folded = license_id.casefold()
    for key, spec in licenses.items():
        if key.casefold() == folded:
            return spec
    canonical = _FOLDED.get(folded)
    return licenses.get(canonical) if canonical else None


def permissions(licenses: dict[str, LicenseSpec], license_id: str) -> LicenseSpec:
    """A license's permissions; an id not in the table has those of `unknown` (it grants nothing)."""
    return lookup(licenses, license_id) or licenses.get(UNKNOWN) or BUILTIN[UNKNOWN]


def check_sources(cfg: CurateConfig) -> None:
    """With a license policy, every source must name a license the table knows (ValueError naming it)."""
    if not (cfg.license_policy.removes or cfg.license_policy.bucket_by_permission):
        return
    known = table(cfg)
    for i, src in enumerate(cfg.sources):
        if lookup(known, src.license) is None:
            where = src.path if src.kind == "files" else f"python_stdlib:{src.part}"
            raise ValueError(
                f"curate.sources[{i}] ({where}): license {src.license!r} is not a known license id; "
                f"declare it under curate.licenses or use a built-in one ({', '.join(sorted(BUILTIN))})"
            )


def verdict(spec: LicenseSpec, policy: LicensePolicy) -> tuple[str, str] | None:
    """(rule, what) that removes a document of this license under the policy, or None to keep it."""
    for grant in policy.require:
        if not getattr(spec, grant):
            return f"missing_{grant}", grant
    for condition in policy.exclude_if:
        if getattr(spec, condition):
            return f"has_{condition}", condition
    return None


def routed_bucket(spec: LicenseSpec, policy: LicensePolicy) -> str | None:
    """The bucket the policy sends a document of this license to (first matching key), or None."""
    for key, bucket in policy.bucket_by_permission.items():
        is_condition = key in ("attribution_required", "share_alike")
        if getattr(spec, key) == is_condition:  # a grant it lacks, or a condition it sets
            return bucket
    return None


def permissions_row(licenses: dict[str, LicenseSpec], license_id: str) -> dict[str, Any]:
    """What the funnel records beside a license's counts: its permissions, and whether the table knows it."""
    spec = lookup(licenses, license_id)
    shown = spec or permissions(licenses, license_id)
    return {**shown.model_dump(exclude_none=True), "known": spec is not None}
