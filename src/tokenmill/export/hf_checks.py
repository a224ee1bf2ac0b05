"""What an HF Llama directory must be before `import_hf` builds anything from it.

A directory is data from elsewhere: its config.json could claim a million layers or a 10^12-token
vocabulary, and its safetensors headers absurd shapes or offsets outside the file. So, in
milliseconds and with no allocation beyond the headers themselves:

- config.json (at most MAX_JSON_BYTES) is checked field by field: every size a positive JSON
  integer under a stated limit, hidden_size divisible by num_attention_heads (an even head_dim,
  for RoPE), num_attention_heads by num_key_value_heads, norms' eps and RoPE's base finite
  and positive;
- every weight file's header is read by hand (8-byte little-endian length, then that much JSON,
  the length checked against MAX_HEADER_BYTES and the file's size before reading): each tensor's
  dtype known, shape a list of non-negative integers, data_offsets inside the file, their length
  shape × dtype size, and the tensors tiling the data without overlap or gap;
- `model.safetensors.index.json`'s weight_map names files inside the directory only (no
  absolute path, no "..", no symlink leading out);
- the tensors the config implies (names and shapes derived from it) are compared with the
  headers: one missing, one of another shape or a non-float dtype is refused, so a config
  claiming more layers than its weights hold never reaches the model's constructor.

Every refusal is one HFImportError line naming the file and the field or tensor.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill import json_limits
from tokenmill.errors import UserError

INDEX_FILE = "model.safetensors.index.json"
MAX_JSON_BYTES = 16 << 20  # config.json or the index: real ones are a few KB to ~100 KB
MAX_HEADER_BYTES = 64 << 20  # a safetensors header: ~150 bytes a tensor, so ~400k tensors
# Upper limits of a Llama config, well past every published Llama (405B: 126 layers, hidden 16384,
# ffn 53248, 128 heads, vocab 128256, 131072 positions) yet small enough that nothing built from
# them can exhaust a machine before the weights are compared.
LIMITS = {
    "vocab_size": 1 << 22,
    "hidden_size": 1 << 16,
    "num_hidden_layers": 1024,
    "num_attention_heads": 1024,
    "num_key_value_heads": 1024,
    "intermediate_size": 1 << 18,
    "max_position_embeddings": 1 << 20,
    "original_max_position_embeddings": 1 << 20,
}
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
}
WEIGHT_DTYPES = ("F32", "F16", "BF16", "F64")  # what a Llama's weights can be stored as


class HFImportError(UserError, ValueError):
    """A directory that is not a Llama model tokenmill can reproduce exactly."""

    def __init__(self, message: str) -> None:
        super().__init__(f"HF import: {message}")


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header, its offsets relative to the data after the header."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_json_bounded(path: Path, what: str) -> Any:
    """A JSON file of at most MAX_JSON_BYTES (checked before reading), parsed."""
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise HFImportError(f"{path}: {size} bytes, more than the {MAX_JSON_BYTES} a {what} may have")
        return json_limits.loads(path.read_bytes())
    except OSError as exc:
        raise HFImportError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    except ValueError as exc:  # not JSON, or nested deeper than json_limits allows
        raise HFImportError(f"{path}: not valid JSON ({str(exc)[:120]})") from exc


def _int_field(conf: dict[str, Any], key: str, where: Path, default: int | None = None) -> int:
    """conf[key] (or `default` when absent or null): an integer in [1, LIMITS[key]]."""
    value = conf.get(key)
    if value is None:
        if default is not None:
            return default
        raise HFImportError(f"{where}: {key} is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise HFImportError(f"{where}: {key} must be an integer (got {_show(value)})")
    if value < 1:
        raise HFImportError(f"{where}: {key} must be ≥ 1 (got {value})")
    if value > LIMITS[key]:
        raise HFImportError(f"{where}: {key} must be ≤ {LIMITS[key]} (got {value}), past any Llama tokenmill can import")
    return value


def _positive_float(conf: dict[str, Any], key: str, where: Path, default: float, zero_ok: bool = False) -> None:
    value = conf.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero_ok)
    ):
        raise HFImportError(f"{where}: {key} must be a finite number {'≥ 0' if zero_ok else '> 0'} (got {_show(value)})")


@dataclass(frozen=True)
class LlamaSizes:
    """The sizes of a checked config, which fix every tensor's shape."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    tie: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def check_config(conf: Any, where: Path) -> LlamaSizes:
    """Every size and number of config.json `where` checked (type, ≥ 1, limit, divisibility)."""
    if not isinstance(conf, dict):
        raise HFImportError(f"{where}: must be a JSON object (got {type(conf).__name__})")
    vocab, hidden = _int_field(conf, "vocab_size", where), _int_field(conf, "hidden_size", where)
    layers, heads = _int_field(conf, "num_hidden_layers", where), _int_field(conf, "num_attention_heads", where)
    ffn = _int_field(conf, "intermediate_size", where)
    kv = _int_field(conf, "num_key_value_heads", where, default=heads)
    _int_field(conf, "max_position_embeddings", where, default=2048)
    if hidden % heads or (hidden // heads) % 2:
        raise HFImportError(
            f"{where}: hidden_size {hidden} must be num_attention_heads {heads} × an even head_dim "
            f"(RoPE rotates pairs of channels)"
        )
    if heads % kv:
        raise HFImportError(f"{where}: num_attention_heads {heads} must be a multiple of num_key_value_heads {kv}")
    for key, default in (("rms_norm_eps", 1e-6), ("rope_theta", 10000.0)):
        _positive_float(conf, key, where, default)
    _positive_float(conf, "initializer_range", where, 0.02, zero_ok=True)
    for key in ("rope_parameters", "rope_scaling"):
        rope = conf.get(key)
        if rope is not None and not isinstance(rope, dict):
            raise HFImportError(f"{where}: {key} must be an object or null (got {_show(rope)})")
        if rope:
            _positive_float(rope, "factor", where, 1.0)
            _positive_float(rope, "rope_theta", where, 10000.0)
            if rope.get("original_max_position_embeddings") is not None:
                _int_field(rope, "original_max_position_embeddings", where)
    tie = conf.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise HFImportError(f"{where}: tie_word_embeddings must be true or false (got {_show(tie)})")
    return LlamaSizes(vocab, hidden, layers, heads, kv, ffn, tie)


def expected_tensors(s: LlamaSizes) -> dict[str, tuple[tuple[int, ...], str]]:
    """HF name -> (shape, the config fields that fix it) of every tensor a Llama of sizes `s` has."""
    d, kv_out = s.hidden, s.kv_heads * s.head_dim
    vocab: tuple[tuple[int, ...], str] = ((s.vocab, d), f"vocab_size {s.vocab}, hidden_size {d}")
    out: dict[str, tuple[tuple[int, ...], str]] = {"model.embed_tokens.weight": vocab}
    kv_why = f"num_key_value_heads {s.kv_heads} × head_dim {s.head_dim}, hidden_size {d}"
    for i in range(s.layers):
        p = f"model.layers.{i}."
        out.update(
            {
                p + "input_layernorm.weight": ((d,), f"hidden_size {d}"),
                p + "self_attn.q_proj.weight": ((d, d), f"hidden_size {d}"),
                p + "self_attn.k_proj.weight": ((kv_out, d), kv_why),
                p + "self_attn.v_proj.weight": ((kv_out, d), kv_why),
                p + "self_attn.o_proj.weight": ((d, d), f"hidden_size {d}"),
                p + "post_attention_layernorm.weight": ((d,), f"hidden_size {d}"),
                p + "mlp.gate_proj.weight": ((s.ffn, d), f"intermediate_size {s.ffn}, hidden_size {d}"),
                p + "mlp.up_proj.weight": ((s.ffn, d), f"intermediate_size {s.ffn}, hidden_size {d}"),
                p + "mlp.down_proj.weight": ((d, s.ffn), f"hidden_size {d}, intermediate_size {s.ffn}"),
            }
        )
    out["model.norm.weight"] = ((d,), f"hidden_size {d}")
    out["lm_head.weight"] = vocab  # optional when tied (checked by the caller)
    return out


def _entry(file: Path, name: str, raw: Any, data_len: int) -> TensorEntry:
    """One header entry checked: known dtype, a shape of integers ≥ 0, offsets inside the data
    whose length is exactly shape × dtype size."""
    where = f"{file}: tensor {name}"
    if not isinstance(raw, dict):
        raise HFImportError(f"{where}: header entry must be an object (got {_show(raw)})")
    dtype, shape, offsets = raw.get("dtype"), raw.get("shape"), raw.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise HFImportError(f"{where}: unknown dtype {_show(dtype)}")
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise HFImportError(f"{where}: shape must be a list of at most 8 integers ≥ 0 (got {_show(shape)})")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
    ):
        raise HFImportError(f"{where}: data_offsets must be [begin, end] (got {_show(offsets)})")
    begin, end = offsets
    if not 0 <= begin <= end <= data_len:
        raise HFImportError(f"{where}: data_offsets [{begin}, {end}] lie outside the file's {data_len} data bytes")
    need = math.prod(shape) * DTYPE_BYTES[dtype]
    if end - begin != need:
        raise HFImportError(
            f"{where}: shape {_show(shape)} of {dtype} needs {need} bytes, data_offsets [{begin}, {end}] hold {end - begin}"
        )
    return TensorEntry(dtype, tuple(shape), begin, end)


def _check_tiling(file: Path, entries: dict[str, TensorEntry], data_len: int) -> None:
    """The tensors' byte ranges cover the data exactly once, as the safetensors format requires."""
    at, last = 0, None
    for name, e in sorted(entries.items(), key=lambda kv: (kv[1].begin, kv[1].end)):
        if e.begin < at:
            raise HFImportError(f"{file}: tensor {name}: data_offsets [{e.begin}, {e.end}] overlap tensor {last}'s")
        if e.begin > at:
            raise HFImportError(
                f"{file}: tensor {name}: data_offsets [{e.begin}, {e.end}] leave bytes "
                f"{at}..{e.begin} unused (tensors must tile the data)"
            )
        at, last = e.end, name
    if at != data_len:
        raise HFImportError(f"{file}: the tensors end at data byte {at}, the file holds {data_len}")


def _read_raw_header(file: Path) -> tuple[bytes, int]:
    """(header bytes, data length) of a safetensors file, the length field checked against
    MAX_HEADER_BYTES and the file's size before the header is read."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise HFImportError(f"{file}: {size} bytes, shorter than the 8-byte header length of a safetensors file")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES:
                raise HFImportError(f"{file}: header length {n} is over the {MAX_HEADER_BYTES}-byte limit")
            if 8 + n > size:
                raise HFImportError(f"{file}: header length {n} runs past the end of the file ({size} bytes)")
            return fh.read(n), size - 8 - n
    except OSError as exc:
        raise HFImportError(f"{file}: cannot be read ({exc.strerror or exc})") from exc


def read_header(file: Path) -> dict[str, TensorEntry]:
    """The tensors a safetensors file holds, every entry checked against the file's size."""
    raw, data_len = _read_raw_header(file)
    try:
        header = json_limits.loads(raw)
    except ValueError as exc:  # not JSON, or nested deeper than json_limits allows
        raise HFImportError(f"{file}: header is not valid JSON ({str(exc)[:120]})") from exc
    if not isinstance(header, dict):
        raise HFImportError(f"{file}: header must be a JSON object (got {type(header).__name__})")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise HFImportError(f"{file}: __metadata__ must be an object of strings")
    entries = {name: _entry(file, name, raw_entry, data_len) for name, raw_entry in header.items() if name != "__metadata__"}
    _check_tiling(file, entries, data_len)
    return entries


def _inside(root: Path, rel: Any, index: Path, name: str) -> Path:
    """The weight file `rel` (a weight_map value) under root, refused if it could lead outside."""
    where = f"{index}: weight_map[{json.dumps(name)}]"
    if not isinstance(rel, str) or not rel:
        raise HFImportError(f"{where} must be a file name (got {_show(rel)})")
    parts = Path(rel).parts
    if Path(rel).is_absolute() or "\\" in rel or ".." in parts:
        raise HFImportError(f"{where}: {_show(rel)} leaves the model directory (a relative path without '..' is expected)")
    full = root / rel
    if not full.resolve().is_relative_to(root.resolve()):
        raise HFImportError(f"{where}: {_show(rel)} is a link leading out of the model directory")
    if not full.is_file():
        raise HFImportError(f"{where}: {full} is not a file")
    return full


def weight_files(root: Path) -> dict[Path, list[str] | None]:
    """Weight file -> the tensors the index says it holds (None: the single model.safetensors)."""
    index = root / INDEX_FILE
    if index.is_file():
        conf = read_json_bounded(index, "safetensors index")
        wmap = conf.get("weight_map") if isinstance(conf, dict) else None
        if not isinstance(wmap, dict) or not wmap:
            raise HFImportError(f"{index}: weight_map must be a non-empty object of tensor name -> file")
        files: dict[Path, list[str] | None] = {}
        for name, rel in wmap.items():
            names = files.setdefault(_inside(root, rel, index, name), [])
            assert names is not None
            names.append(name)
        return files
    single = root / "model.safetensors"
    if single.is_file():
        if not single.resolve().is_relative_to(root.resolve()):
            raise HFImportError(f"{single}: a link leading out of the model directory")
        return {single: None}
    raise HFImportError(
        f"{root}: no model.safetensors or {INDEX_FILE} (PyTorch .bin weights are not read: unpickling them could run code)"
    )


def _layers_held(present: dict[str, Any]) -> int:
    """How many consecutive layers, from 0, the weights hold a q_proj of (for the refusal's text)."""
    n = 0
    while f"model.layers.{n}.self_attn.q_proj.weight" in present:
        n += 1
    return n


def _compare(source: Path, sizes: LlamaSizes, present: dict[str, tuple[Path, TensorEntry]]) -> None:
    """Every tensor the config implies, present with its shape and a float dtype; nothing else
    (`source`: the weight file or index a missing tensor is reported against)."""
    expected = expected_tensors(sizes)
    missing = [n for n in expected if n not in present and not (n == "lm_head.weight" and sizes.tie)]
    if missing:
        held = _layers_held(present)
        why = f" (config.json num_hidden_layers {sizes.layers}; the weights hold {held})" if held != sizes.layers else ""
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise HFImportError(f"{source}: tensor {missing[0]} is missing{more}{why}")
    for name, (shape, why) in expected.items():  # in the model's order: the first misfit is the one named
        if name not in present:
            continue  # only a tied lm_head.weight may be absent
        file, e = present[name]
        if e.shape != shape:
            raise HFImportError(
                f"{file}: tensor {name}: shape {list(e.shape)} does not match config.json ({why}) -> {list(shape)}"
            )
        if e.dtype not in WEIGHT_DTYPES:
            raise HFImportError(f"{file}: tensor {name}: dtype {e.dtype}; a weight must be one of {', '.join(WEIGHT_DTYPES)}")
    for name, (file, _) in present.items():
        if name not in expected and not name.endswith("rotary_emb.inv_freq"):  # old checkpoints store the
            # RoPE table, which tokenmill recomputes
            layers = f" of config.json's num_hidden_layers {sizes.layers}" if name.startswith("model.layers.") else ""
            raise HFImportError(f"{file}: tensor {name}: not part of a Llama{layers} (unexpected tensor)")


def check_weights(root: Path, sizes: LlamaSizes) -> dict[Path, list[str]]:
    """Weight file -> the tensor names to load from it, once every header is checked and the
    tensors are exactly those a Llama of `sizes` has; nothing is loaded here."""
    present: dict[str, tuple[Path, TensorEntry]] = {}
    for file, listed in weight_files(root).items():
        entries = read_header(file)
        if listed is not None:
            absent = [n for n in listed if n not in entries]
            if absent:
                raise HFImportError(
                    f"{root / INDEX_FILE}: weight_map puts tensor {absent[0]} in {file}, whose header has no such tensor"
                )
        for name, e in entries.items():
            if name in present:
                raise HFImportError(f"{file}: tensor {name}: also in {present[name][0]}")
            present[name] = (file, e)
    _compare(root / INDEX_FILE if (root / INDEX_FILE).is_file() else root / "model.safetensors", sizes, present)
    out: dict[Path, list[str]] = {}
    for name, (file, _) in present.items():
        out.setdefault(file, []).append(name)
    return out
