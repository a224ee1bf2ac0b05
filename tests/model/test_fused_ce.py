"""The fused output projection + cross-entropy against the plain F.linear + F.cross_entropy."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tokenmill.config import ModelConfig
from tokenmill.model.fused_ce import CHUNK, IGNORE, fused_chunk, linear_cross_entropy, loss_kernel
from tokenmill.model.objectives import fused_nll_ok, token_nll, token_nll_batch
from tokenmill.model.transformer import Transformer


def _data(n=300, d=16, v=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=torch.float64)
    w = torch.randn(v, d, generator=g, dtype=torch.float64) * 0.3
    t = torch.randint(0, v, (n,), generator=g)
    t[::7] = IGNORE
    return h, w, t


def _reference(h, w, t, scale=1.0):
    return F.cross_entropy(scale * F.linear(h, w), t, ignore_index=IGNORE, reduction="none")


@pytest.mark.parametrize("chunk", [1, 64, 1000])
@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_nll_and_gradients_of_a_mean_equal_the_reference(chunk, scale):
    h, w, t = _data()
    h1, w1 = h.clone().requires_grad_(), w.clone().requires_grad_()
    h2, w2 = h.clone().requires_grad_(), w.clone().requires_grad_()
    ref = _reference(h1, w1, t, scale)
    got = linear_cross_entropy(h2, w2, t, scale=scale, chunk=chunk)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-6, atol=1e-6)
    assert bool((got[t == IGNORE] == 0).all())
    n = int((t != IGNORE).sum())
    (ref.sum() / n).backward()
    (got.sum() / n).backward()  # the trainer's reduction: one uniform upstream gradient
    torch.testing.assert_close(h2.grad, h1.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(w2.grad, w1.grad, rtol=1e-5, atol=1e-7)


def test_a_non_uniform_upstream_gradient_takes_the_exact_recompute_path():
    h, w, t = _data(seed=1)
    weights = torch.rand(h.shape[0], generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    h1, w1 = h.clone().requires_grad_(), w.clone().requires_grad_()
    h2, w2 = h.clone().requires_grad_(), w.clone().requires_grad_()
    (_reference(h1, w1, t) * weights).sum().backward()
    (linear_cross_entropy(h2, w2, t, chunk=37).double() * weights).sum().backward()
    torch.testing.assert_close(h2.grad, h1.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(w2.grad, w1.grad, rtol=1e-5, atol=1e-7)


def test_bf16_autocast_matches_the_autocast_linear_path():
    h, w, t = (x.float() if x.is_floating_point() else x for x in _data(n=512, d=64, v=256, seed=3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = F.cross_entropy(F.linear(h, w).float(), t, ignore_index=IGNORE, reduction="none")
        got = linear_cross_entropy(h, w, t)
    torch.testing.assert_close(got, ref, rtol=1e-3, atol=1e-3)


def test_no_grad_path_and_bad_shapes():
    h, w, t = _data()
    with torch.no_grad():
        got = linear_cross_entropy(h.requires_grad_(), w, t)
    assert not got.requires_grad
    torch.testing.assert_close(got.double(), _reference(h.detach(), w, t), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="targets"):
        linear_cross_entropy(h, w, t[:-1])


def test_the_model_uses_the_fused_path_and_gives_the_logit_path_loss():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)
    m = Transformer(cfg, generator=torch.Generator().manual_seed(0)).double()
    assert fused_nll_ok(m) and not fused_nll_ok(Transformer(cfg.model_copy(update={"z_loss": 1e-4})))
    tokens = torch.randint(0, 64, (3, 17), generator=torch.Generator().manual_seed(1))
    fused = token_nll_batch(m, SimpleNamespace(tokens=tokens))
    plain = token_nll(m, tokens)  # the logits path
    torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-6)


def test_loss_kernel_choice_by_device_and_size():
    # CPU: always the fused chunks; CUDA: the whole logits while their fp32 copy fits the cap
    assert loss_kernel("cpu", 32768, 32768) == "fused"
    assert loss_kernel("cuda", 32768, 32768) == "plain"  # 4 GiB of fp32 logits
    assert loss_kernel("cuda", 32768, 131072) == "fused"  # 16 GiB: chunked instead
    assert loss_kernel("cuda", 32768, 32768, "fused") == "fused" and loss_kernel("cpu", 8, 8, "plain") == "plain"
    with pytest.raises(ValueError, match="loss_kernel"):
        loss_kernel("cpu", 8, 8, "chunked")
    assert fused_chunk("cpu", 131072) == CHUNK
    assert fused_chunk("cuda", 32768) == 8192 and fused_chunk("cuda", 131072) == 2048
    assert fused_chunk("cuda", 4096) == 8192 and fused_chunk("cuda", 1 << 22) == CHUNK


def test_the_plain_loss_path_gives_the_fused_path_nll_and_gradients():
    cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=16)
    tokens = torch.randint(0, 64, (3, 17), generator=torch.Generator().manual_seed(1))
    targets = tokens[:, 1:].clone()
    targets[0, :5] = IGNORE
    out = {}
    for kind in ("fused", "plain"):
        m = Transformer(cfg, generator=torch.Generator().manual_seed(0)).double()
        m.loss_kernel = kind
        nll = m(tokens[:, :-1], targets=targets)
        nll.sum().backward()
        out[kind] = (nll.detach(), {n: p.grad for n, p in m.named_parameters()})
    torch.testing.assert_close(out["fused"][0], out["plain"][0], rtol=1e-6, atol=1e-6)  # both fp32 NLL
    assert (out["plain"][0][0, :5] == 0).all()
    for name, g in out["fused"][1].items():
        torch.testing.assert_close(g, out["plain"][1][name], rtol=1e-5, atol=1e-7)


def test_the_memory_estimate_follows_the_device_loss_path():
    from tokenmill.scaling.memory import estimate_train_memory, fused_loss_default

    cfg = ModelConfig(vocab_size=32768, d_model=64, n_layers=1, n_heads=2, max_seq_len=1024)
    tc = SimpleNamespace(micro_batch=32, seq_len=1024, objective="clm")
    assert fused_loss_default(cfg, tc, "cpu") and not fused_loss_default(cfg, tc, "cuda:0")
    from tokenmill.train.config import TrainConfig

    train = TrainConfig(micro_batch=32, seq_len=1024)
    cpu, cuda = (estimate_train_memory(cfg, train, "bfloat16", device=d) for d in ("cpu", "cuda"))
    assert cuda["logits"] == 3 * 4 * 32 * 1024 * 32768 > cpu["logits"]  # the plain path's log-softmax buffers
