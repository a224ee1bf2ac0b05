"""License permissions: the built-in table, the config's entries, and the policy's verdicts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tokenmill.cli import demo_config_path
from tokenmill.config import load_config
from tokenmill.data import licenses
from tokenmill.data.config import CurateConfig, LicensePolicy, LicenseSpec, SourceConfig


def _cfg(*license_ids: str, **kw) -> CurateConfig:
    sources = [SourceConfig(path=f"/data/s{i}", bucket="web", license=lic) for i, lic in enumerate(license_ids)]
    return CurateConfig(sources=sources, **kw)


def test_builtin_table_unknown_grants_nothing_and_nc_is_not_commercial():
    t = licenses.BUILTIN
    unknown = t["unknown"]
    assert not (unknown.training or unknown.redistribution or unknown.commercial_use)
    assert t["CC-BY-NC-4.0"].training and not t["CC-BY-NC-4.0"].commercial_use
    assert t["CC-BY-SA-4.0"].share_alike and not t["CC-BY-4.0"].share_alike
    assert not t["CC0-1.0"].attribution_required and t["MIT"].attribution_required
    # every built-in open license grants training and redistribution; only `unknown` does not
    assert [k for k, s in t.items() if not (s.training and s.redistribution)] == ["unknown"]


def test_lookup_is_case_insensitive_and_knows_deprecated_spdx_ids():
    t = licenses.table(CurateConfig())
    assert licenses.lookup(t, "gpl-2.0+") is t["GPL-2.0-or-later"]
    assert licenses.lookup(t, "GPL-3.0") is t["GPL-3.0-only"]
    assert licenses.lookup(t, "cc-by-4.0") is t["CC-BY-4.0"]
    assert licenses.lookup(t, "Proprietary-EULA") is None
    assert licenses.permissions(t, "Proprietary-EULA") is t["unknown"]


def test_config_entries_extend_and_override_the_table():
    mine = LicenseSpec(training=True, redistribution=False, commercial_use=False, attribution_required=True, notice="ours")
    cfg = _cfg("Internal-1", "mit", licenses={"Internal-1": mine, "MIT": mine})
    t = licenses.table(cfg)
    assert t["Internal-1"] is mine and t["MIT"] is mine  # an override under another case replaces the entry
    assert licenses.lookup(t, "internal-1") is mine


def test_license_spec_needs_every_permission_said():
    with pytest.raises(ValidationError, match="commercial_use"):
        LicenseSpec(training=True, redistribution=True, attribution_required=False)


def test_unknown_id_is_an_error_only_with_a_policy():
    licenses.check_sources(_cfg("some free text"))  # old configs: a free-text license still runs (counted as unknown)
    with pytest.raises(ValueError, match=r"curate.sources\[1\] \(/data/s1\): license 'some free text' is not a known"):
        licenses.check_sources(_cfg("MIT", "some free text", license_policy=LicensePolicy(require=["training"])))
    with pytest.raises(ValueError, match="Foo"):
        licenses.check_sources(_cfg("Foo", license_policy=LicensePolicy(bucket_by_permission={"commercial_use": "nc"})))
    mine = LicenseSpec(training=True, redistribution=True, commercial_use=True, attribution_required=False)
    licenses.check_sources(_cfg("Foo", licenses={"foo": mine}, license_policy=LicensePolicy(require=["training"])))


def test_policy_keys_are_checked():
    with pytest.raises(ValidationError):
        LicensePolicy(require=["share_alike"])  # a condition is not a grant
    with pytest.raises(ValidationError):
        LicensePolicy(exclude_if=["training"])
    with pytest.raises(ValidationError):
        LicensePolicy(bucket_by_permission={"commercal_use": "nc"})


def test_verdicts_and_routes():
    t = licenses.BUILTIN
    policy = LicensePolicy(require=["training", "commercial_use"], exclude_if=["share_alike"])
    assert licenses.verdict(t["MIT"], policy) is None
    assert licenses.verdict(t["unknown"], policy) == ("missing_training", "training")
    assert licenses.verdict(t["CC-BY-NC-4.0"], policy) == ("missing_commercial_use", "commercial_use")
    assert licenses.verdict(t["GPL-3.0-only"], policy) == ("has_share_alike", "share_alike")
    route = LicensePolicy(bucket_by_permission={"commercial_use": "nc", "share_alike": "copyleft"})
    assert licenses.routed_bucket(t["CC-BY-NC-SA-4.0"], route) == "nc"  # first listed wins
    assert licenses.routed_bucket(t["GPL-2.0-only"], route) == "copyleft"
    assert licenses.routed_bucket(t["CC0-1.0"], route) is None


def test_shipped_configs_load_and_name_known_licenses():
    from pathlib import Path

    examples = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
    for path in [demo_config_path(), *examples]:
        cfg = load_config(path).curate
        t = licenses.table(cfg)
        for src in cfg.sources:
            assert licenses.lookup(t, src.license) is not None, (path, src.license)
