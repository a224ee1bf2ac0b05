import json
import os
import random
import warnings

import numpy as np
import pytest
import torch

from tokenmill.config import ModelConfig, TrainConfig
from tokenmill.model.objectives import clm_loss
from tokenmill.model.transformer import Transformer
from tokenmill.runs import EventLog
from tokenmill.train.checkpoint import (CheckpointError, checkpoint_fingerprint, latest_checkpoint, list_checkpoints,
                                        save_checkpoint, verify_checkpoint)
from tokenmill.train.restore import load_checkpoint, load_model
from tokenmill.train.optimizer import build_optimizer

CFG = ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=16)
TC = TrainConfig(lr=1e-2, warmup_steps=0, max_steps=10)


def trained(seed: int = 0, steps: int = 2) -> tuple[Transformer, torch.optim.Optimizer]:
    m = Transformer(CFG, generator=torch.Generator().manual_seed(seed))
    opt = build_optimizer(m, TC)
    g = torch.Generator().manual_seed(seed + 100)
    for _ in range(steps):
        clm_loss(m, torch.randint(0, 50, (4, 17), generator=g)).backward()
        opt.step()
        opt.zero_grad()
    return m, opt


def save(root, step, m, opt, keep=None):
    return save_checkpoint(root, step, m, opt, {"model_config": CFG.model_dump(), "train_fingerprint": "fp"}, keep=keep)


def step_once(m, opt, tokens):
    clm_loss(m, tokens).backward()
    opt.step()
    opt.zero_grad()


def test_roundtrip_is_bit_exact_including_optimizer_and_rng(tmp_path):
    m, opt = trained()
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    path = save(tmp_path, 2, m, opt)
    assert sorted(p.name for p in path.iterdir()) == ["SHA256SUMS", "model.safetensors", "optim.pt",
                                                      "rng.safetensors", "state.json"]
    after_save = (random.random(), np.random.rand(), torch.rand(3))

    m2, opt2 = trained(seed=9, steps=1)  # different weights and optimizer state
    state = load_checkpoint(path, m2, opt2)
    assert state["step"] == 2 and state["train_fingerprint"] == "fp" and checkpoint_fingerprint(path) == "fp"
    for (n, a), b in zip(m.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), n
    assert m2.lm_head.weight is m2.embed_tokens.weight  # still tied after loading
    # RNG states restored: the same numbers come out again
    assert (random.random(), np.random.rand()) == after_save[:2] and torch.equal(torch.rand(3), after_save[2])
    # the whole state S_t round-tripped: one more identical step gives identical weights
    tokens = torch.randint(0, 50, (4, 17), generator=torch.Generator().manual_seed(7))
    step_once(m, opt, tokens)
    step_once(m2, opt2, tokens)
    for (n, a), b in zip(m.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), n


def test_optimizer_file_loads_with_weights_only(tmp_path):
    m, opt = trained()
    path = save(tmp_path, 2, m, opt)
    sd = torch.load(path / "optim.pt", weights_only=True)
    assert len(sd["state"]) == len(list(m.parameters()))


def test_sha_mismatch_is_detected(tmp_path):
    m, opt = trained()
    path = save(tmp_path, 2, m, opt)
    verify_checkpoint(path)
    blob = bytearray((path / "model.safetensors").read_bytes())
    blob[-5] ^= 0xFF
    (path / "model.safetensors").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="model.safetensors"):
        verify_checkpoint(path)
    with pytest.raises(CheckpointError):
        load_model(path)


def test_latest_falls_back_past_corrupt_and_partial_checkpoints(tmp_path):
    m, opt = trained()
    save(tmp_path, 1, m, opt)
    save(tmp_path, 2, m, opt)
    p3 = save(tmp_path, 3, m, opt)
    (p3 / "SHA256SUMS").unlink()  # a directory without sums (e.g. copied in half way)
    with open(tmp_path / "step_2" / "optim.pt", "r+b") as fh:  # and a truncated file
        fh.truncate(100)
    events = EventLog(tmp_path / "events.jsonl")
    with pytest.warns(UserWarning, match="skipping checkpoint"):
        assert latest_checkpoint(tmp_path, events) == tmp_path / "step_1"
    bad = [e for e in events.read() if e["kind"] == "checkpoint_corrupt"]
    assert [e["step"] for e in bad] == [3, 2] and "optim.pt" in bad[1]["reason"]


def test_no_tmp_left_behind_and_stale_tmp_is_cleaned(tmp_path):
    m, opt = trained()
    (tmp_path / "step_7.tmp").mkdir()  # a write killed half way
    (tmp_path / "step_7.tmp" / "model.safetensors").write_bytes(b"partial")
    save(tmp_path, 5, m, opt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_5"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert latest_checkpoint(tmp_path) == tmp_path / "step_5"


def test_keep_newest_and_overwrite_same_step(tmp_path):
    m, opt = trained()
    for s in (10, 20, 30, 40):
        save(tmp_path, s, m, opt, keep=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [30, 40]
    m2, opt2 = trained(seed=4)
    save(tmp_path, 40, m2, opt2, keep=2)  # replacing an existing step works and verifies
    verify_checkpoint(tmp_path / "step_40")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_30", "step_40"]
    loaded, _ = load_model(tmp_path / "step_40")
    assert torch.equal(loaded.layers[0].mlp.gate_up_proj.weight, m2.layers[0].mlp.gate_up_proj.weight)


def test_load_model_for_evaluation(tmp_path):
    m, opt = trained()
    save(tmp_path, 3, m, opt)
    save(tmp_path, 4, m, opt)
    loaded, step = load_model(tmp_path / "step_3")
    assert step == 3 and not loaded.training and loaded.config == CFG
    tokens = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        assert torch.equal(loaded(tokens), m.eval()(tokens))
    assert load_model(tmp_path)[1] == 4  # a checkpoints/ directory: its newest valid one
    state = json.loads((tmp_path / "step_3" / "state.json").read_text())
    assert state["model_config"]["vocab_size"] == 50 and "python" in state["rng"]


# --------------------------------------------------------------------------- retention
def expected_survivors(saved: list[int], keep: int, keep_every: int) -> set[int]:
    """Retention replayed by hand: after each save, drop every step that is neither among the
    `keep` highest present, nor a multiple of keep_every, nor the one just written."""
    present: set[int] = set()
    for step in saved:
        present.add(step)
        highest = sorted(present, reverse=True)[:keep]
        present = {s for s in present if s in highest or (keep_every and s % keep_every == 0) or s == step}
    return present


@pytest.mark.parametrize("keep,keep_every,saved", [
    (2, 0, [10, 20, 30, 40, 50]),
    (2, 30, [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]),
    (1, 4, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    (3, 20, [10, 20, 30, 40, 20, 50, 60]),  # a rollback re-writes step 20, below the newest three
    (2, 25, [10, 20, 30, 40, 15]),          # ...and the re-written older step is never deleted
])
def test_retention_keeps_the_newest_and_the_milestones(tmp_path, keep, keep_every, saved):
    m, opt = trained()
    for i, step in enumerate(saved):
        save_checkpoint(tmp_path, step, m, opt, {"model_config": CFG.model_dump()}, keep=keep, keep_every=keep_every)
        assert {s for s, _ in list_checkpoints(tmp_path)} == expected_survivors(saved[: i + 1], keep, keep_every)
        assert (tmp_path / f"step_{step}").is_dir()  # the checkpoint just written survives
    for _, p in list_checkpoints(tmp_path):
        verify_checkpoint(p)


def test_retention_keeps_everything_without_keep(tmp_path):
    m, opt = trained()
    for s in (1, 2, 3):
        save_checkpoint(tmp_path, s, m, opt, {}, keep=None, keep_every=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1, 2, 3]


class _RunsCode:
    """A pickled object whose unpickling would call a function: what weights_only must refuse."""

    def __reduce__(self):
        return (print, ("code from a checkpoint ran",))


def _resum(path):
    """Rewrite SHA256SUMS to match the files as they are: a tampered checkpoint that verifies."""
    import hashlib

    names = [n for n in ("model.safetensors", "optim.pt", "rng.safetensors", "state.json")]
    lines = [f"{hashlib.sha256((path / n).read_bytes()).hexdigest()}  {n}\n" for n in names]
    (path / "SHA256SUMS").write_text("".join(lines))
    verify_checkpoint(path)  # the checksums no longer catch it


def test_pickled_object_in_optim_pt_is_refused_in_one_line_naming_the_file(tmp_path, capsys):
    m, opt = trained()
    path = save(tmp_path, 2, m, opt)
    torch.save({"state": {}, "param_groups": [], "hook": _RunsCode()}, path / "optim.pt")
    _resum(path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, *trained(seed=1, steps=0))
    msg = str(err.value)
    assert msg.startswith(f"{path / 'optim.pt'}: not a tensors-only file") and "\n" not in msg
    assert "Unsupported global" in msg and "tokenmill never runs code from a checkpoint" in msg
    assert "code from a checkpoint ran" not in capsys.readouterr().out  # refused before it was built


@pytest.mark.parametrize("junk", [b"\x00" * 3, b"not a pickle or a zip at all"])
def test_garbage_optim_pt_is_refused_in_one_line(tmp_path, junk):
    path = save(tmp_path, 2, *trained())
    (path / "optim.pt").write_bytes(junk)
    _resum(path)
    with pytest.raises(CheckpointError, match=r"optim\.pt: not a tensors-only file") as err:
        load_checkpoint(path, *trained(seed=1, steps=0))
    assert "\n" not in str(err.value)


def _bad_header(data: bytes) -> bytes:
    """The same file with its JSON header's first bytes overwritten (length field intact)."""
    return data[:8] + b"{garbage" + data[16:]


def _huge_length(data: bytes) -> bytes:
    """A header length of 1 TiB: more than the file holds."""
    return (1 << 40).to_bytes(8, "little") + data[8:]


@pytest.mark.parametrize("damage", [_bad_header, _huge_length, lambda d: d[:5]])
@pytest.mark.parametrize("name", ["model.safetensors", "rng.safetensors"])
def test_corrupt_safetensors_header_is_refused_in_one_line(tmp_path, damage, name):
    path = save(tmp_path, 2, *trained())
    (path / name).write_bytes(damage((path / name).read_bytes()))
    _resum(path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, *trained(seed=1, steps=0))
    msg = str(err.value)
    assert msg.startswith(f"{path / name}: not a valid safetensors file (") and "\n" not in msg
    if name == "model.safetensors":  # evaluation and export read the weights the same way
        with pytest.raises(CheckpointError, match="not a valid safetensors file"):
            load_model(path)


def test_tampered_checkpoint_through_the_cli_gives_one_line(tmp_path):
    """`tokenmill export hf` of a checkpoint whose weights header is garbage (checksums rewritten):
    a real process, exit 1, one line naming the file, no traceback."""
    import subprocess
    import sys

    path = save(tmp_path / "ckpts", 2, *trained())
    (path / "model.safetensors").write_bytes(_bad_header((path / "model.safetensors").read_bytes()))
    _resum(path)
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")  # only checked to exist before the weights are read
    out = subprocess.run([sys.executable, "-m", "tokenmill", "export", "hf", str(path), str(tmp_path / "hf"), "--tokenizer",
                          str(tok)], capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "Traceback" not in text and "SafetensorError" not in text
    assert f"{path / 'model.safetensors'}: not a valid safetensors file (invalid JSON in header" in text
    assert not (tmp_path / "hf").exists()
