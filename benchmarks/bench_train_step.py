"""Training-step throughput: tokenmill's trainer vs Hugging Face `LlamaForCausalLM` in a bare loop.

Same shape (the demo model: d=256, 4 layers, 4 heads, SwiGLU hidden 704, vocab 4096, tied
embeddings), same batch (16 x 256 tokens from the demo's real token store), same AdamW, fp32 on
CPU. tokenmill's side is the real `run_train` (sampler, clipping, schedule, one event per step);
the peer is the loop a user would write around HF's model. A/B runs are interleaved and the
median per-step time over the timed steps of each run is reported.

    .venv/bin/python benchmarks/bench_train_step.py --run runs/demo --steps 25 --repeats 3
Needs `pip install transformers` (the bench extra) and a tokenized run (e.g. after `make demo`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from tokenmill.config import load_config
from tokenmill.runs import RunDir, read_events
from tokenmill.train.trainer import run_train

WARMUP = 5
# The same work on both sides: one phase at train.seq_len, plain causal attention (HF's Llama has
# no document masking), so the ratio measures the trainer, not a different attention pattern.
SAME_WORK = ["mixture.phases=[]", "mixture.doc_masking=false"]


def tokenmill_step_seconds(src: Path, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(src / "config.yaml", [f"root={tmp}", "name=b", f"train.max_steps={steps}", *SAME_WORK,
                                                "train.eval_every=0", "train.ckpt_every=0", "train.log_every=0"])
        run = RunDir.create(cfg)
        shutil.copytree(src / "tokens", run.path / "tokens")
        run_train(run, resume=False, progress=False)
        secs = [e["seconds"] for e in read_events(run.path / "events.jsonl") if e["kind"] == "train_step"]
        return statistics.median(secs[WARMUP:])


def hf_step_seconds(src: Path, steps: int) -> float:
    from transformers import LlamaConfig, LlamaForCausalLM

    from tokenmill.mixture.loader import Loader
    from tokenmill.tokens.store import TokenStore

    cfg = load_config(src / "config.yaml", [f"train.max_steps={steps}", *SAME_WORK])
    store = TokenStore(src / "tokens")
    m = cfg.model
    hf = LlamaForCausalLM(LlamaConfig(
        vocab_size=store.vocab_size, hidden_size=m.d_model, intermediate_size=704, num_hidden_layers=m.n_layers,
        num_attention_heads=m.n_heads, num_key_value_heads=m.n_kv_heads or m.n_heads,
        max_position_embeddings=m.max_seq_len, rms_norm_eps=m.norm_eps, rope_theta=m.rope_theta,
        tie_word_embeddings=m.tie_embeddings, attn_implementation="sdpa"))
    hf.train()
    opt = torch.optim.AdamW(hf.parameters(), lr=cfg.train.lr, betas=(cfg.train.beta1, cfg.train.beta2),
                            weight_decay=cfg.train.weight_decay)
    loader = Loader(store, cfg.mixture, cfg.train.seq_len, cfg.train.micro_batch, 1, steps, cfg.seed)
    secs = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        batch = loader.batch(step, 0).tokens
        out = hf(input_ids=batch[:, :-1], labels=batch[:, :-1])  # HF shifts labels internally
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), cfg.train.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs[WARMUP:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=Path("runs/demo"))
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import transformers

    tm, hf = [], []
    for r in range(args.repeats):  # interleaved A/B
        tm.append(tokenmill_step_seconds(args.run, args.steps))
        hf.append(hf_step_seconds(args.run, args.steps))
        print(f"repeat {r}: tokenmill {tm[-1]:.4f} s/step, HF Llama {hf[-1]:.4f} s/step", flush=True)
    tokens = 16 * 256
    result = {"torch": torch.__version__, "transformers": transformers.__version__,
              "threads": torch.get_num_threads(), "tokens_per_step": tokens,
              "tokenmill_s_per_step": statistics.median(tm), "hf_s_per_step": statistics.median(hf),
              "tokenmill_tokens_per_s": tokens / statistics.median(tm), "hf_tokens_per_s": tokens / statistics.median(hf),
              "speed_ratio_tokenmill_over_hf": statistics.median(hf) / statistics.median(tm)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
