"""The train checks run before anything moves: what each can see when the store is on disk, rebuilt
from curated data, or rebuilt from curation too."""

import pytest

from tokenmill.config import RunConfig
from tokenmill.mixture.errors import MixtureError
from tokenmill.runs import RunDir
from tokenmill.train.errors import TrainError
from tokenmill.train.init_from import InitFromError
from tokenmill.train.preflight import check_train

from tests.conftest import real_documents, write_curated


def _with(run: RunDir, **sections) -> RunDir:
    values = run.config.model_dump(mode="json")
    for name, update in sections.items():
        values[name].update(update)
    return RunDir(RunConfig.model_validate(values), run.path)


def test_the_store_on_disk_checks_every_phase_and_replay(tiny_run):
    check_train(tiny_run)
    with pytest.raises(MixtureError, match=r"mixture.weights names bucket\(s\) \['c'\] that are not in the token store"):
        check_train(_with(tiny_run, mixture={"weights": {"a": 1.0, "c": 1.0}}))
    with pytest.raises(MixtureError, match=r"mixture.replay.buckets names bucket\(s\) \['old'\]"):
        check_train(_with(tiny_run, mixture={"replay": {"buckets": ["old"], "share": 0.2}}))
    with pytest.raises(TrainError, match="model.vocab_size=16 is smaller than the token store's vocabulary"):
        check_train(_with(tiny_run, model={"vocab_size": 16}))


def test_a_store_rebuilt_in_this_run_is_checked_against_the_curated_buckets(tiny_run):
    write_curated(tiny_run.path, real_documents())  # buckets prose and code
    run = _with(tiny_run, mixture={"weights": {"prose": 1.0, "a": 1.0}})  # "a" is only in the old store
    with pytest.raises(MixtureError, match=r"\['a'\] that are not in the curated data .*buckets: \['code', 'prose'\]"):
        check_train(run, rebuilt_from="tokenize")
    check_train(_with(tiny_run, mixture={"weights": {"prose": 1.0}}), rebuilt_from="tokenizer")


def test_curation_in_this_run_checks_the_buckets_its_config_can_produce(tiny_run):
    sources = [{"kind": "python_stdlib", "part": "code", "bucket": "code", "license": "PSF-2.0"}]
    run = _with(tiny_run, curate={"sources": sources}, mixture={"weights": {"books": 1.0}})
    with pytest.raises(MixtureError, match=r"\['books'\] that no curate source, bucket rule or classifier produces"):
        check_train(run, rebuilt_from="curate")
    check_train(_with(run, mixture={"weights": {"code": 1.0}}), rebuilt_from="curate")


def test_init_from_and_existing_checkpoints(tiny_run, tmp_path):
    with pytest.raises(InitFromError, match="not found"):
        check_train(_with(tiny_run, train={"init_from": str(tmp_path / "gone")}))
    with pytest.raises(InitFromError, match="neither a tokenmill checkpoint"):
        check_train(_with(tiny_run, train={"init_from": str(tmp_path)}))
    tiny_run.sub("checkpoints", "step_3").mkdir(parents=True)
    with pytest.raises(TrainError, match="`tokenmill train CONFIG --resume` continues this run.*moves them aside"):
        check_train(tiny_run, resume=False)
    check_train(tiny_run)  # `run` decides itself whether to continue


def test_max_seconds_with_phases_is_refused_from_the_config(tiny_run):
    phases = [{"name": "x", "fraction": 0.5}, {"name": "y", "fraction": 0.5}]
    with pytest.raises(TrainError, match="train.max_seconds=60"):
        check_train(_with(tiny_run, mixture={"phases": phases}, train={"max_seconds": 60}), rebuilt_from="curate")
