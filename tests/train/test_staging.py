"""The document mask built once per micro-batch when the batch is staged (train/staging.py): the
same losses and gradients, bit for bit, as a model that builds it in its forward, and one build
per micro-batch whatever the accumulation or activation checkpointing."""

from __future__ import annotations

import pytest
import torch

from tokenmill.mixture.loader import Loader
from tokenmill.mixture.packing import Batch
from tokenmill.model.objectives import token_nll_batch
from tokenmill.model.transformer import AdditiveMask, Transformer, document_positions
from tokenmill.tokens.store import TokenStore
from tokenmill.train import trainer
from tokenmill.train.staging import prebuild_mask
from tokenmill.train.trainer import resolve_model_config, step_loss_tensor

CPU = torch.device("cpu")


def _model_and_loader(run, **model: object) -> tuple[Transformer, Loader]:
    cfg, tc = run.config, run.config.train
    store = TokenStore(run.path / "tokens")
    mcfg = resolve_model_config(cfg.model, store, tc.seq_len).model_copy(update=model)
    loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, tc.grad_accum, tc.max_steps, cfg.seed)
    return Transformer(mcfg, generator=torch.Generator().manual_seed(3)).train(), loader


def _step(model: Transformer, loader: Loader, dtype: torch.dtype) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss, _ = step_loss_tensor(model, loader, 3, 2, CPU, dtype, backward=True, seed=11)
    return loss, [p.grad.clone() for p in model.parameters()]


def _without_staging(model: object, batch: object, dtype: object) -> object:
    return batch  # the batch as the loader gives it: the model builds the mask in its forward


@pytest.mark.parametrize(
    "dtype, model",
    [
        (torch.bfloat16, {}),  # bf16 on a CPU, rows of 32: the explicit kernel's additive mask
        (torch.float32, {}),  # SDPA's boolean mask
        (torch.float32, {"sliding_window": 8}),  # the dense path: window & document
    ],
    ids=["explicit", "sdpa", "window"],
)
def test_a_step_with_the_prebuilt_mask_equals_one_where_the_model_builds_it(tiny_run, monkeypatch, dtype, model):
    m, loader = _model_and_loader(tiny_run, **model)
    try:
        assert loader.batch(3, 0).segments is not None  # the default recipe masks documents
        staged = _step(m, loader, dtype)
        monkeypatch.setattr(trainer, "prebuild_mask", _without_staging)
        built = _step(m, loader, dtype)
    finally:
        loader.close()
    assert torch.equal(staged[0], built[0])
    assert all(torch.equal(a, b) for a, b in zip(staged[1], built[1]))


@pytest.mark.parametrize("checkpointing", [False, True, "selective"])
def test_each_micro_batch_mask_is_built_once(tiny_run, monkeypatch, checkpointing):
    """grad_accum 2: two builds per step, both at staging; the forward (and, under activation
    checkpointing, the backward's recompute of every block) reuses them."""
    m, loader = _model_and_loader(tiny_run)
    m.activation_checkpointing = checkpointing
    built: list[bool] = []
    real = Transformer.mask_for

    def counted(self: Transformer, *args: object, **kwargs: object) -> object:
        built.append(torch.is_grad_enabled())  # staging builds under no_grad, a forward would not
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Transformer, "mask_for", counted)
    try:
        _step(m, loader, torch.bfloat16)
    finally:
        loader.close()
    assert built == [False, False]


def test_the_mask_is_the_models_own_and_does_not_travel_with_the_batch():
    m = Transformer(_small_config()).train()
    segments = torch.tensor([[0] * 5 + [1] * 11, [0] * 16])
    batch = Batch(torch.randint(0, 61, (2, 17)), document_positions(segments), segments, torch.ones(2, 16, dtype=torch.bool))
    staged = prebuild_mask(m, batch, torch.bfloat16)
    assert isinstance(staged.prebuilt_mask, AdditiveMask)  # what the explicit kernel takes in bf16 here
    assert prebuild_mask(m, batch, torch.float32).prebuilt_mask.dtype == torch.bool  # SDPA's in fp32
    assert staged.to(CPU).prebuilt_mask is None  # a moved batch gets its mask rebuilt where it lands
    unmasked = Batch(batch.tokens, None, None, batch.loss_mask)
    assert prebuild_mask(m, unmasked, torch.bfloat16).prebuilt_mask is None  # plain causal: nothing to build


def _small_config() -> "ModelConfig":
    from tokenmill.config import ModelConfig

    return ModelConfig(vocab_size=61, d_model=32, n_layers=1, n_heads=4, max_seq_len=16)


def test_flex_prebuilt_block_mask_gives_the_same_nll():
    """FlexAttention's BlockMask (forward only: FlexAttention has no backward on a CPU)."""
    m = Transformer(_small_config()).eval()
    m.doc_mask_backend = "flex"
    segments = torch.tensor([[0] * 5 + [1] * 11, [0] * 3 + [1] * 13])
    batch = Batch(torch.randint(0, 61, (2, 17)), document_positions(segments), segments, torch.ones(2, 16, dtype=torch.bool))
    with torch.no_grad():
        staged = prebuild_mask(m, batch, torch.float32)
        assert type(staged.prebuilt_mask).__name__ == "BlockMask"
        assert torch.equal(token_nll_batch(m, staged), token_nll_batch(m, batch))


@pytest.mark.parametrize(
    "dtype, checkpointing", [(torch.bfloat16, True), (torch.float32, False)], ids=["explicit-checkpointed", "sdpa"]
)
def test_the_staged_mask_costs_no_memory(tiny_run, monkeypatch, dtype, checkpointing):
    """The step's peak is the same bytes with the mask staged as with the model building it: the
    mask is built right before its forward and the batch lets go of it once the forward has taken
    what it keeps (so scaling/memory.py's count holds for the trainer's step)."""
    from tokenmill.scaling.memory import profiled_peak_bytes

    m, loader = _model_and_loader(tiny_run)
    m.activation_checkpointing = checkpointing
    try:
        _step(m, loader, dtype)  # the gradients exist before both measured steps
        staged, _ = profiled_peak_bytes(lambda: step_loss_tensor(m, loader, 3, 2, CPU, dtype, backward=True, seed=11))
        monkeypatch.setattr(trainer, "prebuild_mask", _without_staging)
        built, _ = profiled_peak_bytes(lambda: step_loss_tensor(m, loader, 3, 2, CPU, dtype, backward=True, seed=11))
    finally:
        loader.close()
    # to 4 bytes, as scaling/memory.py's count (measured: the staged step's peak reads 4 bytes
    # lower, a scalar's lifetime against the peak; holding the mask through the backward read +8 KiB)
    assert abs(staged - built) <= 4, (staged, built)
