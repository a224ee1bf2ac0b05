"""`tokenmill synth` end to end on a small real-text run: documents with their lineage (checkpoint
digest, sampling, generation = the parent's + 1), the same file again for the same config, the
collapse figures beside real text, and the CLI's output and errors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.config import RunConfig
from tokenmill.runs import RunDir
from tokenmill.data.synthetic_lineage import lineage_of
from tokenmill.synth.run import SynthConfig, SynthError, load_synth_config, synthesize


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory) -> RunDir:
    """A tokenized run of real prose and code with a d32 model trained 10 steps."""
    from tests.conftest import real_documents, write_curated
    from tokenmill.tokenizer.stage import run_tokenizer
    from tokenmill.tokens.tokenize import run_tokenize
    from tokenmill.train.trainer import run_train

    root = tmp_path_factory.mktemp("synth")
    cfg = RunConfig.model_validate({
        "name": "t", "root": str(root), "seed": 3, "tokenizer": {"vocab_size": 512},
        "tokenize": {"val_fraction": 0.1, "min_val_docs": 1},
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 32},
        "train": {"seq_len": 32, "micro_batch": 4, "max_steps": 10, "warmup_steps": 2, "ckpt_every": 10,
                  "device": "cpu", "threads": 1, "eval_every": 0}})
    run = RunDir.create(cfg)
    write_curated(run.path, real_documents())
    run_tokenizer(run)
    run_tokenize(run)
    run_train(run, progress=False)
    return run


def synth_config(run: RunDir, **over) -> SynthConfig:
    base = {"run": str(run.path), "docs": 9, "max_new_tokens": 20, "batch_size": 4, "seed": 1,
            "prompt": {"tokens": 3, "buckets": ["prose"]}, "metrics": {"max_tokens": 500, "real_docs": 2}}
    return SynthConfig.model_validate({**base, **over})


def test_samples_carry_their_lineage_and_repeat_exactly(trained_run, tmp_path):
    manifest = synthesize(synth_config(trained_run, out=str(tmp_path / "a")))
    lines = (tmp_path / "a" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == manifest["docs"] == 9 - manifest["empty"]
    record = json.loads(lines[0])
    lineage = record["metadata"]["synthetic"]
    ckpt = trained_run.sub("checkpoints", "step_10")
    assert record["source"] == "synthetic" and lineage["generation"] == 1 and lineage["step"] == 10
    assert lineage["checkpoint"] == str(ckpt.resolve())
    assert lineage["model_sha256"] == hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()
    assert lineage["sampling"] == {"temperature": 1.0, "top_p": 1.0, "top_k": None, "max_new_tokens": 20,
                                   "min_new_tokens": 0}
    assert lineage["seed"] == 1 and lineage["prompt"]["bucket"] == "prose" and lineage["prompt"]["tokens"] == 3
    assert lineage_of(json.dumps({"metadata": record["metadata"]})) == lineage
    again = synthesize(synth_config(trained_run, out=str(tmp_path / "b"), batch_size=9))
    assert (tmp_path / "b" / "samples.jsonl").read_bytes() == (tmp_path / "a" / "samples.jsonl").read_bytes()
    m = again["metrics"]
    assert m["real_buckets"] == ["code", "prose"] and m["samples"]["tokens"] == m["real"]["tokens"]
    assert set(m["real_bpb"]) == {"code", "prose"} and all(v > 0 for v in m["real_bpb"].values())
    assert [e["kind"] for e in trained_run.events.read() if e["stage"] == "synth"][-2:] == ["synth_start", "synth_done"]


def test_a_model_trained_on_synthetic_data_passes_its_generation_on(trained_run, tmp_path):
    """The parent's curated prose rows carry generation-2 lineage: its samples are generation 3,
    and the prose bucket no longer counts as real text."""
    part = trained_run.sub("curated", "prose", "part-00000.parquet")
    table = pq.read_table(part)
    meta = json.dumps({"metadata": {"synthetic": {"version": 1, "generation": 2}}})
    pq.write_table(table.append_column("metadata", pa.array([meta] * table.num_rows)), part)
    try:
        manifest = synthesize(synth_config(trained_run, out=str(tmp_path / "g"), docs=2))
    finally:
        pq.write_table(table, part)
    assert manifest["lineage"]["generation"] == 3 and manifest["metrics"]["real_buckets"] == ["code"]


def test_cli_prints_the_figures_and_names_a_bad_run(trained_run, tmp_path):
    cfg = tmp_path / "synth.yaml"
    cfg.write_text(yaml.safe_dump(synth_config(trained_run, out=str(tmp_path / "c")).model_dump(mode="json")))
    res = CliRunner().invoke(app, ["synth", str(cfg), "--set", "docs=3"])
    assert res.exit_code == 0, res.output
    assert "distinct_2" in res.output and "tail_mass" in res.output and "held-out bpb, prose" in res.output
    assert str(tmp_path / "c" / "samples.jsonl") in res.output.replace("\n", "")
    bad = CliRunner().invoke(app, ["synth", str(cfg), "--set", f"run={tmp_path / 'nowhere'}"])
    assert bad.exit_code == 1 and "not a run directory" in bad.output
    unknown = CliRunner().invoke(app, ["synth", str(cfg), "--set", "temprature=0.5"])
    assert unknown.exit_code == 1 and "temprature" in unknown.output


def test_config_errors_name_the_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("docs: 3\n")
    with pytest.raises(SynthError, match=f"{path}: invalid synthesis config"):
        load_synth_config(path)
    assert load_synth_config(Path(path), ["run=x"]).docs == 3
