"""Sampling from the model: temperature and top-k, seeded, for the samples in eval and report."""

from __future__ import annotations

import torch


@torch.no_grad()
def generate(model: torch.nn.Module, prompt: list[int], max_new_tokens: int, *, max_context: int,
             temperature: float = 1.0, top_k: int | None = None, stop_id: int | None = None,
             generator: torch.Generator | None = None, device: torch.device | None = None) -> list[int]:
    """Continue `prompt` by up to max_new_tokens tokens; stops early at `stop_id`.

    No KV cache: the whole window is recomputed each step, which is plenty for report samples
    and keeps the model free of inference-only state.
    """
    device = device or torch.device("cpu")
    ids = list(prompt)
    for _ in range(max_new_tokens):
        ctx = torch.tensor([ids[-max_context:]], dtype=torch.long, device=device)
        logits = model(ctx)[0, -1].float().cpu()
        if temperature <= 0:
            nxt = int(torch.argmax(logits))
        else:
            logits = logits / temperature
            if top_k is not None and top_k < logits.numel():
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        ids.append(nxt)
        if stop_id is not None and nxt == stop_id:
            break
    return ids[len(prompt):]
