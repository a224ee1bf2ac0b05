"""Where a CUDA training step's time goes, at a run's shape (micro_batch 32, no document masking):
the eager step with and without the per-group gradient norms, the output projection +
cross-entropy alone (plain logits vs the fused chunks at several chunk sizes), a kernel profile of
three eager steps (GPU busy time vs wall) and the compiled step with its profile.

    python3 benchmarks/profile_train_step_cuda.py RUN OUT.json   # RUN: config.yaml + tokens/
Writes OUT.json (and eager_profile.txt / compiled_profile.txt beside it). DEV=cpu EXTRA="model.d_model=64 ..."
checks the plumbing on a CPU. Results: benchmarks/results/train_cuda_h200_profile.json.
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
import torch, torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from tokenmill.config import load_config
from tokenmill.mixture.loader import Loader
from tokenmill.model.transformer import Transformer
from tokenmill.model import fused_ce
from tokenmill.tokens.store import TokenStore
from tokenmill.train.optimizer import build_optimizer
from tokenmill.train.trainer import compute_update, resolve_model_config

T0 = time.monotonic()
run = Path(sys.argv[1]); out = Path(sys.argv[2])
res = {"command": " ".join(sys.argv), "torch": torch.__version__, "python": platform.python_version(),
       "load_avg": os.getloadavg(), "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                                             text=True).stdout.strip() or "unknown"}
dev = torch.device(os.environ.get("DEV", "cuda"))
sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
res["device"] = torch.cuda.get_device_name() if dev.type == "cuda" else platform.processor()
EXTRA = os.environ.get("EXTRA", "").split(); dt = torch.bfloat16
cfg = load_config(run / "config.yaml", ["mixture.phases=[]", "mixture.doc_masking=false", "train.dtype=bfloat16",
      "train.micro_batch=32", "train.grad_accum=1", "train.max_steps=200", "train.warmup_steps=5", *EXTRA])
store = TokenStore(run / "tokens"); tc = cfg.train
mcfg = resolve_model_config(cfg.model, store, tc.seq_len)
model = Transformer(mcfg, generator=torch.Generator().manual_seed(1)).to(dev); model.train()
opt = build_optimizer(model, tc, dev)
loader = Loader(store, cfg.mixture, tc.seq_len, tc.micro_batch, 1, tc.max_steps, cfg.seed)
loader.start_prefetch(1)
s_counter = [0]
def step(m, group_norms=False):
    s_counter[0] += 1
    compute_update(m, opt, loader, s_counter[0], tc, dev, dt, None, {}, group_norms=group_norms)
    opt.step(); opt.zero_grad(set_to_none=True); sync()
def timed(m, n=12, **kw):
    secs = []
    for _ in range(n):
        t = time.perf_counter(); step(m, **kw); secs.append(time.perf_counter() - t)
    return statistics.median(secs[3:]) * 1000
def save():
    out.write_text(json.dumps(res, indent=1)); print(json.dumps(res), flush=True)
res["eager_ms"] = timed(model); res["eager_groupnorms_ms"] = timed(model, group_norms=True); save()
# LM head + CE alone at this shape
N, d, V = tc.micro_batch * tc.seq_len, mcfg.d_model, mcfg.vocab_size
h = torch.randn(N, d, device=dev, requires_grad=True); W = (torch.randn(V, d, device=dev) * 0.02).requires_grad_()
tg = torch.randint(0, V, (N,), device=dev)
def ce_plain():
    with torch.autocast(dev.type, dt):
        return F.cross_entropy((h @ W.t()).float(), tg)
def bench(fn, n=10):
    for _ in range(3): fn().backward()
    sync(); t = time.perf_counter()
    for _ in range(n): fn().backward()
    sync(); return (time.perf_counter() - t) / n * 1000
res["ce_plain_ms"] = bench(ce_plain)
for c in (512, 2048, 8192, 32768):
    def f(c=c):
        with torch.autocast(dev.type, dt):
            return fused_ce.linear_cross_entropy(h, W, tg, 1.0, chunk=c).sum() / N
    res[f"ce_fused_chunk{c}_ms"] = bench(f)
save()
# kernel profile of 3 eager steps
with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if dev.type == "cuda" else [])]) as prof:
    t = time.perf_counter()
    for _ in range(3): step(model)
    wall = (time.perf_counter() - t) / 3 * 1000
tab = prof.key_averages().table(sort_by="self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total", row_limit=30)
gpu_total = sum(e.self_device_time_total for e in prof.key_averages()) / 3 / 1000
res["profile_wall_ms"] = wall; res["profile_gpu_busy_ms"] = gpu_total
(out.parent / "eager_profile.txt").write_text(tab); print(tab[:6000]); save()
# compiled, metrics off, chunk default vs 8192
if time.monotonic() - T0 < 140:
    cm = torch.compile(model)
    res["compiled_ms"] = timed(cm, n=15); save()
    if time.monotonic() - T0 < 220:
        with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if dev.type == "cuda" else [])]) as prof:
            for _ in range(3): step(cm)
        tab = prof.key_averages().table(sort_by="self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total", row_limit=30)
        res["compiled_gpu_busy_ms"] = sum(e.self_device_time_total for e in prof.key_averages()) / 3 / 1000
        (out.parent / "compiled_profile.txt").write_text(tab); save()
loader.close()
print("total", time.monotonic() - T0)
