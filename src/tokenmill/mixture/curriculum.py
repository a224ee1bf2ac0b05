"""Curriculum phases: which steps each phase owns, with its bucket weights and sequence length.

Phases split the token budget by fraction. Tokens per optimizer step are constant for the whole
run — world_size · grad_accum · micro_batch · train.seq_len — so a fraction of the budget is the
same fraction of the steps: phase k ends at step round(max_steps · Σ_{i<=k} fraction_i) (half
up), which is exact whenever max_steps · fraction is a whole number, and otherwise moves the
switch to the nearest step boundary (the plan reports the realised token counts). A phase with a
different sequence length keeps micro_batch · train.seq_len tokens per micro-batch by changing
its rows per micro-batch (128-token phase of a 16 × 256 run: 32 rows), so the learning-rate
schedule, the throughput and the token accounting never depend on the phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tokenmill.mixture.config import MixtureConfig, PhaseConfig, ReplayConfig
from tokenmill.mixture.errors import MixtureError
from tokenmill.mixture.schedule import Interleave


@dataclass(frozen=True)
class Phase:
    """One curriculum phase as the loader runs it."""

    index: int
    name: str
    start_step: int  # first optimizer step of the phase (1-based)
    end_step: int  # last optimizer step of the phase (inclusive)
    seq_len: int
    rows: int  # sequences per micro-batch
    weights: dict[str, float] = field(compare=False)  # the realised (quantised) share of each bucket
    anneal: bool = False  # the trainer decays the LR over [start_step, end_step]
    fraction: float = 0.0  # the configured share of the budget
    tokens_per_step: int = 0  # global: world_size · grad_accum · rows · seq_len
    rope: dict | None = field(default=None, compare=False)  # RoPE fields this phase sets (model/rope.py)

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step + 1

    @property
    def token_start(self) -> int:
        """Tokens of the global batch consumed before this phase's first step."""
        return (self.start_step - 1) * self.tokens_per_step

    @property
    def token_end(self) -> int:
        """Tokens consumed at the end of this phase's last step."""
        return self.end_step * self.tokens_per_step

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "start_step": self.start_step,
            "end_step": self.end_step,
            "steps": self.steps,
            "seq_len": self.seq_len,
            "rows_per_micro_batch": self.rows,
            "anneal": self.anneal,
            "fraction": self.fraction,
            "token_start": self.token_start,
            "token_end": self.token_end,
            "weights": dict(self.weights),
            **({"rope": dict(self.rope)} if self.rope else {}),
        }


def resolve_weights(weights: dict[str, float] | None, available: dict[str, int], where: str) -> dict[str, float]:
    """Positive weights by bucket, checked against the store; None -> proportional to available tokens."""
    known = sorted(available)
    if weights is None:
        raw = {b: float(n) for b, n in available.items() if n > 0}
        if not raw:
            raise MixtureError(
                f"{where}: no bucket of the token store ({', '.join(known) or 'none'}) holds "
                f"a training token; run `tokenmill tokenize CONFIG` on a non-empty corpus"
            )
        return raw
    unknown = sorted(set(weights) - set(known))
    if unknown:
        raise MixtureError(f"{where} names bucket(s) {unknown} that are not in the token store (buckets: {known})")
    bad = {b: w for b, w in weights.items() if not (math.isfinite(w) and w >= 0)}
    if bad:
        raise MixtureError(f"{where} must be finite and >= 0, got {bad}")
    raw = {b: float(w) for b, w in weights.items() if w > 0}
    if not raw:
        raise MixtureError(f"{where}: every weight is 0; give at least one bucket a positive weight")
    empty = sorted(b for b in raw if available[b] == 0)
    if empty:
        raise MixtureError(f"{where} gives weight to bucket(s) {empty} that hold no training token")
    return raw


def with_replay(raw: dict[str, float], available: dict[str, int], replay: ReplayConfig, where: str) -> dict[str, float]:
    """Weights with `replay.share` on the replay buckets and the rest on the others, each group
    keeping its own relative weights (a replay bucket the weights leave out: its token count)."""
    unknown = sorted(set(replay.buckets) - set(available))
    if unknown:
        raise MixtureError(
            f"mixture.replay.buckets names bucket(s) {unknown} that are not in the token store (buckets: {sorted(available)})"
        )
    empty = sorted(b for b in replay.buckets if available[b] == 0)
    if empty:
        raise MixtureError(f"mixture.replay.buckets {empty} hold no training token")
    old = {b: raw.get(b, float(available[b])) for b in replay.buckets}
    new = {b: w for b, w in raw.items() if b not in old}
    if not new:
        raise MixtureError(f"{where}: mixture.replay.buckets {replay.buckets} leave no new data to train on")
    s_old, s_new = sum(old.values()), sum(new.values())
    return {
        **{b: (1 - replay.share) * w / s_new for b, w in new.items()},
        **{b: replay.share * w / s_old for b, w in old.items()},
    }


def check_bucket_names(mixture: MixtureConfig, known: list[str], where_known: str) -> None:
    """Refuse bucket names the mixture gives (weights of every phase, replay buckets) that are not
    among `known` — the buckets the token store will hold — before the store is built; the weights
    themselves are checked against the store by `build_phases`."""
    named = [(f"mixture.phases[{k}] ({pc.name!r}).weights", pc.weights) for k, pc in enumerate(mixture.phases)]
    named += [("mixture.weights", mixture.weights)]
    named += [("mixture.replay.buckets", dict.fromkeys(mixture.replay.buckets, 1.0) if mixture.replay else None)]
    for where, weights in named:
        unknown = sorted(set(weights or {}) - set(known))
        if unknown:
            raise MixtureError(f"{where} names bucket(s) {unknown} that {where_known} (buckets: {sorted(known)})")


def phase_configs(mixture: MixtureConfig) -> list[PhaseConfig]:
    """The configured phases, or the single implicit phase 'main'."""
    return list(mixture.phases) or [PhaseConfig(name="main", fraction=1.0)]


def build_phases(
    mixture: MixtureConfig, available: dict[str, int], seq_len: int, micro_batch: int, global_micro: int, max_steps: int
) -> tuple[list[Phase], list[Interleave]]:
    """(phases, the bucket interleave of each phase). global_micro = world_size · grad_accum."""
    configs = phase_configs(mixture)
    micro_tokens = micro_batch * seq_len
    phases, interleaves, cum, prev_end = [], [], 0.0, 0
    for k, pc in enumerate(configs):
        where = f"mixture.phases[{k}] ({pc.name!r})" if mixture.phases else "mixture.weights"
        raw = resolve_weights(
            pc.weights if pc.weights is not None else mixture.weights, available, f"{where}.weights" if mixture.phases else where
        )
        if mixture.replay is not None and pc.weights is None:
            raw = with_replay(raw, available, mixture.replay, f"{where}.weights" if mixture.phases else where)
        cum += pc.fraction
        end = max_steps if k == len(configs) - 1 else math.floor(cum * max_steps + 0.5 + 1e-9)
        if end <= prev_end:
            raise MixtureError(
                f"{where} (fraction {pc.fraction:g}) gets no optimizer step with "
                f"train.max_steps={max_steps}; raise max_steps or the fraction"
            )
        plen = pc.seq_len or seq_len
        if micro_tokens % plen:
            raise MixtureError(
                f"{where}: seq_len {plen} does not divide the {micro_tokens} tokens of a "
                f"micro-batch (train.micro_batch {micro_batch} × train.seq_len {seq_len}); "
                f"pick a seq_len that does, so tokens per step stay constant"
            )
        interleave = Interleave(raw)
        phases.append(
            Phase(
                index=k,
                name=pc.name,
                start_step=prev_end + 1,
                end_step=end,
                seq_len=plen,
                rows=micro_tokens // plen,
                weights=interleave.shares,
                anneal=pc.anneal,
                fraction=pc.fraction,
                tokens_per_step=global_micro * micro_tokens,
                rope=pc.rope.model_dump(exclude_none=True) if pc.rope else None,
            )
        )
        interleaves.append(interleave)
        prev_end = end
    return phases, interleaves


def phase_index(phases: list[Phase], step: int) -> int:
    """Index of the phase that owns optimizer step `step` (1-based)."""
    if not phases or not 1 <= step <= phases[-1].end_step:
        last = phases[-1].end_step if phases else 0
        raise MixtureError(f"step {step} is outside the run's optimizer steps 1..{last}")
    lo, hi = 0, len(phases) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if phases[mid].end_step >= step:
            hi = mid
        else:
            lo = mid + 1
    return lo
