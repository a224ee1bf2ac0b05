"""The classify step through the real curate stage and CLI: tag, filter, bucket, caching, worker
independence, and clean errors for unusable labelled files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.adversarial.conftest import assert_clean_error, run_cli
from tokenmill.config import ConfigError, load_config
from tokenmill.data.config import CurateConfig
from tokenmill.data.curate import curate
from tokenmill.errors import UserError

VOCAB = {
    "cook": "flour butter oven bake sugar salt whisk simmer garlic onion pan dough".split(),
    "sport": "goal match team score league coach referee season striker pitch ball keeper".split(),
    "code": "def return import class self lambda yield print none true assert raise".split(),
}


def _text(label: str, i: int, n: int = 40) -> str:
    words = VOCAB[label]
    return " ".join(words[(i * 5 + j * 7 + j // 3) % len(words)] for j in range(n))


def _labels(path: Path, classes: tuple[str, ...] = ("cook", "sport", "code"), per: int = 30) -> Path:
    path.write_text("".join(json.dumps({"text": _text(c, i), "label": c}) + "\n" for c in classes for i in range(per)))
    return path


def _inputs(d: Path, per: int = 4) -> Path:
    """One file per document, so two workers really split them."""
    (d / "in").mkdir(parents=True, exist_ok=True)
    for c in VOCAB:
        for i in range(per):
            (d / "in" / f"{c}-{i}.txt").write_text(_text(c, 100 + i, 60) + "\n")
    return d / "in"


def _cfg(d: Path, classify: list[dict], **kw) -> CurateConfig:
    return CurateConfig(
        sources=[{"kind": "files", "path": str(_inputs(d)), "bucket": "web"}],
        steps=["normalize", "classify", "bucket"],
        classify=classify,
        min_chars=50,
        **{"workers": 1, **kw},
    )


def _rows(out: Path, bucket: str) -> list[dict]:
    return sorted(pq.read_table(out / bucket).to_pylist(), key=lambda r: r["id"])


def _report(out: Path) -> dict:
    return json.loads((out / "_classify.json").read_text())


def test_tag_writes_label_and_probabilities_and_metrics(tmp_path):
    _labels(tmp_path / "labels.jsonl")
    out = tmp_path / "out"
    curate(_cfg(tmp_path, [{"name": "topic", "labelled": "labels.jsonl"}]), out, base_dir=tmp_path, progress=False)
    rows = _rows(out, "web")
    assert len(rows) == 12
    for r in rows:
        topic = dict(r["classes"])["topic"]
        probs = dict(topic["probs"])
        assert sorted(probs) == ["code", "cook", "sport"] and abs(sum(probs.values()) - 1) < 1e-9
        assert topic["label"] == max(probs, key=probs.get) == Path(r["url"]).name.split("-")[0]
        assert r["lineage"][-1]["step"] == "classify"
    held = _report(out)["topic"]["held_out"]
    assert held["accuracy"] == 1.0 and held["macro_auc"] == 1.0 and sum(map(sum, held["confusion"])) == held["examples"] > 0
    assert _report(out)["topic"]["label_counts"] == {"code": 30, "cook": 30, "sport": 30}


def test_filter_removes_listed_labels_with_rule_and_score(tmp_path):
    _labels(tmp_path / "labels.jsonl")
    out = tmp_path / "out"
    cfg = _cfg(tmp_path, [{"name": "topic", "labelled": "labels.jsonl", "action": "filter", "remove": ["sport"], "min_probability": 0.5}])
    curate(cfg, out, base_dir=tmp_path, progress=False)
    kept = _rows(out, "web")
    rejected = pq.read_table(out / "_rejected").to_pylist()
    assert len(kept) == 8 and all(dict(r["classes"])["topic"]["label"] != "sport" for r in kept)
    assert len(rejected) == 4 and {r["step"] for r in rejected} == {"classify"} and {r["rule"] for r in rejected} == {"topic:sport"}
    for r in rejected:
        assert float(r["value"]) >= 0.5 and abs(float(r["value"]) - dict(r["classes"])["topic"]["probability"]) < 1e-5


def test_bucket_routes_and_a_matching_bucket_rule_still_overrides(tmp_path):
    _labels(tmp_path / "labels.jsonl")
    out = tmp_path / "out"
    cfg = _cfg(
        tmp_path,
        [{"name": "topic", "labelled": "labels.jsonl", "action": "bucket", "buckets": {"cook": "kitchen", "code": "software"}}],
    )
    summary = curate(cfg, out, base_dir=tmp_path, progress=False)
    assert {b: v["docs_out"] for b, v in summary["buckets"].items()} == {"kitchen": 4, "software": 4, "web": 4}
    assert all(Path(r["url"]).name.startswith("sport") for r in _rows(out, "web"))  # not listed: keeps its bucket
    funnel = json.loads((out / "_funnel.json").read_text())
    assert funnel["buckets"]["web"]["classify"]["docs_in"] == 12  # counted where it was read
    # bucket_rules run last: a matching rule wins over the classifier's bucket
    cfg2 = CurateConfig.model_validate({**cfg.model_dump(), "bucket_rules": [{"bucket": "pinned", "source": f"{tmp_path / 'in'}*"}]})
    summary = curate(cfg2, tmp_path / "out2", base_dir=tmp_path, progress=False)
    assert {b: v["docs_out"] for b, v in summary["buckets"].items()} == {"pinned": 12}


def test_cached_model_is_reused_until_file_or_knobs_change(tmp_path):
    labels = _labels(tmp_path / "labels.jsonl")
    out = tmp_path / "out"  # each rerun replaces the last one's output (overwrite), reusing its model
    spec = {"name": "topic", "labelled": "labels.jsonl", "action": "tag"}
    trained = lambda: _report(out)["topic"]["trained_this_run"]  # noqa: E731
    curate(_cfg(tmp_path, [spec]), out, base_dir=tmp_path, progress=False)
    assert trained() is True
    curate(_cfg(tmp_path, [spec]), out, base_dir=tmp_path, progress=False, overwrite=True)
    assert trained() is False  # same file, same knobs
    filtered = _cfg(tmp_path, [{**spec, "action": "filter", "remove": ["code"]}])
    curate(filtered, out, base_dir=tmp_path, progress=False, overwrite=True)
    assert trained() is False and _report(out)["topic"]["action"] == "filter"  # the action is not part of the model
    curate(_cfg(tmp_path, [{**spec, "epochs": 3}]), out, base_dir=tmp_path, progress=False, overwrite=True)
    assert trained() is True
    labels.write_text(labels.read_text() + json.dumps({"text": _text("cook", 99), "label": "cook"}) + "\n")
    curate(_cfg(tmp_path, [{**spec, "epochs": 3}]), out, base_dir=tmp_path, progress=False, overwrite=True)
    assert trained() is True and _report(out)["topic"]["label_counts"]["cook"] == 31


def test_scores_are_byte_identical_for_one_and_two_workers(tmp_path):
    _labels(tmp_path / "labels.jsonl")
    spec = [{"name": "topic", "labelled": "labels.jsonl", "action": "bucket", "buckets": {"cook": "kitchen"}}]
    for w in (1, 2):
        curate(_cfg(tmp_path, spec, workers=w), tmp_path / f"out{w}", base_dir=tmp_path, progress=False)
    for bucket in ("kitchen", "web"):
        a, b = (pq.read_table(tmp_path / f"out{w}" / bucket).sort_by("id").select(["id", "bucket", "classes"]) for w in (1, 2))
        assert a.num_rows > 0 and a.equals(b)
    assert (tmp_path / "out1" / "_classify" / "topic.npz").read_bytes() == (tmp_path / "out2" / "_classify" / "topic.npz").read_bytes()


def test_config_refuses_repeated_names_and_actions_without_their_fields():
    with pytest.raises(ConfigError, match="unique"):
        load_config(None, ['curate.classify=[{"name": "a", "labelled": "x"}, {"name": "a", "labelled": "y"}]'])
    with pytest.raises(ConfigError, match="needs `remove`"):
        load_config(None, ['curate.classify=[{"name": "a", "labelled": "x", "action": "filter"}]'])
    with pytest.raises(ConfigError, match="needs `buckets`"):
        load_config(None, ['curate.classify=[{"name": "a", "labelled": "x", "action": "bucket"}]'])


def test_a_label_the_file_does_not_have_is_refused(tmp_path):
    _labels(tmp_path / "labels.jsonl")
    spec = {"name": "topic", "labelled": "labels.jsonl", "action": "filter", "remove": ["sports"]}
    with pytest.raises(UserError, match=r"label\(s\) \['sports'\] are not in labels.jsonl; its labels are \['code', 'cook', 'sport'\]"):
        curate(_cfg(tmp_path, [spec]), tmp_path / "out", base_dir=tmp_path, progress=False)


BAD_FILES = {
    "missing": (None, "labelled file not found"),
    "empty": ("", "needs two or more labels"),
    "not_jsonl": ("text,label\nhello,a\n", ":1: not valid JSON"),
    "one_class": ("".join(json.dumps({"text": f"t {i}", "label": "a"}) + "\n" for i in range(5)), "needs two or more labels"),
    "no_label": (json.dumps({"text": "a", "label": "x"}) + "\n" + json.dumps({"text": "b"}) + "\n", ":2: needs a string 'text'"),
    "binary": (b"\xff\xfe\x00garbage", "not UTF-8"),
}


def _write(path: Path, content: str | bytes | None) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_unusable_labelled_file_is_a_user_error_naming_it(tmp_path, case):
    content, message = BAD_FILES[case]
    _write(tmp_path / "labels.jsonl", content)
    with pytest.raises(UserError, match=message) as err:
        curate(_cfg(tmp_path, [{"name": "topic", "labelled": "labels.jsonl"}]), tmp_path / "out", base_dir=tmp_path, progress=False)
    assert str(tmp_path / "labels.jsonl") in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_the_cli_says_it_in_one_line(tmp_path):
    labels = tmp_path / "labels.jsonl"
    _write(labels, BAD_FILES["no_label"][0])
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({"curate": {"classify": [{"name": "topic", "labelled": "labels.jsonl"}]}}))
    result = run_cli(
        "curate", _inputs(tmp_path, 1), "-o", tmp_path / "out", "-c", tmp_path / "run.yaml", "--steps", "normalize,classify", cwd=tmp_path
    )
    assert_clean_error(result, f"{labels}:2: needs a string 'text'")
    assert not (tmp_path / "out").exists()


def test_routed_buckets_feed_the_mixture(tmp_path):
    """curate (bucket action) -> tokenizer -> tokenize -> a mixture whose weights name the routed buckets."""
    from tokenmill.mixture.loader import Loader
    from tokenmill.pipeline import run_pipeline
    from tokenmill.runs import RunDir
    from tokenmill.tokens.store import TokenStore

    _labels(tmp_path / "labels.jsonl")
    cfg = load_config(
        None,
        [
            "name=mix",
            f"root={tmp_path}",
            "tokenizer.vocab_size=300",
            "tokenize.val_fraction=0.1",
            "tokenize.min_val_docs=1",
            f'curate.sources=[{{"kind": "files", "path": "{_inputs(tmp_path, 6)}", "bucket": "web"}}]',
            "curate.steps=[normalize,classify,bucket]",
            "curate.min_chars=50",
            "curate.workers=1",
            f'curate.classify=[{{"name": "topic", "labelled": "{tmp_path / "labels.jsonl"}", "action": "bucket", '
            '"buckets": {"cook": "kitchen", "sport": "games", "code": "software"}}]',
            'mixture.weights={"kitchen": 0.5, "games": 0.3, "software": 0.2}',
        ],
    )
    run = RunDir.create(cfg)
    run_pipeline(run, stages=("curate", "tokenizer", "tokenize"))
    store = TokenStore(run.path / "tokens")
    assert sorted(store.buckets) == ["games", "kitchen", "software"]
    loader = Loader(store, cfg.mixture, seq_len=16, micro_batch=4, grad_accum=1, max_steps=20, seed=0)
    shares = {b: u["share"] for b, u in loader.plan()["buckets"].items()}
    assert shares == pytest.approx({"kitchen": 0.5, "games": 0.3, "software": 0.2}, abs=0.05)
    assert loader.batch(1, 0).tokens.shape[0] == 4
