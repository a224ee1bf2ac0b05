"""The training memory estimate against the real thing: parameter, gradient and AdamW bytes of a
built model after a real step; activation bytes against what autograd actually saves; the peak
against a profiled training step (CPU allocator events)."""

import inspect

import pytest
import torch

from tokenmill.config import MixtureConfig, ModelConfig, TrainConfig
from tokenmill.mixture.loader import Loader
from tokenmill.model.objectives import token_nll_batch
from tokenmill.model.transformer import Transformer, document_positions
from tokenmill.scaling.memory import (activation_bytes, estimate_train_memory, matmul_weights,
                                      profiled_peak_bytes, tensor_bytes)
from tokenmill.tokens.store import TokenStore
from tokenmill.train.device import autocast
from tokenmill.train.optimizer import build_optimizer
from tests.conftest import write_tiny_store

CPU = torch.device("cpu")
BASE = {"vocab_size": 500, "d_model": 48, "n_layers": 2, "n_heads": 4, "max_seq_len": 32, "ffn_hidden": 112}
VARIANTS = [{}, {"n_kv_heads": 2}, {"norm": "layernorm"}, {"ffn": "gelu"}, {"position": "learned"},
            {"qk_norm": True}, {"qk_norm": True, "n_kv_heads": 2, "norm": "layernorm"}, {"sliding_window": 8},
            {"tie_embeddings": False}, {"norm": "layernorm", "ffn": "gelu", "position": "learned"}]


def one_step(model: Transformer, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> None:
    loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    opt.step()


@pytest.mark.parametrize("kw", [{}, {"tie_embeddings": False, "n_kv_heads": 2}, {"position": "learned", "qk_norm": True},
                                {"n_experts": 4, "top_k": 2}])
def test_params_grads_and_adamw_state_are_exact(kw):
    cfg = ModelConfig(**{**BASE, **kw})
    model = Transformer(cfg)
    tc = TrainConfig(seq_len=16, micro_batch=2, grad_accum=1)
    opt = build_optimizer(model, tc, CPU)
    one_step(model, opt, torch.randint(0, 500, (2, 17)))
    params = list(model.parameters())
    est = estimate_train_memory(cfg, tc, "float32")
    assert est["params"] == tensor_bytes(params)
    assert est["grads"] == tensor_bytes(p.grad for p in params)
    assert est["optimizer"] == tensor_bytes(t for p in params for k, t in opt.state[p].items() if k != "step")
    fsdp = estimate_train_memory(cfg, tc, "float32", world_size=2, mode="fsdp")
    assert fsdp["params"] == -(-est["params"] // 2) and fsdp["optimizer"] == -(-est["optimizer"] // 2)
    assert estimate_train_memory(cfg, tc, "float32", world_size=2, mode="ddp")["ddp_buckets"] == est["grads"]


def batch_inputs(model: Transformer, B: int, T: int, doc_masking: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token ids [B, T + 1] and the forward's keyword arguments (two documents per row, or none)."""
    tokens = torch.randint(0, model.config.vocab_size, (B, T + 1), generator=torch.Generator().manual_seed(0))
    if not doc_masking:
        return tokens, {}
    seg = torch.zeros(B, T, dtype=torch.long)
    seg[:, T // 3:] = 1
    return tokens, {"segments": seg, "positions": document_positions(seg)}


def saved_bytes(model: Transformer, dtype: torch.dtype, B: int, T: int, doc_masking: bool) -> int:
    """Bytes of the distinct non-parameter storages autograd saves in one forward + loss."""
    tokens, kwargs = batch_inputs(model, B, T, doc_masking)
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(CPU, dtype):
        logits = model(tokens[:, :-1], **kwargs)
        torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
    return sum(seen.values())


@pytest.mark.parametrize("kw", VARIANTS)
def test_activation_bytes_equal_what_autograd_saves(kw):
    """Term by term the module doc's count is what the backward keeps (up to the 4-byte loss scalar),
    for each norm / FFN / position / attention option, fp32 and bf16 autocast, with and without
    document masking. bf16 also saves the autocast weight copies, counted apart."""
    cfg = ModelConfig(**{**BASE, **kw})
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0))
    B, T = 3, 20
    for dtype in (torch.float32, torch.bfloat16):
        copies = 0 if dtype == torch.float32 else 2 * (cfg.n_layers * matmul_weights(cfg)["per_layer"]
                                                       + matmul_weights(cfg)["lm_head"])
        for doc in (False, True):
            expected = activation_bytes(cfg, B, T, dtype, doc) + 4 * B * T * cfg.vocab_size + copies
            got = saved_bytes(model, dtype, B, T, doc)
            assert abs(got - expected) <= 4, (dtype, doc, got, expected)


def test_moe_activations_within_half_a_percent():
    """Routing decides each expert's share, not the total: B·T·top_k slots either way."""
    cfg = ModelConfig(**{**BASE, "n_experts": 4, "top_k": 2})
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0))
    expected = activation_bytes(cfg, 3, 20, torch.float32) + 4 * 3 * 20 * cfg.vocab_size
    assert saved_bytes(model, torch.float32, 3, 20, False) == pytest.approx(expected, rel=0.005)


def measured_peak(store: TokenStore, cfg: ModelConfig, tc: TrainConfig, mixture: MixtureConfig,
                  dtype: torch.dtype, fused: bool = False) -> int:
    """Peak bytes of the second training step (the first creates AdamW's state): parameters,
    buffers and optimizer state held before it, plus the profiler's peak of what it allocates."""
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0))
    model.activation_checkpointing = tc.activation_checkpointing
    opt = build_optimizer(model, tc, CPU)
    loader = Loader(store, mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, 10, 0)

    def step(s: int) -> None:
        n = loader.n_targets(s)
        for micro in range(tc.grad_accum):
            batch = loader.batch(s, micro)
            with autocast(CPU, dtype):
                if fused:
                    targets = batch.tokens[:, 1:].masked_fill(~batch.loss_mask, -100)
                    nll = model(batch.tokens[:, :-1], batch.positions, batch.segments, targets=targets)
                else:
                    nll = token_nll_batch(model, batch)
                loss = nll.sum() / n
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    step(1)
    held = tensor_bytes([*model.parameters(), *model.buffers(), *(t for s in opt.state.values() for t in s.values())])
    peak, _ = profiled_peak_bytes(lambda: step(2))
    return held + peak


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ckpt", [False, True, "selective"])
@pytest.mark.parametrize("accum", [1, 2])
def test_peak_matches_a_profiled_training_step(tmp_path, dtype, ckpt, accum):
    """The real step's peak is within 15% below and 10% above the estimate (the backward's
    transients are estimated high; a 0.8 MB oneDNN buffer of the fused loss's bf16 matmul at this
    tiny shape is not counted), with and without activation checkpointing, the loss as the
    trainer computes it."""
    write_tiny_store(tmp_path)
    store = TokenStore(tmp_path)
    cfg = ModelConfig(d_model=64, n_layers=2, n_heads=4, max_seq_len=64, vocab_size=512)
    tc = TrainConfig(seq_len=64, micro_batch=8, grad_accum=accum, activation_checkpointing=ckpt)
    mixture = MixtureConfig(phases=[])
    est = estimate_train_memory(cfg, tc, dtype, doc_masking=mixture.doc_masking)
    got = measured_peak(store, cfg, tc, mixture, dtype)
    # Without native bf16 matmuls (an AVX2-only CPU: Zen 3), oneDNN converts bf16 operands in
    # its own scratch instead of torch tensors, so the profiled bf16 peak reads up to 18% low
    # (measured 0.825 of the estimate with checkpointing); 15% holds where bf16 is native. With one
    # thread (a pytest-xdist worker's share of 2 cores) a native-bf16 Zen 4 reads 0.825 too.
    # Checkpointed bf16 reads 0.844 on a native-bf16 Zen 4 since autocast's weight cache is off
    # (train/device.py): the real step dropped both blocks' copies, the estimate keeps the
    # recomputed block's, and the backward's transients were already estimated high.
    scratch = not _native_bf16() or torch.get_num_threads() == 1 or bool(ckpt)
    low = 0.80 if dtype == torch.bfloat16 and scratch else 0.85
    assert low * est["peak"] <= got <= 1.10 * est["peak"], (got, est)


def _native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX-512 BF16 or AMX), as oneDNN would use."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return True  # not Linux: keep the tight bound
    return "avx512_bf16" in flags or "amx_bf16" in flags


needs_fused = pytest.mark.skipif("targets" not in inspect.signature(Transformer.forward).parameters,
                                 reason="this model has no fused projection + cross-entropy")


@needs_fused
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_loss_saves_and_peaks_as_estimated(tmp_path, dtype):
    """The fused head keeps h, dh and dW instead of log-probabilities, and no bf16 head weight;
    its peak (one chunk's logits instead of three B·T·V buffers) is below the plain loss's."""
    cfg = ModelConfig(**{**BASE, "vocab_size": 64, "max_seq_len": 64})
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0))
    B, T = 3, 20
    tokens = torch.randint(0, 64, (B, T + 1), generator=torch.Generator().manual_seed(0))
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in skip:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(CPU, dtype):
        model(tokens[:, :-1], targets=tokens[:, 1:]).sum()
    est = estimate_train_memory(cfg, TrainConfig(seq_len=T, micro_batch=B), dtype, fused_loss=True)
    assert est["weight_copies"] == (0 if dtype == torch.float32 else 2 * 2 * matmul_weights(cfg)["per_layer"])
    assert abs(sum(seen.values()) - est["activations"] - est["weight_copies"]) <= 8

    write_tiny_store(tmp_path)
    tc = TrainConfig(seq_len=64, micro_batch=8)
    big = ModelConfig(d_model=64, n_layers=2, n_heads=4, max_seq_len=64, vocab_size=4096)  # V > 1024-token chunk
    store, mixture = TokenStore(tmp_path), MixtureConfig(phases=[])
    fused = estimate_train_memory(big, tc, dtype, doc_masking=True, fused_loss=True)
    got = measured_peak(store, big, tc, mixture, dtype, fused=True)
    assert 0.9 * fused["peak"] <= got <= 1.06 * fused["peak"], (got, fused)
    assert fused["peak"] < estimate_train_memory(big, tc, dtype, doc_masking=True, fused_loss=False)["peak"]


def test_checkpointing_and_bf16_shrink_activations_and_errors_are_clear():
    cfg = ModelConfig(**BASE)
    tc = TrainConfig(seq_len=32, micro_batch=4)
    full = estimate_train_memory(cfg, tc, "float32")
    ckpt = estimate_train_memory(cfg, tc.model_copy(update={"activation_checkpointing": True}), "float32")
    bf16 = estimate_train_memory(cfg, tc, "bfloat16", fused_loss=False)
    assert ckpt["activations"] < full["activations"] and bf16["activations"] < full["activations"]
    assert bf16["weight_copies"] == 2 * (2 * matmul_weights(cfg)["per_layer"] + 500 * 48)
    assert full["peak"] == max(full["loss_backward"], full["layers_backward"], full["optimizer_step_total"])
    with pytest.raises(ValueError, match="vocab_size"):
        estimate_train_memory(ModelConfig(), tc, "float32")
    with pytest.raises(ValueError, match="mode"):
        estimate_train_memory(cfg, tc, "float32", mode="zero")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype"):
        estimate_train_memory(cfg, tc, "int8")


def forward_kept_bytes(model: Transformer, dtype: torch.dtype, B: int, T: int, doc_masking: bool) -> int:
    """Net bytes one forward + loss leaves allocated (every CPU allocation minus every free the
    profiler saw): under checkpointing what a block keeps is held by torch.utils.checkpoint and
    its selective cache, not by autograd's saved tensors, so saved_tensors_hooks cannot see it."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    tokens, kwargs = batch_inputs(model, B, T, doc_masking)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with autocast(CPU, dtype):
            logits = model(tokens[:, :-1], **kwargs)
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        del logits
    net, stack = 0, list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            net += event.extra_fields.alloc_size
        stack.extend(event.children)
    loss.backward()  # the kept tensors were real: the backward runs on them
    return net


@pytest.mark.parametrize("kw", [{}, {"n_kv_heads": 2, "qk_norm": True}, {"ffn": "gelu", "norm": "layernorm"},
                                {"sliding_window": 8}, {"position": "learned"}, {"n_experts": 4, "top_k": 2}])
@pytest.mark.parametrize("mode", [True, "selective"])
def test_checkpointed_activations_equal_what_the_forward_keeps(kw, mode):
    """Full and selective checkpointing keep what activation_bytes counts (each block's fp32 input;
    selective also its matmul and attention-kernel outputs; the shared mask and RoPE rows once),
    fp32 and bf16 autocast, with and without document masking. Measured after autocast has
    exited, so of the bf16 weight copies only the head's (saved outside the blocks) is held.
    Tolerance: 0 to 6 KB per block more, the CPU RNG state torch.utils.checkpoint keeps for each
    checkpointed call (4.8 KB measured; a MoE block ~1 KB more, its router's small tensors)."""
    cfg = ModelConfig(**{**BASE, **kw})
    B, T = 3, 20
    for dtype in (torch.float32, torch.bfloat16):
        head_copy = 0 if dtype == torch.float32 else 2 * matmul_weights(cfg)["lm_head"]
        for doc in (False, True):
            # a fresh model each time: a MoE layer frees the previous forward's statistics
            model = Transformer(cfg, generator=torch.Generator().manual_seed(0))
            model.activation_checkpointing = mode
            expected = activation_bytes(cfg, B, T, dtype, doc, mode) + 4 * B * T * cfg.vocab_size + head_copy
            got = forward_kept_bytes(model, dtype, B, T, doc)
            assert 0 <= got - expected <= 6 * 1024 * cfg.n_layers, (dtype, doc, got, expected)


def test_selective_checkpointing_sits_between_none_and_full():
    """At the ~350M config's shape per block: full keeps the input only, selective the matmul
    outputs too (no T·T scores under SDPA), none everything."""
    cfg = ModelConfig(vocab_size=32768, d_model=1024, n_layers=24, n_heads=16, max_seq_len=1024)
    tc = TrainConfig(seq_len=1024, micro_batch=8)
    acts = {m: estimate_train_memory(cfg, tc.model_copy(update={"activation_checkpointing": m}), "bfloat16",
                                     device="cuda")["activations"] for m in (False, "selective", True)}
    assert acts[True] < acts["selective"] < acts[False]
    assert TrainConfig(activation_checkpointing="selective").activation_checkpointing == "selective"
    with pytest.raises(ValueError, match="activation_checkpointing"):
        TrainConfig(activation_checkpointing="sometimes")


def test_checkpointed_forward_keeps_one_blocks_weight_copies_not_all():
    """Under bf16 autocast with checkpointing, torch's own weight cache would hold a bf16 copy of
    every block's weights at the end of the forward (what kept a 70 B FSDP rank from fitting);
    tokenmill's autocast turns the cache off, so the forward holds at most one block's copies:
    `weight_copy_bytes(checkpointing=True)`. Weights dominate here (d 512, 6 tokens)."""
    from tokenmill.scaling.memory import weight_copy_bytes

    cfg = ModelConfig(vocab_size=256, d_model=512, n_layers=6, n_heads=8, max_seq_len=16)
    model = Transformer(cfg, generator=torch.Generator().manual_seed(0))
    model.activation_checkpointing = True
    x = torch.randint(0, 256, (1, 6))
    mm = matmul_weights(cfg)
    every_block = weight_copy_bytes(mm, cfg.n_layers, torch.bfloat16, 0, False)
    one_block = weight_copy_bytes(mm, cfg.n_layers, torch.bfloat16, 0, True)

    def forward(cached: bool) -> None:
        if cached:
            with torch.autocast("cpu", dtype=torch.bfloat16):  # torch's default: cache on
                model(x)
        else:
            with autocast(CPU, torch.bfloat16):
                model(x)

    # the profiler's running total starts from what earlier tests left allocated in this
    # process (18 MB read after the checkpointing tests): measure from a trivial allocation's
    zero, _ = profiled_peak_bytes(lambda: torch.empty(1))
    torch_peak = profiled_peak_bytes(lambda: forward(True))[0] - zero
    ours = profiled_peak_bytes(lambda: forward(False))[0] - zero
    assert torch_peak >= every_block  # the cache held them all
    # the forward frees each cast after its matmul (measured 3.2 MB, half a block's 6.4 MB); the
    # block's recompute in the backward holds its copies until its backward: what is counted
    assert ours <= one_block < every_block / 4
