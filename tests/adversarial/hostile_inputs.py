"""The hostile-input corpus: every case of issues 40 and 53 as a builder that writes real files into
an empty folder and says which command a user would run on them and what must survive.

Shared by the adversarial tests and `benchmarks/bench_hostile_inputs.py` (time and peak memory
per case, this checkout beside an earlier commit). The good text around each hostile record is
real prose written by others (Python's own reference topics, `pydoc_data`), so a reader that
keeps it is keeping what a user cares about.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq


def good_texts(n: int, offset: int = 0) -> list[str]:
    """n real prose documents (Python's reference topics), at least a few hundred bytes each."""
    import pydoc_data.topics as topics

    texts = [topics.topics[k] for k in sorted(topics.topics) if len(topics.topics[k]) > 400]
    return [texts[(offset + i) % len(texts)] for i in range(n)]


def jsonl_lines(texts: list[str]) -> list[bytes]:
    return [json.dumps({"text": t}).encode() + b"\n" for t in texts]


def html_page(text: str, title: str = "page") -> bytes:
    paras = "".join(f"<p>{p}</p>" for p in text.split("\n\n") if p.strip())
    return f"<!doctype html><html><head><title>{title}</title></head><body><main>{paras}</main></body></html>".encode()


def warc_record(uri: str, payload: bytes, content_length: int | None = None) -> bytes:
    """One WARC/1.0 response record; content_length overrides the true block length (a lie)."""
    http = b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + payload
    length = len(http) if content_length is None else content_length
    head = (
        f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: {uri}\r\n"
        f"WARC-Record-ID: <urn:uuid:{abs(hash(uri)) % 10**12:012d}-0000-0000-0000-000000000000>\r\n"
        f"WARC-Date: 2024-01-01T00:00:00Z\r\nContent-Type: application/http; msgtype=response\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()
    return head + http + b"\r\n\r\n"


# What `curate ... -o out` may create beside its input: the output, its event log and its
# resumable work folder (kept after a failed run so that the same command continues).
CURATE_OUT = ("out", ".out.events.jsonl", ".out.work")


@dataclass
class Case:
    """One hostile case, built: the tokenmill arguments a user would run (`tokenmill ARGS`), where,
    and what a correct run leaves: `good` documents kept in `out` (None: not a curation case),
    nothing changed under `root` outside `created` (paths relative to root)."""

    name: str
    group: str
    what: str
    root: Path
    args: list[str]
    good: int | None = None
    bad: int = 0  # at least this many rows quarantined in out/_rejected, each with its reason
    out: Path | None = None
    created: tuple[str, ...] = ()
    python: bool = False  # args are `python -c CODE ARGS` instead of `tokenmill ARGS`
    steps: str = "normalize"
    refused: bool | None = False  # True: a correct run refuses (non-zero exit, one or two lines); None: either
    env: dict[str, str] = field(default_factory=dict)
    rule: str | None = None  # the rule the hostile record is quarantined under
    max_lines: int = 2  # lines a refusal may print (`run` first lists the stages it skipped)
    may_change: tuple[str, ...] = ()  # tokenmill's own bookkeeping from an earlier run (event log, stage records)
    must_say: tuple[str, ...] = ()  # text the output must hold (the file a refusal or a skip names)
    within_s: float | None = None  # a correct run ends within this many seconds
    max_rss_mb: float | None = None  # a correct run's peak RSS stays below this (bounded whatever the input's size)
    size_mb: float | None = None  # the hostile input's size, for the cases the bench runs at two sizes


# -- nothing lost to one bad record -------------------------------------------------------------


def jsonl_nul_line(root: Path) -> Case:
    lines = jsonl_lines(good_texts(40))
    lines.insert(0, b'{"text": "a record with a raw \x00 byte in it"}\n')
    (root / "pages.jsonl").write_bytes(b"".join(lines))
    return Case(
        "jsonl_nul_line",
        "record",
        "JSONL: one raw NUL byte in the first kilobyte, 40 good lines around it",
        root,
        ["curate", "pages.jsonl", "-o", "out", "--steps", "normalize"],
        bad=1,
        good=40,
        out=root / "out",
        created=CURATE_OUT,
    )


def warc_absurd_length(root: Path) -> Case:
    texts = good_texts(10)
    recs = [warc_record(f"http://example.org/{i}", html_page(t)) for i, t in enumerate(texts[:5])]
    recs.append(warc_record("http://example.org/liar", html_page("short"), content_length=10**15))
    recs += [warc_record(f"http://example.org/{i + 5}", html_page(t)) for i, t in enumerate(texts[5:])]
    (root / "crawl.warc").write_bytes(b"".join(recs))
    return Case(
        "warc_absurd_length",
        "record",
        "WARC: a record claiming a 1 PB Content-Length between 5 and 5 good ones",
        root,
        ["curate", "crawl.warc", "-o", "out", "--steps", "extract,normalize"],
        bad=1,
        good=10,
        out=root / "out",
        created=CURATE_OUT,
        steps="extract,normalize",
    )


def parquet_binary_text(root: Path) -> Case:
    texts = good_texts(30)
    pq.write_table(pa.table({"text": pa.array([t.encode() for t in texts], pa.binary())}), root / "docs.parquet")
    return Case(
        "parquet_binary_text",
        "record",
        "Parquet: a `binary` text column of valid UTF-8, 30 documents",
        root,
        ["curate", "docs.parquet", "-o", "out", "--steps", "normalize"],
        good=30,
        out=root / "out",
        created=CURATE_OUT,
    )


def jsonl_gz_newline_bomb(root: Path) -> Case:
    (root / "in").mkdir()
    (root / "in" / "bomb.jsonl.gz").write_bytes(gzip.compress(b"\n" * 35_000_000, 9))
    (root / "in" / "good.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(20))))
    return Case(
        "jsonl_gz_newline_bomb",
        "record",
        "a 34 KB .jsonl.gz of 35 M newlines beside 20 good lines",
        root,
        ["curate", "in", "-o", "out", "--steps", "normalize"],
        bad=1,
        good=20,
        out=root / "out",
        created=CURATE_OUT,
    )


def symlink_loop(root: Path) -> Case:
    src = root / "in"
    src.mkdir()
    (src / "good.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(20))))
    os.symlink("b", src / "a")
    os.symlink("a", src / "b")
    os.symlink(".", src / "self")
    return Case(
        "symlink_loop",
        "record",
        "a source folder with a loop of links (a→b→a) and a link to itself",
        root,
        ["curate", "in", "-o", "out", "--steps", "normalize"],
        good=20,
        out=root / "out",
        created=CURATE_OUT,
    )


# -- bounded work per document ------------------------------------------------------------------


def html_deep_nesting(root: Path) -> Case:
    src = root / "in"
    src.mkdir()
    for i, t in enumerate(good_texts(10)):
        (src / f"page{i}.html").write_bytes(html_page(t, f"page {i}"))
    depth = 100_000
    (src / "deep.html").write_bytes(b"<html><body>" + b"<div>" * depth + b"deep" + b"</div>" * depth + b"</body></html>")
    return Case(
        "html_deep_nesting",
        "document",
        "HTML nested 100,000 <div>s deep beside 10 good pages",
        root,
        ["curate", "in", "-o", "out", "--steps", "extract,normalize"],
        bad=1,
        good=10,
        out=root / "out",
        created=CURATE_OUT,
        steps="extract,normalize",
    )


# -- ownership of output ------------------------------------------------------------------------


def curate_into_foreign_dir(root: Path) -> Case:
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    (root / "mine").mkdir()
    (root / "mine" / "thesis.tex").write_text("years of work\n")
    (root / "mine" / "data.csv").write_text("a,b\n1,2\n")
    return Case(
        "curate_into_foreign_dir",
        "ownership",
        "`curate -o DIR` where DIR holds the user's files",
        root,
        ["curate", "pages.jsonl", "-o", "mine", "--steps", "normalize"],
        refused=True,
    )


def curate_into_cwd(root: Path) -> Case:
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    return Case(
        "curate_into_cwd",
        "ownership",
        '`curate -o "$(pwd)"` from the folder holding the input',
        root,
        ["curate", "pages.jsonl", "-o", str(root), "--steps", "normalize"],
        refused=True,
    )


def config_name_escapes_root(root: Path) -> Case:
    (root / "runs").mkdir()
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    cfg = {
        "name": "../elsewhere",
        "root": str(root / "runs"),
        "curate": {"sources": [{"path": str(root / "pages.jsonl"), "bucket": "web"}]},
    }
    (root / "run.yaml").write_text(json.dumps(cfg))
    return Case(
        "config_name_escapes_root",
        "ownership",
        "a config whose `name: ../elsewhere` leaves `root`",
        root,
        ["curate", "--config", "run.yaml"],
        refused=True,
    )


def run_dir_is_foreign(root: Path) -> Case:
    (root / "project").mkdir()
    (root / "project" / "config.yaml").write_text("# the user's own config, not tokenmill's\nlr: 1\n")
    (root / "project" / "report.html").write_text("<p>the user's report</p>\n")
    cfg = {"name": "project", "root": str(root)}
    (root / "run.yaml").write_text(json.dumps(cfg))
    return Case(
        "run_dir_is_foreign",
        "ownership",
        "`tokenizer train` into a run folder tokenmill did not make (its config.yaml and report.html are the user's)",
        root,
        ["tokenizer", "train", "run.yaml"],
        refused=True,
    )


# -- config checked up front --------------------------------------------------------------------


def config_zero_micro_batch(root: Path) -> Case:
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    cfg = {
        "name": "r",
        "root": str(root / "runs"),
        "train": {"micro_batch": 0},
        "curate": {"sources": [{"path": str(root / "pages.jsonl"), "bucket": "web"}]},
    }
    (root / "run.yaml").write_text(json.dumps(cfg))
    return Case(
        "config_zero_micro_batch",
        "config",
        "`run` with `train.micro_batch: 0` (refused before curation runs)",
        root,
        ["run", "run.yaml"],
        refused=True,
    )


# -- imports checked before anything is built ---------------------------------------------------

# A user error (tokenmill's UserError) prints its one line; anything else shows its traceback.
IMPORT_HF = (
    "import sys\nfrom tokenmill.errors import UserError\nfrom tokenmill.export.hf_import import import_hf\n"
    "try:\n    import_hf(sys.argv[1])\nexcept UserError as exc:\n    sys.exit(f'error: {exc}')\n"
)


def _tiny_llama(path: Path) -> None:
    import torch
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path, safe_serialization=True)


def _hf_case(name: str, what: str, edit: Callable[[Path], None]) -> Callable[[Path], Case]:
    def build(root: Path) -> Case:
        model = root / "model"
        _tiny_llama(model)
        edit(model)
        return Case(name, "import", what, root, [IMPORT_HF, str(model)], python=True, refused=True)

    build.__name__ = name
    return build


def _set_config(**values: object) -> Callable[[Path], None]:
    def edit(model: Path) -> None:
        conf = json.loads((model / "config.json").read_text())
        conf.update(values)
        (model / "config.json").write_text(json.dumps(conf))

    return edit


def _header_length_past_end(model: Path) -> None:
    f = model / "model.safetensors"
    data = bytearray(f.read_bytes())
    data[:8] = (len(data) * 1000).to_bytes(8, "little")
    f.write_bytes(bytes(data))


def _index_escapes(model: Path) -> None:
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {"model.embed_tokens.weight": "../../../../etc/passwd"}})
    )


hf_layers_million = _hf_case(
    "hf_layers_million", "HF config.json: num_hidden_layers 1,000,000 (weights: 2)", _set_config(num_hidden_layers=1_000_000)
)
hf_positions_billion = _hf_case(
    "hf_positions_billion", "HF config.json: max_position_embeddings 1e9", _set_config(max_position_embeddings=1_000_000_000)
)
hf_vocab_trillion = _hf_case("hf_vocab_trillion", "HF config.json: vocab_size 1e12", _set_config(vocab_size=1_000_000_000_000))
hf_zero_heads = _hf_case("hf_zero_heads", "HF config.json: num_attention_heads 0", _set_config(num_attention_heads=0))
hf_header_past_end = _hf_case("hf_header_past_end", "safetensors header length beyond the file's end", _header_length_past_end)
hf_index_escapes = _hf_case("hf_index_escapes", "index.json naming ../../../../etc/passwd", _index_escapes)


# -- a trained run and what other tools (or an attacker) wrote into it --------------------------

SRC = Path(__file__).resolve().parents[2] / "src"  # this checkout's tokenmill builds the earlier run
# ... unless the bench measures another checkout: then that one builds it (its config.yaml has only
# the keys that version knows, as a user's run of it would)
BUILD_SRC_VAR = "TOKENMILL_HOSTILE_BUILD_SRC"
RUN = "runs/r"  # the run folder of TINY_RUN, relative to the case's root
# What a later command may update in a run tokenmill made: its event log, the config it records
# when a stage starts, the stage records; checkpoints, tokens, curated data and the user's
# files must come out byte-identical.
RUN_LOG = (f"{RUN}/events.jsonl", f"{RUN}/config.yaml", f"{RUN}/.stages", f"{RUN}/.cache")
TINY_RUN: dict[str, object] = {
    "name": "r",
    "root": "runs",
    "seed": 1,
    "curate": {
        "sources": [{"path": "books.jsonl", "bucket": "books"}, {"path": "web.jsonl", "bucket": "web"}],
        "steps": ["normalize"],
    },
    "tokenizer": {"vocab_size": 300},
    "tokenize": {"val_fraction": 0.1},
    "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_seq_len": 32},
    "mixture": {"weights": {"books": 1.0, "web": 1.0}},
    "train": {
        "seq_len": 32,
        "micro_batch": 4,
        "max_steps": 4,
        "warmup_steps": 1,
        "ckpt_every": 2,
        "eval_every": 0,
        "log_every": 0,
        "device": "cpu",
        "threads": 1,
    },
    "eval": {"max_docs": 4, "num_samples": 1, "sample_tokens": 4},
}
_tiny_cache: list[Path] = []  # one real run per process, copied into every case that needs one


def tiny_run(root: Path, **changes: dict[str, object]) -> dict[str, object]:
    """A real finished run (curate, tokenizer, tokenize, 4 training steps with checkpoints at
    steps 2 and 4, eval, report: about 9 s on 2 cores) under root/runs/r, its sources and its
    config root/run.yaml (relative paths: the command runs in root); returns the config with
    `changes` (section -> fields) applied and written back."""
    if not _tiny_cache:
        import atexit
        import shutil
        import subprocess
        import sys
        import tempfile

        home = Path(tempfile.mkdtemp(prefix="tm-hostile-run-"))
        atexit.register(shutil.rmtree, home, True)  # the process's copy source: gone with the process
        (home / "books.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(60))))
        (home / "web.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(60, 60))))
        (home / "run.yaml").write_text(json.dumps(TINY_RUN))
        src = os.environ.get(BUILD_SRC_VAR) or str(SRC)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run(
            [sys.executable, "-m", "tokenmill", "run", "run.yaml"],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            shutil.rmtree(home)
            raise RuntimeError(f"the tiny run did not build: {proc.stderr[-2000:]}")
        _tiny_cache.append(home)
    import shutil

    shutil.copytree(_tiny_cache[0], root, symlinks=True, dirs_exist_ok=True)
    cfg = json.loads((root / "run.yaml").read_text())
    for section, fields in changes.items():
        cfg[section] = {**cfg.get(section, {}), **fields}
    (root / "run.yaml").write_text(json.dumps(cfg))
    return cfg


def mixture_weight_typo(root: Path) -> Case:
    tiny_run(root, mixture={"weights": {"book": 1.0, "web": 1.0}})
    return Case(
        "mixture_weight_typo",
        "ownership",
        "`run` after a weight typo (`book:` for `books:`) in a run with checkpoints at steps 2 and 4",
        root,
        ["run", "run.yaml"],
        refused=True,
        max_lines=5,
        may_change=RUN_LOG,
        must_say=("book",),
    )


def curate_bracket_name(root: Path) -> Case:
    (root / "dump[1].jsonl").write_bytes(b"".join(jsonl_lines(good_texts(3))))
    (root / "dump1.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(1, 10))))
    return Case(
        "curate_bracket_name",
        "record",
        "`curate 'dump[1].jsonl'` (3 documents) beside dump1.jsonl (1)",
        root,
        ["curate", "dump[1].jsonl", "-o", "out", "--steps", "normalize"],
        good=3,
        out=root / "out",
        created=CURATE_OUT,
    )


def curate_overwrite_unmarked(root: Path) -> Case:
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    (root / "mine" / "web").mkdir(parents=True)
    (root / "mine" / "_funnel.json").write_text(json.dumps({"my": "numbers from another tool"}))
    pq.write_table(pa.table({"text": good_texts(5, 20)}), root / "mine" / "web" / "part-00000.parquet")
    return Case(
        "curate_overwrite_unmarked",
        "ownership",
        "`curate -o mine --overwrite`: mine/ holds _funnel.json and web/part-00000.parquet that tokenmill did not write",
        root,
        ["curate", "pages.jsonl", "-o", "mine", "--overwrite", "--steps", "normalize"],
        refused=True,
    )


def jsonl_deep_line(root: Path) -> Case:
    lines = jsonl_lines(good_texts(20))
    lines.insert(10, b'{"text": "deep", "meta": ' + b"[" * 2000 + b"]" * 2000 + b"}\n")
    (root / "pages.jsonl").write_bytes(b"".join(lines))
    return Case(
        "jsonl_deep_line",
        "record",
        "JSONL: a 4 KB line nested 2,000 levels deep between 20 good lines",
        root,
        ["curate", "pages.jsonl", "-o", "out", "--steps", "normalize"],
        bad=1,
        good=20,
        out=root / "out",
        created=CURATE_OUT,
        rule="too_deep",
    )


def _bigbench_run(root: Path, body: Callable[[Path], None]) -> None:
    task = root / "tasks" / "task.json"
    task.parent.mkdir()
    body(task)
    tiny_run(root, eval={"tasks": [{"name": "hostile", "path": str(task), "format": "bigbench"}]})


def bigbench_deep_task(root: Path) -> Case:
    depth = 100_000
    _bigbench_run(root, lambda t: t.write_bytes(b'{"examples": ' + b"[" * depth + b"]" * depth + b"}"))
    return Case(
        "bigbench_deep_task",
        "record",
        "BIG-bench task.json nested 100,000 levels deep, `eval`",
        root,
        ["eval", "run.yaml"],
        refused=True,
        may_change=RUN_LOG,
        must_say=("task.json",),
    )


def bigbench_huge_task(root: Path, size_mb: float = 500) -> Case:
    def sparse(task: Path) -> None:  # a real file of that size on disk, without writing it (zeros past the head)
        with task.open("wb") as f:
            f.write(b'{"examples": [')
            f.truncate(int(size_mb * 2**20))

    _bigbench_run(root, sparse)
    return Case(
        "bigbench_huge_task",
        "memory",
        f"a {size_mb:g} MB BIG-bench task.json, `eval` (refused unread)",
        root,
        ["eval", "run.yaml"],
        refused=True,
        may_change=RUN_LOG,
        must_say=("task.json",),
        max_rss_mb=600,
        size_mb=size_mb,
    )


def _with_event_lines(root: Path, lines: list[bytes]) -> None:
    """The run's events.jsonl with `lines` written in the middle (where a torn or foreign write lands)."""
    log = root / RUN / "events.jsonl"
    events = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(events[: len(events) // 2] + lines + events[len(events) // 2 :]))


def watch_deep_event(root: Path) -> Case:
    tiny_run(root)
    _with_event_lines(root, [b'{"stage": "train", "kind": "x", "v": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"])
    return Case(
        "watch_deep_event",
        "record",
        "`eval --watch` on a run whose events.jsonl holds a line nested 100,000 deep",
        root,
        ["eval", "--watch", RUN],
        refused=None,
        may_change=RUN_LOG,
        created=(f"{RUN}/eval",),
    )


ODD_EVENTS = [b"[1,2,3]\n", b"null\n", b"Infinity\n"]


def report_odd_events(root: Path) -> Case:
    tiny_run(root)
    _with_event_lines(root, ODD_EVENTS)
    return Case(
        "report_odd_events",
        "record",
        "`report` on an events.jsonl with the lines [1,2,3], null, Infinity",
        root,
        ["report", "run.yaml"],
        may_change=(*RUN_LOG, f"{RUN}/report.html", f"{RUN}/tensorboard"),
        must_say=("events.jsonl",),
    )


def stop_signals_odd_events(root: Path) -> Case:
    tiny_run(root)
    _with_event_lines(root, ODD_EVENTS)
    return Case(
        "stop_signals_odd_events",
        "record",
        "`stop-signals` on an events.jsonl with the lines [1,2,3], null, Infinity",
        root,
        ["stop-signals", RUN],
        may_change=RUN_LOG,
        must_say=("events.jsonl",),
    )


def _bad_token_ids(shard: Path) -> None:
    """Every 64th token of a uint16 shard set to 65535, far past the 300-token vocabulary."""
    import numpy as np

    ids = np.fromfile(shard, dtype=np.uint16)
    ids[::64] = 65535
    ids.tofile(shard)


def token_ids_past_vocab_train(root: Path) -> Case:
    import shutil

    tiny_run(root)
    shutil.rmtree(root / RUN / "checkpoints")  # a run about to train (no weights of the user's at stake)
    for bucket in ("books", "web"):
        _bad_token_ids(root / RUN / "tokens" / bucket / "train-00000.bin")
    return Case(
        "token_ids_past_vocab_train",
        "record",
        "`train` on a token store whose .bin holds ids >= the vocabulary (65535 of 300)",
        root,
        ["train", "run.yaml"],
        refused=True,
        may_change=RUN_LOG,
        created=(f"{RUN}/checkpoints", f"{RUN}/hangs"),
        must_say=("train-00000.bin",),
        max_lines=3,  # the stage's banner and the peak-FLOPs line the trainer prints before its first batch
    )


def token_ids_past_vocab_eval(root: Path) -> Case:
    tiny_run(root)
    for bucket in ("books", "web"):
        _bad_token_ids(root / RUN / "tokens" / bucket / "val-00000.bin")
    return Case(
        "token_ids_past_vocab_eval",
        "record",
        "`eval` on held-out .bin files holding ids >= the vocabulary",
        root,
        ["eval", "run.yaml"],
        refused=True,
        may_change=RUN_LOG,
        must_say=("val-00000.bin",),
    )


def _resum(ckpt: Path) -> None:
    """SHA256SUMS rewritten to match the files as they are now (an attacker's or a tool's edit)."""
    import hashlib

    lines = [
        f"{hashlib.sha256((ckpt / name).read_bytes()).hexdigest()}  {name}\n"
        for name in (ln.split("  ", 1)[1].strip() for ln in (ckpt / "SHA256SUMS").read_text().splitlines())
    ]
    (ckpt / "SHA256SUMS").write_text("".join(lines))


class _MakesFolder:
    """Unpickling this runs os.mkdir("UNPICKLED"): a folder in the case proves code ran."""

    def __reduce__(self) -> tuple[Callable[[str], None], tuple[str]]:
        return os.mkdir, ("UNPICKLED",)


def pickled_optimizer(root: Path) -> Case:
    import pickle
    import shutil

    tiny_run(root)
    shutil.rmtree(root / RUN / "checkpoints" / "step_4")  # a run stopped at step 2: --resume loads its optimizer
    ckpt = root / RUN / "checkpoints" / "step_2"
    (ckpt / "optim.pt").write_bytes(pickle.dumps({"state": _MakesFolder()}))
    _resum(ckpt)
    return Case(
        "pickled_optimizer",
        "import",
        "`train --resume` from a checkpoint whose optim.pt is a pickle that runs code, SHA256SUMS matching",
        root,
        ["train", "run.yaml", "--resume"],
        refused=True,
        may_change=RUN_LOG,
        must_say=("optim.pt",),
    )


def safetensors_bad_header(root: Path) -> Case:
    tiny_run(root)
    ckpt = root / RUN / "checkpoints" / "step_4"
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    n = int.from_bytes(data[:8], "little")
    data[8 : 8 + n] = b"{" + b"\x00" * (n - 1)  # the header's length is right, its JSON is not
    (ckpt / "model.safetensors").write_bytes(bytes(data))
    _resum(ckpt)
    return Case(
        "safetensors_bad_header",
        "import",
        "`eval` on a checkpoint whose model.safetensors header is garbage, SHA256SUMS matching",
        root,
        ["eval", "run.yaml"],
        refused=True,
        may_change=RUN_LOG,
        must_say=("model.safetensors",),
    )


def trace_long_line(root: Path, size_mb: float = 4) -> Case:
    tiny_run(root)
    words = " ".join(good_texts(40)).split()
    line, n = [], 0
    while n < size_mb * 2**20:  # real words, no newline: one output of size_mb
        w = words[len(line) % len(words)]
        line.append(w)
        n += len(w) + 1
    (root / "outputs.txt").write_text(" ".join(line) + "\n")
    return Case(
        "trace_long_line",
        "memory",
        f"`trace --file` with one {size_mb:g} MB line",
        root,
        ["trace", RUN, "--file", "outputs.txt"],
        refused=None,
        may_change=RUN_LOG,
        created=(f"{RUN}/trace",),
        size_mb=size_mb,
    )


def _labelled_file(path: Path, size_mb: float, labels: tuple[str, str]) -> None:
    """JSONL of real prose labelled in turn, size_mb long, written a line at a time: paragraphs of
    a few hundred bytes, as labelled sets are, so 25 MB already holds more than the default
    20,000 examples a label (the sample's cap) and every size past it shows the bound."""
    texts = [p.strip()[:400] for t in good_texts(200) for p in t.split("\n\n") if len(p.strip()) > 80]
    with path.open("wb") as f:
        i = 0
        while f.tell() < size_mb * 2**20:
            f.write(json.dumps({"text": texts[i % len(texts)], "label": labels[i % 2]}).encode() + b"\n")
            i += 1


def _labelled_case(name: str, step: str, labels: tuple[str, str]) -> Callable[..., Case]:
    def build(root: Path, size_mb: float = 8) -> Case:
        (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(20))))
        _labelled_file(root / "labelled.jsonl", size_mb, labels)
        section: dict[str, object] = (
            {"classify": [{"name": "topic", "labelled": "labelled.jsonl"}]}
            if step == "classify"
            else {"safety": {"labelled": "labelled.jsonl"}}
        )
        cfg = {
            "name": "r",
            "root": "runs",
            "curate": {"sources": [{"path": "pages.jsonl", "bucket": "web"}], "steps": ["normalize", step], **section},
        }
        (root / "run.yaml").write_text(json.dumps(cfg))
        return Case(
            name,
            "memory",
            f"`curate --config` whose {step} step learns from a {size_mb:g} MB labelled file",
            root,
            ["curate", "--config", "run.yaml"],
            created=("runs",),
            size_mb=size_mb,
        )

    build.__name__ = name
    return build


classify_labelled_big = _labelled_case("classify_labelled_big", "classify", ("news", "manual"))
safety_labelled_big = _labelled_case("safety_labelled_big", "safety", ("clean", "toxic"))


def rdzv_unresolvable(root: Path) -> Case:
    tiny_run(root)
    return Case(
        "rdzv_unresolvable",
        "config",
        "`train --nnodes 2 --rdzv no-such-host.invalid:29500 --rdzv-timeout 5`",
        root,
        ["train", "run.yaml", "--nnodes", "2", "--node-rank", "1", "--rdzv", "no-such-host.invalid:29500", "--rdzv-timeout", "5"],
        refused=True,
        may_change=RUN_LOG,
        within_s=20,
        created=(f"{RUN}/hangs",),
    )


CASES: tuple[Callable[..., Case], ...] = (
    jsonl_nul_line,
    warc_absurd_length,
    parquet_binary_text,
    jsonl_gz_newline_bomb,
    symlink_loop,
    html_deep_nesting,
    curate_into_foreign_dir,
    curate_into_cwd,
    config_name_escapes_root,
    run_dir_is_foreign,
    config_zero_micro_batch,
    hf_layers_million,
    hf_positions_billion,
    hf_vocab_trillion,
    hf_zero_heads,
    hf_header_past_end,
    hf_index_escapes,
    mixture_weight_typo,
    curate_bracket_name,
    curate_overwrite_unmarked,
    jsonl_deep_line,
    bigbench_deep_task,
    watch_deep_event,
    report_odd_events,
    stop_signals_odd_events,
    token_ids_past_vocab_train,
    token_ids_past_vocab_eval,
    pickled_optimizer,
    safetensors_bad_header,
    trace_long_line,
    classify_labelled_big,
    safety_labelled_big,
    bigbench_huge_task,
    rdzv_unresolvable,
)
# Cases whose hostile input grows (size_mb): the bench runs each at two sizes to show memory that
# does not follow the input.
GROWTH: tuple[Callable[..., Case], ...] = (trace_long_line, classify_labelled_big, safety_labelled_big, bigbench_huge_task)
