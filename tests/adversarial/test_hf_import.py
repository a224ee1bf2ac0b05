"""Hostile Hugging Face directories for `train.init_from`: a real directory written with tokenmill's
exporter (its `llama_config` and `hf_state_dict`, into real safetensors files, one or two shards),
then corrupted one way per case. Each is refused before anything is built: one line naming the
file and the field or tensor, in well under 2 s, and without the process's peak memory growing
(measured in a child process with ru_maxrss, under an address-space limit so that a regression
fails the test instead of exhausting the machine). Two cases go through `tokenmill train`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from safetensors.torch import save_file

from tests.adversarial.conftest import assert_clean_error, assert_untouched, run_cli, tree_snapshot
from tests.conftest import TINY_VOCAB
from tokenmill.export.hf import hf_state_dict, llama_config
from tokenmill.model.config import ModelConfig
from tokenmill.model.transformer import Transformer

# the tiny_run fixture's model, so a valid directory would also fit that run
MODEL = dict(vocab_size=TINY_VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=32,
             tie_embeddings=False)
Q0 = "model.layers.0.self_attn.q_proj.weight"


def write_hf(out: Path, shards: int = 1) -> Path:
    """An HF Llama directory as `tokenmill export hf` writes it (one file, or `shards` files + index)."""
    model = Transformer(ModelConfig(**MODEL), generator=torch.Generator().manual_seed(0))
    tensors = hf_state_dict(model, tie=False)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(llama_config(model.config)))
    if shards == 1:
        save_file(tensors, str(out / "model.safetensors"))
        return out
    names = list(tensors)
    wmap = {}
    for k in range(shards):
        part = names[k::shards]
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, str(out / fname))
        wmap.update({n: fname for n in part})
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    return out


def edit_config(d: Path, **over: Any) -> None:
    conf = json.loads((d / "config.json").read_text())
    conf.update(over)
    (d / "config.json").write_text(json.dumps(conf))


def edit_header(file: Path, fn: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a safetensors file's header JSON (the data bytes kept as they are)."""
    raw = file.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    fn(header)
    new = json.dumps(header).encode()
    file.write_bytes(len(new).to_bytes(8, "little") + new + raw[8 + n:])


def edit_index(d: Path, name: str, value: str) -> None:
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"][name] = value
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


def _set(name: str, **over: Any) -> Callable[[dict[str, Any]], None]:
    return lambda h: h[name].update(over)


def _swap(name: str) -> Callable[[dict[str, Any]], None]:  # the same bytes, the transposed shape
    return lambda h: h[name].update(shape=h[name]["shape"][::-1])


def _overlap(h: dict[str, Any]) -> None:  # two same-sized tensors on the same bytes
    h["model.layers.0.post_attention_layernorm.weight"]["data_offsets"] = \
        h["model.layers.0.input_layernorm.weight"]["data_offsets"]


def _header_past_end(d: Path) -> None:
    f = d / "model.safetensors"
    raw = f.read_bytes()
    f.write_bytes((len(raw) + 1000).to_bytes(8, "little") + raw[8:])


def _header_over_limit(d: Path) -> None:  # a sparse file, so the claimed header really fits in it
    from tokenmill.export.hf_checks import MAX_HEADER_BYTES

    with open(d / "model.safetensors", "r+b") as fh:
        fh.write((MAX_HEADER_BYTES + 1).to_bytes(8, "little"))
        fh.truncate(MAX_HEADER_BYTES + (1 << 20))


def _config_huge(d: Path) -> None:  # 17 MiB of whitespace before the object: valid JSON, so only the
    # size bound (checked before reading) refuses it
    conf = (d / "config.json").read_bytes()
    (d / "config.json").write_bytes(b" " * (17 << 20) + conf)


def _drop_tensor(d: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(d / "model.safetensors"))
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, str(d / "model.safetensors"))


def _link_out(d: Path) -> None:
    outside = d.parent / "elsewhere.safetensors"
    (d / "model-00001-of-00002.safetensors").rename(outside)
    (d / "model-00001-of-00002.safetensors").symlink_to(outside)


ST = "model.safetensors"
IDX = "model.safetensors.index.json"
# case: (shards, corruption, the file the refusal names, what else it must name)
CASES: dict[str, tuple[int, Callable[[Path], None], str, tuple[str, ...]]] = {
    "layers_1e6": (1, lambda d: edit_config(d, num_hidden_layers=1_000_000), "config.json", ("num_hidden_layers",)),
    "layers_200": (1, lambda d: edit_config(d, num_hidden_layers=200), ST, ("model.layers.2.", "num_hidden_layers 200")),
    "positions_1e9_float": (1, lambda d: edit_config(d, max_position_embeddings=1e9), "config.json",
                            ("max_position_embeddings must be an integer",)),
    "positions_1e9": (1, lambda d: edit_config(d, max_position_embeddings=10**9), "config.json",
                      ("max_position_embeddings must be ≤",)),
    "vocab_1e12_float": (1, lambda d: edit_config(d, vocab_size=1e12), "config.json", ("vocab_size must be an integer",)),
    "vocab_1e12": (1, lambda d: edit_config(d, vocab_size=10**12), "config.json", ("vocab_size must be ≤",)),
    "vocab_4e6": (1, lambda d: edit_config(d, vocab_size=4_000_000), ST, ("model.embed_tokens.weight", "vocab_size 4000000")),
    "heads_0": (1, lambda d: edit_config(d, num_attention_heads=0), "config.json", ("num_attention_heads must be ≥ 1 (got 0)",)),
    "heads_indivisible": (1, lambda d: edit_config(d, num_attention_heads=5), "config.json", ("num_attention_heads 5",)),
    "kv_indivisible": (1, lambda d: edit_config(d, num_key_value_heads=3), "config.json", ("num_key_value_heads 3",)),
    "hidden_string": (1, lambda d: edit_config(d, hidden_size="32"), "config.json", ("hidden_size must be an integer",)),
    "config_huge": (1, _config_huge, "config.json", ("bytes, more than",)),
    "header_past_end": (1, _header_past_end, ST, ("header length", "past the end")),
    "header_over_limit": (1, _header_over_limit, ST, ("header length", "limit")),
    "absurd_shape": (1, lambda d: edit_header(d / ST, _set(Q0, shape=[10**12, 32])), ST, (Q0, "shape")),
    "swapped_shape": (1, lambda d: edit_header(d / ST, _swap("model.layers.0.mlp.up_proj.weight")), ST, ("model.layers.0.mlp.up_proj.weight", "does not match config.json", "intermediate_size")),
    "offsets_outside": (1, lambda d: edit_header(d / ST, _set(Q0, data_offsets=[0, 10**15])), ST, (Q0, "data_offsets")),
    "offsets_overlap": (1, lambda d: edit_header(d / ST, _overlap), ST, ("overlap", "layernorm.weight")),
    "dtype_size": (1, lambda d: edit_header(d / ST, _set(Q0, dtype="F16")), ST, (Q0, "F16 needs")),
    "dtype_int": (1, lambda d: edit_header(d / ST, _set(Q0, dtype="I32")), ST, (Q0, "dtype I32")),
    "dtype_unknown": (1, lambda d: edit_header(d / ST, _set(Q0, dtype="F128")), ST, (Q0, "unknown dtype")),
    "missing_tensor": (1, _drop_tensor, ST, ("model.layers.1.mlp.down_proj.weight", "missing")),
    "index_dotdot": (2, lambda d: edit_index(d, Q0, "../../etc/passwd"), IDX, ("weight_map", Q0, "../../etc/passwd")),
    "index_absolute": (2, lambda d: edit_index(d, Q0, "/etc/passwd"), IDX, ("weight_map", Q0, "/etc/passwd")),
    "index_symlink_out": (2, _link_out, IDX, ("weight_map", "link leading out")),
    "index_wrong_shard": (2, lambda d: edit_index(d, Q0, "model-00002-of-00002.safetensors"), IDX,
                          ("weight_map", Q0, "no such tensor")),
}

CHILD = r"""
import json, resource, sys, time
from tokenmill.export.hf_import import HFImportError, import_hf
dirs = json.loads(sys.argv[1])
import_hf(dirs.pop("valid"))  # warm: every import done, allocator pools in place
vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))  # a regression fails, not the host
out = {}
for case, d in dirs.items():
    peak, t = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    try:
        import_hf(d)
        msg = "imported"
    except HFImportError as exc:
        msg = str(exc)
    except BaseException as exc:
        msg = "CRASH " + type(exc).__name__ + ": " + str(exc)[:300]
    out[case] = {"msg": msg, "s": time.perf_counter() - t,
                 "grew_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's refusal, time and peak-RSS growth, from one child process."""
    root = tmp_path_factory.mktemp("hf")
    dirs = {"valid": str(write_hf(root / "valid")), "valid_sharded": str(write_hf(root / "valid_sharded", 2))}
    for case, (shards, corrupt, _, _) in CASES.items():
        d = write_hf(root / case / "hf", shards)
        corrupt(d)
        dirs[case] = str(d)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(dirs)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"dirs": dirs, **json.loads(proc.stdout.splitlines()[-1])}


@pytest.mark.parametrize("case", list(CASES))
def test_a_corrupt_directory_is_refused_before_anything_is_built(outcomes, case):
    _, _, file, fields = CASES[case]
    got = outcomes[case]
    msg = got["msg"]
    assert msg.startswith("HF import: "), msg
    assert "\n" not in msg and str(Path(outcomes["dirs"][case]) / file) in msg, msg
    for text in fields:
        assert text in msg, (text, msg)
    assert got["s"] < 2.0, got
    assert got["grew_kb"] < 32 * 1024, got  # the model this config claims would need gigabytes to terabytes


def test_valid_directories_still_import(outcomes):
    assert outcomes["valid_sharded"]["msg"] == "imported", outcomes["valid_sharded"]


@pytest.mark.parametrize("case", ["heads_0", "index_dotdot"])
def test_tokenmill_train_refuses_a_corrupt_init_from_in_one_line(tiny_run, tmp_path, case):
    """The path a user takes: `tokenmill train RUN.yaml --set train.init_from=DIR` on a new run."""
    shards, corrupt, file, fields = CASES[case]
    hf = write_hf(tmp_path / "hf", shards)
    corrupt(hf)
    from tokenmill.runs import RunDir

    cont = tiny_run.path.parent / "cont"
    RunDir.create(tiny_run.config, cont)  # tokenmill makes the run directory: a folder it did not make is refused
    (cont / "tokens").symlink_to(tiny_run.path / "tokens")
    before = tree_snapshot(tmp_path)
    result = run_cli("train", tiny_run.path / "config.yaml", "--set", "name=cont",
                     "--set", f"train.init_from={hf}", "--set", "train.max_steps=2")
    assert_clean_error(result, str(hf / file), *fields)
    assert_untouched(before, tree_snapshot(tmp_path), created_under=("cont",))


def test_a_whole_run_refuses_it_before_its_first_stage(tiny_run, tmp_path):
    """`tokenmill run` would curate and tokenize for hours before training: the source is checked first."""
    from tokenmill.config import RunConfig
    from tokenmill.export.hf_import import HFImportError
    from tokenmill.pipeline import run_pipeline
    from tokenmill.runs import RunDir

    hf = write_hf(tmp_path / "hf")
    edit_config(hf, num_hidden_layers=1_000_000)
    raw = tiny_run.config.model_dump(mode="json")
    raw["train"]["init_from"] = str(hf)
    (tmp_path / "docs.jsonl").write_text('{"text": "a document to curate"}\n')
    raw["curate"]["sources"] = [{"path": str(tmp_path / "docs.jsonl"), "bucket": "a"}]  # a config curate accepts
    run = RunDir.create(RunConfig.model_validate({**raw, "name": "cont"}), tmp_path / "cont")
    with pytest.raises(HFImportError, match="config.json: num_hidden_layers must be ≤ 1024"):
        run_pipeline(run)
    events = (run.path / "events.jsonl").read_text() if (run.path / "events.jsonl").exists() else ""
    assert "stage_start" not in events
