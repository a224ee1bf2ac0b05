"""The hostile-input corpus: every case of issue 40 as a builder that writes real files into an
empty folder and says which command a user would run on them and what must survive.

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
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: {uri}\r\n"
            f"WARC-Record-ID: <urn:uuid:{abs(hash(uri)) % 10**12:012d}-0000-0000-0000-000000000000>\r\n"
            f"WARC-Date: 2024-01-01T00:00:00Z\r\nContent-Type: application/http; msgtype=response\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()
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
    refused: bool = False  # a correct run refuses (non-zero exit, one or two lines)
    env: dict[str, str] = field(default_factory=dict)


# -- nothing lost to one bad record -------------------------------------------------------------

def jsonl_nul_line(root: Path) -> Case:
    lines = jsonl_lines(good_texts(40))
    lines.insert(0, b'{"text": "a record with a raw \x00 byte in it"}\n')
    (root / "pages.jsonl").write_bytes(b"".join(lines))
    return Case("jsonl_nul_line", "record", "JSONL: one raw NUL byte in the first kilobyte, 40 good lines around it",
                root, ["curate", "pages.jsonl", "-o", "out", "--steps", "normalize"], bad=1, good=40, out=root / "out",
                created=CURATE_OUT)


def warc_absurd_length(root: Path) -> Case:
    texts = good_texts(10)
    recs = [warc_record(f"http://example.org/{i}", html_page(t)) for i, t in enumerate(texts[:5])]
    recs.append(warc_record("http://example.org/liar", html_page("short"), content_length=10**15))
    recs += [warc_record(f"http://example.org/{i + 5}", html_page(t)) for i, t in enumerate(texts[5:])]
    (root / "crawl.warc").write_bytes(b"".join(recs))
    return Case("warc_absurd_length", "record", "WARC: a record claiming a 1 PB Content-Length between 5 and 5 good ones",
                root, ["curate", "crawl.warc", "-o", "out", "--steps", "extract,normalize"], bad=1, good=10,
                out=root / "out", created=CURATE_OUT, steps="extract,normalize")


def parquet_binary_text(root: Path) -> Case:
    texts = good_texts(30)
    pq.write_table(pa.table({"text": pa.array([t.encode() for t in texts], pa.binary())}), root / "docs.parquet")
    return Case("parquet_binary_text", "record", "Parquet: a `binary` text column of valid UTF-8, 30 documents",
                root, ["curate", "docs.parquet", "-o", "out", "--steps", "normalize"], good=30, out=root / "out",
                created=CURATE_OUT)


def jsonl_gz_newline_bomb(root: Path) -> Case:
    (root / "in").mkdir()
    (root / "in" / "bomb.jsonl.gz").write_bytes(gzip.compress(b"\n" * 35_000_000, 9))
    (root / "in" / "good.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(20))))
    return Case("jsonl_gz_newline_bomb", "record", "a 34 KB .jsonl.gz of 35 M newlines beside 20 good lines",
                root, ["curate", "in", "-o", "out", "--steps", "normalize"], bad=1, good=20, out=root / "out",
                created=CURATE_OUT)


def symlink_loop(root: Path) -> Case:
    src = root / "in"
    src.mkdir()
    (src / "good.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(20))))
    os.symlink("b", src / "a")
    os.symlink("a", src / "b")
    os.symlink(".", src / "self")
    return Case("symlink_loop", "record", "a source folder with a loop of links (a→b→a) and a link to itself",
                root, ["curate", "in", "-o", "out", "--steps", "normalize"], good=20, out=root / "out",
                created=CURATE_OUT)


# -- bounded work per document ------------------------------------------------------------------

def html_deep_nesting(root: Path) -> Case:
    src = root / "in"
    src.mkdir()
    for i, t in enumerate(good_texts(10)):
        (src / f"page{i}.html").write_bytes(html_page(t, f"page {i}"))
    depth = 100_000
    (src / "deep.html").write_bytes(b"<html><body>" + b"<div>" * depth + b"deep" + b"</div>" * depth + b"</body></html>")
    return Case("html_deep_nesting", "document", "HTML nested 100,000 <div>s deep beside 10 good pages",
                root, ["curate", "in", "-o", "out", "--steps", "extract,normalize"], bad=1, good=10, out=root / "out",
                created=CURATE_OUT, steps="extract,normalize")


# -- ownership of output ------------------------------------------------------------------------

def curate_into_foreign_dir(root: Path) -> Case:
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    (root / "mine").mkdir()
    (root / "mine" / "thesis.tex").write_text("years of work\n")
    (root / "mine" / "data.csv").write_text("a,b\n1,2\n")
    return Case("curate_into_foreign_dir", "ownership", "`curate -o DIR` where DIR holds the user's files",
                root, ["curate", "pages.jsonl", "-o", "mine", "--steps", "normalize"], refused=True)


def curate_into_cwd(root: Path) -> Case:
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    return Case("curate_into_cwd", "ownership", "`curate -o \"$(pwd)\"` from the folder holding the input",
                root, ["curate", "pages.jsonl", "-o", str(root), "--steps", "normalize"], refused=True)


def config_name_escapes_root(root: Path) -> Case:
    (root / "runs").mkdir()
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    cfg = {"name": "../elsewhere", "root": str(root / "runs"),
           "curate": {"sources": [{"path": str(root / "pages.jsonl"), "bucket": "web"}]}}
    (root / "run.yaml").write_text(json.dumps(cfg))
    return Case("config_name_escapes_root", "ownership", "a config whose `name: ../elsewhere` leaves `root`",
                root, ["curate", "--config", "run.yaml"], refused=True)


def run_dir_is_foreign(root: Path) -> Case:
    (root / "project").mkdir()
    (root / "project" / "config.yaml").write_text("# the user's own config, not tokenmill's\nlr: 1\n")
    (root / "project" / "report.html").write_text("<p>the user's report</p>\n")
    cfg = {"name": "project", "root": str(root)}
    (root / "run.yaml").write_text(json.dumps(cfg))
    return Case("run_dir_is_foreign", "ownership", "`tokenizer train` into a run folder tokenmill did not make "
                "(its config.yaml and report.html are the user's)",
                root, ["tokenizer", "train", "run.yaml"], refused=True)


# -- config checked up front --------------------------------------------------------------------

def config_zero_micro_batch(root: Path) -> Case:
    (root / "pages.jsonl").write_bytes(b"".join(jsonl_lines(good_texts(10))))
    cfg = {"name": "r", "root": str(root / "runs"), "train": {"micro_batch": 0},
           "curate": {"sources": [{"path": str(root / "pages.jsonl"), "bucket": "web"}]}}
    (root / "run.yaml").write_text(json.dumps(cfg))
    return Case("config_zero_micro_batch", "config", "`run` with `train.micro_batch: 0` (refused before curation runs)",
                root, ["run", "run.yaml"], refused=True)


# -- imports checked before anything is built ---------------------------------------------------

# A user error (tokenmill's UserError) prints its one line; anything else shows its traceback.
IMPORT_HF = ("import sys\nfrom tokenmill.errors import UserError\nfrom tokenmill.export.hf_import import import_hf\n"
             "try:\n    import_hf(sys.argv[1])\nexcept UserError as exc:\n    sys.exit(f'error: {exc}')\n")


def _tiny_llama(path: Path) -> None:
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=False)
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
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "../../../../etc/passwd"}}))


hf_layers_million = _hf_case("hf_layers_million", "HF config.json: num_hidden_layers 1,000,000 (weights: 2)",
                             _set_config(num_hidden_layers=1_000_000))
hf_positions_billion = _hf_case("hf_positions_billion", "HF config.json: max_position_embeddings 1e9",
                                _set_config(max_position_embeddings=1_000_000_000))
hf_vocab_trillion = _hf_case("hf_vocab_trillion", "HF config.json: vocab_size 1e12",
                             _set_config(vocab_size=1_000_000_000_000))
hf_zero_heads = _hf_case("hf_zero_heads", "HF config.json: num_attention_heads 0", _set_config(num_attention_heads=0))
hf_header_past_end = _hf_case("hf_header_past_end", "safetensors header length beyond the file's end",
                              _header_length_past_end)
hf_index_escapes = _hf_case("hf_index_escapes", "index.json naming ../../../../etc/passwd", _index_escapes)


CASES: tuple[Callable[[Path], Case], ...] = (
    jsonl_nul_line, warc_absurd_length, parquet_binary_text, jsonl_gz_newline_bomb, symlink_loop,
    html_deep_nesting,
    curate_into_foreign_dir, curate_into_cwd, config_name_escapes_root, run_dir_is_foreign,
    config_zero_micro_batch,
    hf_layers_million, hf_positions_billion, hf_vocab_trillion, hf_zero_heads, hf_header_past_end, hf_index_escapes,
)
