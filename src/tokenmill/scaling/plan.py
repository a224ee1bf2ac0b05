"""`tokenmill plan`: what a pretraining run costs before it starts.

Every figure is a pure function of the inputs, and every assumption is returned with the figures
(`Plan.assumptions`) so the printout can say what it took for granted.

- Compute: C = 6·N·D (Kaplan et al. 2020) and the exact per-config count, flops_per_token(cfg, s)·D,
  which adds attention's 12·L·d·s per token and counts the lm_head (scaling/flops.py).
  Steps S = ⌈D / tokens per step⌉.
- Wall-clock T = 6ND / (n · P_peak · MFU) (MFU as in PaLM, Chowdhery et al. 2022) and cost = n · T · $/device-hour.
- Compute-optimal sizing (Chinchilla, Hoffmann et al. 2022): D ≈ 20·N and C ≈ 6ND give
  N = √(C/120), D = 20·N.
- Inference-aware sizing (Sardana et al. 2023): reach the same loss with a smaller
  model trained longer when the model will also serve D_inf tokens, minimising training
  6·N·D_tr plus inference 2·N·D_inf FLOPs along the loss contour of Chinchilla's fitted law
  L(N, D) = E + A/N^α + B/D^β (Approach 3: E 1.69, A 406.4, B 410.7, α 0.34, β 0.28).
- Layout (docs/parallelism.md): every TP ∈ {1, 2, 4, 8} up to the devices per node, PP
  dividing the layers, DP for the rest, ZeRO 0-3 and activation checkpointing on or off; keep
  those that fit the device memory (scaling/parallel.py) and pick the fastest by a simple
  step-time model: compute / (1 - bubble) plus the communication of each axis at its link's
  bandwidth; TP and PP traffic on the critical path, DP traffic hidden under compute up to the
  backward's share (ZeRO-0/1/2) or all of it (ZeRO-3's prefetched gathers). Only layouts that
  tokenmill's trainer runs are searched: each candidate goes through the trainer's own checks
  (scaling/plan_train.py, which argues where the planner gave way) and is printed as the train
  settings that run it; the trainer's memory per rank (scaling/rank_memory.py) is shown beside
  this planner's Megatron-style figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tokenmill.model.config import ModelConfig
from tokenmill.errors import UserError
from tokenmill.model.transformer import resolve_ffn_hidden
from tokenmill.scaling.devices import GB, DeviceSpec
from tokenmill.scaling.flops import flops_per_token, param_count
from tokenmill.scaling.parallel import BF16, DeviceMemory, Layout, bubble_fraction, device_memory
from tokenmill.scaling.plan_train import train_command

TOKENS_PER_PARAM = 20.0  # Chinchilla's compute-optimal ratio D/N
INFERENCE_FLOPS_PER_PARAM = 2.0  # one forward pass per served token
BACKWARD_SHARE = 4.0 / 6.0  # of a step's FLOPs: the backward, under which gradient reduction overlaps
RECOMPUTE_FACTOR = 8.0 / 6.0  # full checkpointing re-runs the forward: 8·N·D hardware FLOPs for 6·N·D model FLOPs
DEFAULT_GLOBAL_BATCH = 4 * 2**20  # 4M tokens, the global batch of Llama 2 (Touvron et al. 2023)
HEAD_DIM = 128
ASPECT = 128  # d_model / n_layers of a shape derived from a parameter count (Llama-2-7B: 4096 / 32)
VOCAB = 32_000


class PlanError(UserError, ValueError):
    """The inputs do not describe a plan (missing or contradictory flags, nothing fits)."""


class NoLayoutFits(PlanError):
    """Every layout on these devices needs more memory than one device has."""


@dataclass(frozen=True)
class ChinchillaLaw:
    """L(N, D) = E + A/N^α + B/D^β, Hoffmann et al. 2022 Approach 3 (the fit Sardana et al. use)."""

    E: float = 1.69
    A: float = 406.4
    B: float = 410.7
    alpha: float = 0.34
    beta: float = 0.28

    def loss(self, n_params: float, tokens: float) -> float:
        return self.E + self.A / n_params**self.alpha + self.B / tokens**self.beta

    def tokens_for_loss(self, n_params: float, loss: float) -> float:
        """D with L(N, D) = loss, or inf when N alone cannot get there (A/N^α >= loss - E)."""
        gap = loss - self.E - self.A / n_params**self.alpha
        return math.inf if gap <= 0 else (self.B / gap) ** (1.0 / self.beta)


CHINCHILLA = ChinchillaLaw()


def _llama(d: int, layers: int, heads: int, kv: int, ffn: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=VOCAB,
        d_model=d,
        n_layers=layers,
        n_heads=heads,
        n_kv_heads=kv,
        ffn_hidden=ffn,
        max_seq_len=4096,
        tie_embeddings=False,
    )


# Touvron et al. 2023 (Llama 2), table 1 and the released configs
ARCHS: dict[str, ModelConfig] = {
    "llama2-7b": _llama(4096, 32, 32, 32, 11008),
    "llama2-13b": _llama(5120, 40, 40, 40, 13824),
    "llama2-70b": _llama(8192, 80, 64, 8, 28672),
}


def shape_for_params(n_params: float, vocab_size: int = VOCAB) -> ModelConfig:
    """A Llama-style shape with about `n_params` parameters: d_model = 128·L (Llama-2-7B's aspect
    ratio), rounded to a multiple of 128, head_dim 128, SwiGLU 8/3·d, untied embeddings; the layer
    count whose total is closest to n_params."""
    if n_params <= 0:
        raise PlanError(f"--params {n_params:g}: must be positive")
    best: tuple[float, ModelConfig] | None = None
    for layers in range(1, 257):
        d = max(HEAD_DIM, HEAD_DIM * round(ASPECT * layers / HEAD_DIM))
        cfg = ModelConfig(
            vocab_size=vocab_size, d_model=d, n_layers=layers, n_heads=d // HEAD_DIM, max_seq_len=4096, tie_embeddings=False
        )
        err = abs(math.log(param_count(cfg)["total"] / n_params))
        if best is None or err < best[0]:
            best = (err, cfg)
    assert best is not None
    return best[1]


def training_flops(n_params: float, tokens: float) -> float:
    """C = 6·N·D."""
    return 6.0 * n_params * tokens


def wall_clock_seconds(flops: float, devices: int, peak_flops: float, mfu: float) -> float:
    """T = C / (n · P_peak · MFU)."""
    if not 0 < mfu <= 1:
        raise PlanError(f"--mfu {mfu}: must be in (0, 1]")
    return flops / (devices * peak_flops * mfu)


def chinchilla_optimal(flops: float, tokens_per_param: float = TOKENS_PER_PARAM) -> tuple[float, float]:
    """(N, D) with D = r·N and 6·N·D = C: N = √(C / 6r) (r = 20: √(C/120), Hoffmann et al. 2022)."""
    n = math.sqrt(flops / (6.0 * tokens_per_param))
    return n, tokens_per_param * n


def inference_aware(target_loss: float, inference_tokens: float, law: ChinchillaLaw = CHINCHILLA) -> dict[str, float]:
    """Sardana et al. 2023: the (N, D_tr) on the loss contour L(N, D_tr) = target that minimises
    6·N·D_tr + 2·N·D_inf. A log-spaced scan of N, then a golden-section refinement."""
    if target_loss <= law.E:
        raise PlanError(f"target loss {target_loss:.3f} is not above the law's irreducible loss E = {law.E}")
    n_min = (law.A / (target_loss - law.E)) ** (1.0 / law.alpha)  # below it no data size reaches the loss

    def total(log_n: float) -> float:
        n = math.exp(log_n)
        return training_flops(n, law.tokens_for_loss(n, target_loss)) + INFERENCE_FLOPS_PER_PARAM * n * inference_tokens

    lo, hi = math.log(n_min) + 1e-9, math.log(n_min) + math.log(1e4)
    grid = [lo + (hi - lo) * i / 4000 for i in range(4001)]
    i = min(range(len(grid)), key=lambda k: total(grid[k]))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        a, b = (a, d) if total(c) < total(d) else (c, b)
    n = math.exp((a + b) / 2)
    d_tr = law.tokens_for_loss(n, target_loss)
    train = training_flops(n, d_tr)
    infer = INFERENCE_FLOPS_PER_PARAM * n * inference_tokens
    return {
        "params": n,
        "tokens": d_tr,
        "tokens_per_param": d_tr / n,
        "training_flops": train,
        "inference_flops": infer,
        "total_flops": train + infer,
        "loss": law.loss(n, d_tr),
    }


# --------------------------------------------------------------------------- layout search
@dataclass(frozen=True)
class StepTime:
    """Seconds of one optimizer step on every device, by part. TP and PP traffic sits on the critical
    path; DP traffic overlaps compute and only `dp_exposed`, what does not fit under it, counts."""

    compute: float
    bubble: float
    tp_comm: float
    pp_comm: float
    dp_comm: float
    dp_exposed: float

    @property
    def total(self) -> float:
        return self.compute + self.bubble + self.tp_comm + self.pp_comm + self.dp_exposed


def _link(group_span: int, device: DeviceSpec) -> tuple[float, str]:
    """Bandwidth of a communication group spanning `group_span` consecutive devices."""
    if group_span <= device.devices_per_node:
        return device.intra_node_bandwidth, "intra-node"
    return device.inter_node_bandwidth, "inter-node"


def step_time(cfg: ModelConfig, layout: Layout, device: DeviceSpec, mfu: float) -> StepTime:
    """Seconds per optimizer step. Ranks are placed TP innermost, then PP, then DP (Megatron's
    order), so a TP group spans t devices, a PP group t·p and a DP group all of them.

    compute: exact FLOPs of the step's tokens / (n · peak · MFU), ×8/6 with checkpointing; bubble:
    compute · b/(1-b); TP: 4 all-reduces of the s·b·h bf16 activations per layer and micro-batch
    (6 with the recomputed forward), ring cost 2(t-1)/t of the bytes; PP: each micro-batch's
    activations sent forward and its gradient back across each stage boundary; DP: reduce-scatter
    of the gradients and all-gather of the weights, (d-1)/d of the bf16 shard each; ZeRO-3 gathers
    the weights again for the forward and the backward of every micro-batch. Overlap: the gradient
    reduction runs under the backward (DDP buckets, ZeRO-1/2: 2/3 of the compute), ZeRO-3's gathers
    are prefetched under the forward and the backward (all of it); the rest is exposed."""
    s, b, t, p, d, m = layout.seq_len, layout.micro_batch, layout.tp, layout.pp, layout.dp, layout.micro_batches
    tokens = s * b * m * d
    compute = flops_per_token(cfg, s) * tokens / (layout.devices * device.peak_flops * mfu)
    if layout.checkpointing:
        compute *= RECOMPUTE_FACTOR
    frac = bubble_fraction(p, m)
    act = BF16 * s * b * cfg.d_model
    layers = math.ceil(cfg.n_layers / p)
    tp_comm = 0.0
    if t > 1:
        per_layer = (6 if layout.checkpointing else 4) * 2 * (t - 1) / t * act
        tp_comm = layers * m * per_layer / _link(t, device)[0]
    pp_comm = 2 * m * act / t / _link(t * p, device)[0] if p > 1 else 0.0
    dp_comm = 0.0
    if d > 1:
        shard_bytes = BF16 * param_count(cfg)["total"] / (t * p)
        passes = 2 + (2 * m - 1 if layout.zero >= 3 else 0)
        dp_comm = passes * (d - 1) / d * shard_bytes / _link(layout.devices, device)[0]
    window = compute * (1.0 if layout.zero >= 3 else BACKWARD_SHARE)
    return StepTime(
        compute=compute,
        bubble=compute * frac / (1 - frac),
        tp_comm=tp_comm,
        pp_comm=pp_comm,
        dp_comm=dp_comm,
        dp_exposed=max(0.0, dp_comm - window),
    )


@dataclass(frozen=True)
class LayoutChoice:
    layout: Layout
    memory: DeviceMemory
    time: StepTime
    refused: tuple[str, ...] = ()  # why `tokenmill train` would refuse this layout (scaling/plan_train.py); () it runs it
    trainer_peak: float | None = None  # bytes per rank of tokenmill's own trainer (scaling/rank_memory.py); None: not computed

    def needed(self) -> float:
        """Bytes per device this layout needs: the larger of the Megatron-style model (with its
        reserve) and tokenmill's trainer's peak plus the same reserve, since the trainer is what runs."""
        trainer = 0.0 if self.trainer_peak is None else self.trainer_peak + self.layout.reserve_bytes
        return max(self.memory.total, trainer)

    def as_dict(self) -> dict[str, Any]:
        from tokenmill.scaling.plan_train import config_lines

        return {
            "layout": self.layout.model_dump(),
            "memory_bytes": self.memory.as_dict(),
            "step_seconds": {**self.time.__dict__, "total": self.time.total},
            "train_config": config_lines(self.layout),
            "trainer_refuses": list(self.refused),
            "trainer_peak_bytes": self.trainer_peak,
            "needed_bytes": self.needed(),
        }


def micro_batches_for(global_batch_tokens: int, dp: int, micro_batch: int, seq_len: int) -> int:
    """Micro-batches per step per pipeline: the global batch over dp·b·s tokens, rounded up."""
    return max(1, math.ceil(global_batch_tokens / (dp * micro_batch * seq_len)))


def layout_candidates(
    cfg: ModelConfig,
    device: DeviceSpec,
    devices: int,
    base: Layout,
    global_batch_tokens: int,
    mfu: float,
    run_cfg: Any = None,
    keep_refused: bool = False,
) -> list[LayoutChoice]:
    """Every TP (power of two up to a node), PP (dividing the layers), DP, ZeRO stage and
    checkpointing setting on `devices` devices, with memory and step time; those that tokenmill's
    trainer refuses (scaling/plan_train.py, for `run_cfg`'s train section when given) are left out
    unless `keep_refused`. Each one it runs carries the trainer's own peak per rank
    (`_trainer_memory`, ~0.4 ms a layout). Not filtered by memory. Sequence parallelism stays on where the base
    layout has it and seq_len splits over tp; elsewhere the candidate runs without it."""
    out = []
    for t in (1, 2, 4, 8, 16):
        if t > device.devices_per_node or devices % t or cfg.n_heads % t:
            continue
        for p in range(1, devices // t + 1):
            if (devices // t) % p or cfg.n_layers % p:
                continue
            d = devices // (t * p)
            m = micro_batches_for(global_batch_tokens, d, base.micro_batch, base.seq_len)
            sp = base.sequence_parallel and base.seq_len % t == 0
            for zero in (0, 1, 2, 3) if d > 1 else (0,):
                for ckpt in (False, True):
                    layout = base.model_copy(
                        update={"tp": t, "pp": p, "dp": d, "zero": zero, "micro_batches": m, "checkpointing": ckpt}
                        | {"sequence_parallel": sp}
                    )
                    refused = tuple(_refusal(cfg, layout, run_cfg))
                    if refused and not keep_refused:
                        continue
                    peak = None if refused else _trainer_memory(cfg, layout, device, run_cfg)["peak"]
                    out.append(
                        LayoutChoice(layout, device_memory(cfg, layout), step_time(cfg, layout, device, mfu), refused, peak)
                    )
    return out


def recommend_layout(candidates: list[LayoutChoice], device: DeviceSpec) -> tuple[LayoutChoice, list[LayoutChoice]]:
    """(the fastest candidate that fits the device memory, every one that fits). A candidate fits
    when both the Megatron-style model and tokenmill's trainer's own peak (plus the reserve) fit:
    `LayoutChoice.needed`. Step times within 0.5% of the fastest count as ties, which go to less
    memory, then smaller TP and PP (the seed's order: TP inside a node, PP across nodes, DP/FSDP
    for the rest)."""
    fits = [c for c in candidates if c.needed() <= device.memory_bytes]
    if not fits:
        smallest = min(candidates, key=lambda c: c.needed())
        raise NoLayoutFits(
            f"no layout fits {device.name} ({device.memory_bytes / GB:.0f} GB): the smallest needs "
            f"{smallest.needed() / GB:.1f} GB per device ({_describe(smallest.layout)}); use more "
            f"devices, a larger device, a smaller --micro-batch or --seq-len"
        )
    fastest = min(c.time.total for c in fits)
    ties = [c for c in fits if c.time.total <= fastest * 1.005]
    chosen = min(ties, key=lambda c: (c.needed(), c.layout.tp, c.layout.pp))
    return chosen, sorted(fits, key=lambda c: c.time.total)


def _describe(layout: Layout) -> str:
    return (
        f"TP {layout.tp} × PP {layout.pp} × DP {layout.dp}, ZeRO-{layout.zero}, "
        f"checkpointing {'on' if layout.checkpointing else 'off'}"
    )


def layout_reasons(choice: LayoutChoice, device: DeviceSpec, fits: list[LayoutChoice]) -> list[str]:
    """Why this layout: each axis with its traffic and link, the bubble, the memory."""
    lay, t = choice.layout, choice.time
    reasons = []
    if lay.tp > 1:
        bw, where = _link(lay.tp, device)
        reasons.append(
            f"TP {lay.tp} {where}: {6 if lay.checkpointing else 4} activation all-reduces per layer "
            f"per micro-batch over "
            f"{bw / GB:.0f} GB/s cost {t.tp_comm:.2f} s/step; it splits every matmul's weights and activations"
        )
    else:
        reasons.append("TP 1: the model fits without splitting matmuls, so no per-layer all-reduces")
    if lay.pp > 1:
        bw, where = _link(lay.tp * lay.pp, device)
        reasons.append(
            f"PP {lay.pp} {where}: only stage-boundary activations cross ({t.pp_comm:.2f} s/step at "
            f"{bw / GB:.0f} GB/s); bubble (p-1)/(m+p-1) = {bubble_fraction(lay.pp, lay.micro_batches):.1%} "
            f"with m = {lay.micro_batches} micro-batches ({t.bubble:.2f} s/step)"
        )
    else:
        reasons.append("PP 1: no pipeline bubble")
    if lay.dp > 1:
        bw, where = _link(lay.devices, device)
        what = {
            0: "plain DP (every state replicated)",
            1: "ZeRO-1 (optimizer state sharded)",
            2: "ZeRO-2 (optimizer state and gradients sharded)",
            3: "ZeRO-3/FSDP (weights too; re-gathered every micro-batch)",
        }[lay.zero]
        reasons.append(
            f"DP {lay.dp} {what}, {where} at {bw / GB:.0f} GB/s: {t.dp_comm:.2f} s/step of traffic, "
            f"{t.dp_exposed:.2f} s not hidden under compute"
        )
    reasons.append(f"activation checkpointing {'on: +1/3 compute to fit memory' if lay.checkpointing else 'off'}")
    trainer = "" if choice.trainer_peak is None else f" (tokenmill's trainer: {choice.trainer_peak / GB:.1f} GB + reserve)"
    reasons.append(
        f"memory {choice.needed() / GB:.1f} of {device.memory_bytes / GB:.0f} GB per device{trainer}; "
        f"step ≈ {t.total:.2f} s (compute {t.compute:.2f} s), the fastest of {len(fits)} fitting layout(s) compared"
    )
    return reasons


# --------------------------------------------------------------------------- the plan
@dataclass
class Plan:
    """Every figure of `tokenmill plan` and the assumptions behind them (JSON-ready via as_dict)."""

    model: dict[str, Any]
    params: float
    tokens: float
    devices: int
    device: dict[str, Any]
    mfu: float
    global_batch_tokens: int
    seq_len: int
    flops_6nd: float
    flops_exact: float
    flops_per_token_exact: float
    steps: int
    wall_clock_seconds: float
    wall_clock_days: float
    device_hours: float
    cost_usd: float
    chinchilla: dict[str, float]
    layout: dict[str, Any] | None  # None: no layout fits (see no_fit)
    layout_reasons: list[str]
    inference_aware: dict[str, float] | None = None
    roofline: dict[str, Any] | None = None  # op classes of a step on one device of the layout (scaling/roofline.py)
    trainer_memory: dict[str, Any] | None = (
        None  # tokenmill's own trainer per rank (scaling/rank_memory.py); --config: its train section
    )
    batch: dict[str, Any] | None = None  # the global batch against the critical batch (scaling/critical_batch.py)
    no_fit: dict[str, Any] | None = None  # why no layout fits these devices, and the fewest devices that fit
    measured: dict[str, Any] | None = None  # a CPU plan's timed steps (scaling/plan_measure.py); None: MFU assumed
    assumptions: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def make_plan(
    cfg: ModelConfig,
    tokens: float,
    devices: int,
    device: DeviceSpec,
    mfu: float = 0.38,
    n_params: float | None = None,
    seq_len: int = 4096,
    micro_batch: int = 1,
    global_batch_tokens: int = DEFAULT_GLOBAL_BATCH,
    layout: dict[str, Any] | None = None,
    inference_tokens: float = 0.0,
    master_weights: bool = True,
    reserve_bytes: float = 5e9,
    sequence_parallel: bool = True,
    notes: list[str] | None = None,
    run_cfg: Any = None,
    noise: Any = None,
    noise_source: str = "",
    measured: Any = None,
) -> Plan:
    """The plan for training `cfg` (N = n_params when given, else its parameter count) on `tokens`
    tokens with `devices` × `device` at `mfu`. `layout`: fixed tp/pp/dp/zero/checkpointing (any
    subset; the rest is searched). `run_cfg` (a RunConfig, `plan --config`): also the memory per
    rank of tokenmill's own trainer under the chosen layout. `noise` (a critical_batch.NoiseSummary
    measured in the run `noise_source`) judges the global batch by that run's B_simple, besides
    the published B_crit(L) at the predicted loss. `measured` (a plan_measure.CpuMeasurement):
    the wall-clock is its prediction from timed steps instead of 6ND at `mfu`."""
    if devices < 1:
        raise PlanError(f"--devices {devices}: must be >= 1")
    if tokens <= 0:
        raise PlanError(f"--tokens {tokens:g}: must be positive")
    n = float(n_params if n_params is not None else param_count(cfg)["total"])
    c = training_flops(n, tokens)
    fpt = flops_per_token(cfg, seq_len)
    seconds = measured.predicted_s if measured is not None else wall_clock_seconds(c, devices, device.peak_flops, mfu)
    hours = devices * seconds / 3600
    base = Layout(
        seq_len=seq_len,
        micro_batch=micro_batch,
        master_weights=master_weights,
        reserve_bytes=reserve_bytes,
        sequence_parallel=sequence_parallel,
    )
    choice, reasons, no_fit = _layout_or_no_fit((cfg, device, devices, base, global_batch_tokens, mfu), layout or {}, run_cfg)
    chinchilla = _chinchilla_summary(n, tokens, c)
    aware = _inference_aware_plan(n, tokens, c, inference_tokens)
    stated = _assumptions(n, devices, device, mfu, global_batch_tokens, base, inference_tokens, measured is not None)
    return Plan(
        model=_model_shape(cfg),
        params=n,
        tokens=tokens,
        devices=devices,
        device=device.model_dump(),
        mfu=mfu,
        roofline=None if choice is None else _roofline(cfg, choice.layout, device),
        trainer_memory=None if choice is None else _trainer_memory(cfg, choice.layout, device, run_cfg),
        global_batch_tokens=global_batch_tokens,
        seq_len=seq_len,
        flops_6nd=c,
        flops_exact=fpt * tokens,
        flops_per_token_exact=fpt,
        steps=math.ceil(tokens / global_batch_tokens),
        wall_clock_seconds=seconds,
        wall_clock_days=seconds / 86400,
        device_hours=hours,
        cost_usd=hours * device.price_per_hour,
        chinchilla=chinchilla,
        layout=None
        if choice is None
        else {**choice.as_dict(), "train_command": train_command(choice.layout, device.devices_per_node)},
        layout_reasons=reasons,
        no_fit=no_fit,
        inference_aware=aware,
        batch=critical_batch_plan(global_batch_tokens, chinchilla["predicted_loss"], noise, noise_source),
        measured=None if measured is None else measured.as_dict(),
        assumptions=[*(notes or []), *(measured.lines() if measured is not None else []), *stated],
    )


def plan_for(inputs: PlanInputs, devices: int, device: DeviceSpec, mfu: float, **options: Any) -> Plan:
    """make_plan for resolved flags: the shape, N, D, batch geometry, notes and run config come
    from `inputs`; `options` are make_plan's keyword arguments (layout, noise...)."""
    return make_plan(
        inputs.cfg,
        inputs.tokens,
        devices,
        device,
        mfu,
        inputs.n_params,
        inputs.seq_len,
        inputs.micro_batch,
        inputs.global_batch_tokens,
        notes=inputs.notes,
        run_cfg=inputs.run_cfg,
        **options,
    )


def _layout_or_no_fit(
    search: tuple[ModelConfig, DeviceSpec, int, Layout, int, float], layout: dict[str, Any], run_cfg: Any = None
) -> tuple[LayoutChoice | None, list[str], dict[str, Any] | None]:
    """The chosen layout and why, or (None, [], why none fits and the fewest devices that would).
    `search`: (model, device, devices, base layout, global batch tokens, MFU)."""
    try:
        choice, reasons = _layout(*search, layout, run_cfg)
    except NoLayoutFits as exc:  # the FLOPs, time and cost do not depend on the layout: still plan them
        return None, [], {"reason": str(exc), **fewest_devices(*search, run_cfg=run_cfg)}
    return choice, reasons, None


def _inference_aware_plan(n: float, tokens: float, c: float, inference_tokens: float) -> dict[str, Any] | None:
    """The inference-aware size for this plan's loss, and what serving this plan's N costs in all (None: no inference)."""
    if not inference_tokens > 0:  # NaN included, as the flag always read
        return None
    aware = inference_aware(CHINCHILLA.loss(n, tokens), inference_tokens)
    aware["total_flops_of_plan"] = c + INFERENCE_FLOPS_PER_PARAM * n * inference_tokens  # serving this plan's N
    return aware


def _chinchilla_summary(n: float, tokens: float, c: float) -> dict[str, float]:
    """Where N params × D tokens sit against Chinchilla's compute-optimal split of the same C."""
    n_opt, d_opt = chinchilla_optimal(c)
    return {
        "compute_optimal_params": n_opt,
        "compute_optimal_tokens": d_opt,
        "tokens_per_param": tokens / n,
        "overtrain_factor": tokens / n / TOKENS_PER_PARAM,
        "predicted_loss": CHINCHILLA.loss(n, tokens),
        "compute_optimal_loss": CHINCHILLA.loss(n_opt, d_opt),
    }


def _assumptions(
    n: float,
    devices: int,
    device: DeviceSpec,
    mfu: float,
    global_batch_tokens: int,
    base: Layout,
    inference_tokens: float,
    measured: bool = False,
) -> list[str]:
    """The plan's stated assumptions, one line each, so a reader can check every number's basis.
    `measured`: the wall-clock came from timed steps (its lines come first), not from 6ND at `mfu`."""
    seq_len = base.seq_len
    lines = [
        f"C = 6·N·D with N = {n:.3g} parameters; the exact count adds attention (12·L·d·s per token, s = {seq_len}) "
        f"and the lm_head of the model shape shown",
        *(
            []
            if measured
            else [
                f"T = 6ND / (n · P_peak · MFU): {devices} × {device.name} at {device.peak_flops / 1e12:.0f} TFLOP/s "
                f"({device.peak_source}), MFU {mfu:.2f}; no restarts, checkpoints or evals counted",
                f"cost at ${device.price_per_hour:.2f} per device-hour (override with --price)",
            ]
        ),
        f"global batch {global_batch_tokens:,} tokens per step; micro-batch {base.micro_batch} × {seq_len} tokens",
        "memory: bf16 weights and gradients, fp32 Adam m and v"
        + (" and an fp32 master copy" if base.master_weights else " (no fp32 master copy)")
        + f", {base.reserve_bytes / GB:.0f} GB reserved for NCCL/scratch; activations per Korthikanti et al. 2022 with "
        f"flash attention{' and sequence parallelism' if base.sequence_parallel else ', no sequence parallelism'}, "
        "1F1B pipeline",
        "layouts ranked by a step-time model: exact FLOPs at the MFU, the bubble, TP/PP traffic at its link's "
        "bandwidth, DP traffic beyond what overlaps compute; it ranks layouts, the wall-clock above is "
        + ("the timed steps'" if measured else "6ND's"),
        f"Chinchilla: D ≈ {TOKENS_PER_PARAM:.0f}·N; loss law E={CHINCHILLA.E}, A={CHINCHILLA.A}, B={CHINCHILLA.B}, "
        f"α={CHINCHILLA.alpha}, β={CHINCHILLA.beta} (Hoffmann et al. 2022, approach 3)",
    ]
    if inference_tokens > 0:
        lines.append(
            f"inference-aware: same loss as this plan, {inference_tokens:.3g} inference tokens at "
            "2·N FLOPs each (Sardana et al. 2023)"
        )
    return lines


def _model_shape(cfg: ModelConfig) -> dict[str, Any]:
    """The model shape the plan is for, as the report and JSON show it."""
    return {
        "d_model": cfg.d_model,
        "n_layers": cfg.n_layers,
        "n_heads": cfg.n_heads,
        "n_kv_heads": cfg.n_kv_heads or cfg.n_heads,
        "ffn_hidden": resolve_ffn_hidden(cfg),
        "ffn": cfg.ffn,
        "vocab_size": cfg.vocab_size,
        "params_of_shape": param_count(cfg)["total"],
    }


def critical_batch_plan(
    global_batch_tokens: int, predicted_loss: float, noise: Any = None, noise_source: str = ""
) -> dict[str, Any]:
    """The global batch against the critical batch: measured (a run's B_simple) when given, and
    Kaplan et al.'s B_crit(L) at the predicted final loss; `verdict` is the measured one if any."""
    from tokenmill.scaling.critical_batch import batch_verdict, kaplan_critical_batch

    published = batch_verdict(
        global_batch_tokens,
        kaplan_critical_batch(predicted_loss),
        f"Kaplan et al. 2020 B_crit(L) = 2e8/L^(1/0.21) tokens at the predicted final loss "
        f"L = {predicted_loss:.3f} (their tokenizer and data: indicative only)",
    )
    measured = None
    if noise is not None and noise.b_simple is not None:
        blocks = noise.block_values
        spread = f", {min(blocks):,.0f}–{max(blocks):,.0f} across {len(blocks)} blocks of those steps" if len(blocks) > 1 else ""
        loss = f" at loss {noise.loss:.3f}" if noise.loss is not None else ""
        measured = batch_verdict(
            global_batch_tokens,
            noise.b_simple,
            f"B_simple measured in {noise_source} over steps {noise.first_step}-{noise.last_step}"
            f"{loss}{spread} (it grows as the loss falls)",
        )
    return {"published": published, "measured": measured, "verdict": (measured or published)["verdict"]}


def fewest_devices(
    cfg: ModelConfig,
    device: DeviceSpec,
    devices: int,
    base: Layout,
    global_batch_tokens: int,
    mfu: float,
    limit: int = 1 << 17,
    run_cfg: Any = None,
) -> dict[str, Any]:
    """The fewest devices (a multiple of a node, above `devices`) on which some layout fits, and
    that layout: doubling finds a count that fits, then the nodes in between are tried in order."""
    node = device.devices_per_node

    def fit(n: int) -> LayoutChoice | None:
        try:
            return recommend_layout(layout_candidates(cfg, device, n, base, global_batch_tokens, mfu, run_cfg), device)[0]
        except NoLayoutFits:
            return None

    lo, hi = devices, max(node, -(-devices // node) * node)
    while hi <= limit and (hi == lo or fit(hi) is None):
        lo, hi = hi, hi * 2
    if hi > limit:
        return {"fewest_devices": None, "fewest_layout": None, "fewest_note": f"nothing fits on up to {limit:,} devices"}
    n = next(k for k in range(-(-(lo + 1) // node) * node, hi + 1, node) if fit(k) is not None)
    choice = fit(n)
    assert choice is not None
    return {"fewest_devices": n, "fewest_layout": _describe(choice.layout), "fewest_memory_bytes": choice.needed()}


def _trainer_memory(cfg: ModelConfig, layout: Layout, device: DeviceSpec, run_cfg: Any) -> dict[str, Any]:
    """Bytes per rank of tokenmill's trainer running `layout` (its busiest pipeline stage) with
    `run_cfg`'s train section (None: the defaults), in the dtype the trainer would pick on that
    device (this machine: its own rule; a GPU preset: bf16): scaling/rank_memory.py with the
    layout's dp, ZeRO stage and sequence parallelism as plan_train.layout_settings sets them. It
    differs from scaling/parallel.py's Megatron-style model where the trainer differs: fp32
    master weights and gradients, and under SP each block's gathered projection inputs kept whole."""
    import torch

    from tokenmill.mixture.config import MixtureConfig
    from tokenmill.scaling.rank_memory import estimate_rank_memory
    from tokenmill.train.config import TrainConfig
    from tokenmill.train.device import resolve_dtype

    train = run_cfg.train if run_cfg is not None else TrainConfig()
    parallel = train.parallel.model_copy(
        update={
            "dp": layout.dp,
            "tp": layout.tp,
            "pp": layout.pp,
            "zero": layout.zero,
            "sequence_parallel": layout.sequence_parallel,
        }
    )
    tc = train.model_copy(
        update={
            "micro_batch": layout.micro_batch,
            "seq_len": layout.seq_len,
            "grad_accum": layout.micro_batches,
            "activation_checkpointing": layout.checkpointing,
            "parallel": parallel,
        }
    )
    on_cpu = device.name == "this" and not torch.cuda.is_available()
    dtype = resolve_dtype(torch.device("cpu"), tc.dtype) if on_cpu else torch.bfloat16
    est = estimate_rank_memory(
        cfg,
        tc,
        dtype,
        dp=layout.dp,
        tp=layout.tp,
        pp=layout.pp,
        doc_masking=(run_cfg.mixture if run_cfg is not None else MixtureConfig()).doc_masking,
        device="cpu" if on_cpu else "cuda",
        schedule=train.parallel.pp_schedule,
        zero=layout.zero,
    )
    return {"dtype": str(dtype).replace("torch.", ""), **est}


def _roofline(cfg: ModelConfig, layout: Layout, device: DeviceSpec) -> dict[str, Any] | None:
    """The roofline of one micro-batch on the busiest (last) stage of `layout`; None when the
    device's memory bandwidth is not known."""
    if device.memory_bandwidth is None:
        return None
    from tokenmill.scaling.roofline import as_dicts, op_classes, roofline, roofline_summary

    shards = layout.dp if layout.zero >= 1 else 1
    rows = roofline(
        op_classes(
            cfg,
            layout.micro_batch,
            layout.seq_len,
            layout.tp,
            layout.pp,
            micro_batches=layout.micro_batches,
            optimizer_shards=shards,
        ),
        device.peak_flops,
        device.memory_bandwidth,
    )
    return {
        "rows": as_dicts(rows),
        **roofline_summary(rows, device.peak_flops, device.memory_bandwidth),
        "bandwidth": device.memory_bandwidth,
    }


def _refusal(cfg: ModelConfig, layout: Layout, run_cfg: Any) -> list[str]:
    """trainer_problems for `run_cfg`'s train section and phases (None: the defaults)."""
    from tokenmill.scaling.plan_train import trainer_problems

    phases = [p.seq_len for p in run_cfg.mixture.phases if p.seq_len is not None] if run_cfg is not None else []
    return trainer_problems(cfg, layout, run_cfg.train if run_cfg is not None else None, phases)


def _layout(
    cfg: ModelConfig,
    device: DeviceSpec,
    devices: int,
    base: Layout,
    global_batch_tokens: int,
    mfu: float,
    fixed: dict[str, Any],
    run_cfg: Any = None,
) -> tuple[LayoutChoice, list[str]]:
    """The recommended layout among those matching `fixed` (a fully fixed layout is only evaluated,
    with a warning reason when it does not fit or tokenmill's trainer would refuse it)."""
    fixed = {k: v for k, v in fixed.items() if v is not None}
    unknown = set(fixed) - {"tp", "pp", "dp", "zero", "checkpointing"}
    if unknown:
        raise PlanError(f"unknown layout keys {sorted(unknown)}")
    if {"tp", "pp", "dp"} <= set(fixed):
        if fixed["tp"] * fixed["pp"] * fixed["dp"] != devices:
            raise PlanError(
                f"--tp {fixed['tp']} × --pp {fixed['pp']} × --dp {fixed['dp']} = "
                f"{fixed['tp'] * fixed['pp'] * fixed['dp']}, not --devices {devices}"
            )
    every = layout_candidates(cfg, device, devices, base, global_batch_tokens, mfu, run_cfg, keep_refused=True)
    matching = [c for c in every if all(getattr(c.layout, k) == v for k, v in fixed.items())]
    wanted = [c for c in matching if not c.refused]
    if matching and not wanted:  # the trainer refuses every one: evaluate one, its refusal first among the reasons
        wanted = [min(matching, key=lambda c: c.memory.total)]
    if not wanted and {"tp", "pp", "dp"} <= set(fixed):
        m = micro_batches_for(global_batch_tokens, fixed["dp"], base.micro_batch, base.seq_len)
        layout = base.model_copy(update={**fixed, "micro_batches": m})
        refused = tuple(_refusal(cfg, layout, run_cfg))
        peak = None if refused else _trainer_memory(cfg, layout, device, run_cfg)["peak"]
        wanted = [LayoutChoice(layout, device_memory(cfg, layout), step_time(cfg, layout, device, mfu), refused, peak)]
    if not wanted:
        raise PlanError(
            f"no layout on {devices} devices matches {fixed} (TP must be a power of two up to "
            f"{device.devices_per_node} dividing the heads, PP must divide the {cfg.n_layers} layers)"
        )
    if len(wanted) == 1 and (wanted[0].needed() > device.memory_bytes or wanted[0].refused):
        only = wanted[0]
        warn = [f"TOKENMILL'S TRAINER REFUSES IT: {why}" for why in only.refused]
        if only.needed() > device.memory_bytes:
            warn.append(f"DOES NOT FIT: {only.needed() / GB:.1f} GB per device > {device.memory_bytes / GB:.0f} GB")
        return only, [*warn, *layout_reasons(only, device, [only])]
    chosen, fits = recommend_layout(wanted, device)
    return chosen, layout_reasons(chosen, device, fits)


# --------------------------------------------------------------------------- inputs of the CLI
def gpu_preset(name: str, memory_bytes: float) -> str:
    """The preset of a CUDA GPU called `name` with `memory_bytes` of memory, else "this" (calibrated)."""
    lower = name.lower()
    if "h200" in lower:
        return "h200"
    if "h100" in lower:
        return "h100"
    if "a100" in lower:
        return "a100-80gb" if memory_bytes > 50e9 else "a100-40gb"
    return "this"


def config_target(run_cfg: Any, device: str | None, devices: int | None) -> tuple[str, int, list[str]]:
    """(device preset, device count, notes) of `tokenmill plan`: the flags where given; else for
    --config the device its trainer would pick (train.device; 'auto': CUDA when present, else the
    CPU, "cpu") and its world size (train.parallel dp·tp·pp, 1 on a CPU); else 8 × h100."""
    if run_cfg is None:
        return device or "h100", devices or 8, []
    notes: list[str] = []
    if device is None:
        import torch

        from tokenmill.train.device import resolve_device

        try:
            dev = resolve_device(run_cfg.train.device)
        except ValueError as exc:
            raise PlanError(f"{exc}; or plan for a GPU from here with --device h100 (or another preset)") from exc
        device = "cpu"
        if dev.type == "cuda":
            device = gpu_preset(torch.cuda.get_device_name(dev), torch.cuda.get_device_properties(dev).total_memory)
        notes.append(f"device {device}: what train.device {run_cfg.train.device!r} picks on this machine (--device overrides)")
    elif device.lower() == "this":
        import torch

        device = "this" if torch.cuda.is_available() else "cpu"
    if devices is None:
        par = run_cfg.train.parallel
        devices = 1 if device == "cpu" else (par.dp or 1) * par.tp * par.pp
        notes.append(f"{devices} device(s): the config's train.parallel (--devices overrides)")
    return device, devices, notes


@dataclass
class PlanInputs:
    """What the flags name, resolved: the model shape, N (None: the shape's count), D and the
    batch geometry, with a note for every value that was derived rather than given."""

    cfg: ModelConfig
    n_params: float | None
    tokens: float
    seq_len: int
    micro_batch: int
    global_batch_tokens: int
    notes: list[str]
    run_cfg: Any = None  # the RunConfig of `plan --config`


def resolve_inputs(
    params: float | None = None,
    tokens: float | None = None,
    flops: float | None = None,
    arch: str | None = None,
    run_cfg: Any = None,
    devices: int = 1,
    seq_len: int | None = None,
    micro_batch: int | None = None,
    global_batch_tokens: int | None = None,
) -> PlanInputs:
    """One of: a run config (`run_cfg`, a RunConfig), --arch, --params, or --flops alone
    (compute-optimal N = √(C/120), D = 20·N). --tokens defaults to the config's budget, else 20·N."""
    from tokenmill.train.budget import tokens_per_step

    sources = [name for name, v in (("--config", run_cfg), ("--arch", arch), ("--params", params)) if v is not None]
    if len(sources) > 1:
        raise PlanError(f"give one of --config, --arch, --params, not {' and '.join(sources)}")
    if flops is not None and (sources or tokens is not None):
        raise PlanError("--flops sizes the model and the data itself: give it without --params/--arch/--config/--tokens")
    notes: list[str] = []
    n_params: float | None = None
    if run_cfg is not None:
        cfg = run_cfg.model
        if cfg.vocab_size is None:
            cfg = cfg.model_copy(update={"vocab_size": run_cfg.tokenizer.vocab_size})
            notes.append(f"vocabulary {cfg.vocab_size} from tokenizer.vocab_size")
        tc = run_cfg.train
        seq_len = seq_len or tc.seq_len
        micro_batch = micro_batch or tc.micro_batch
        if global_batch_tokens is None:
            global_batch_tokens = tc.global_batch_tokens or tokens_per_step(tc, devices)
        if tokens is None:
            tokens = float(tc.max_tokens or tc.max_steps * global_batch_tokens)
            notes.append(f"D = {tokens:.3g} tokens from the config's train.{'max_tokens' if tc.max_tokens else 'max_steps'}")
    elif arch is not None:
        if arch.lower() not in ARCHS:
            raise PlanError(f"--arch {arch!r}: unknown; known shapes are {', '.join(ARCHS)}")
        cfg = ARCHS[arch.lower()]
    elif params is not None:
        cfg = shape_for_params(params)
        n_params = params
        notes.append(
            f"shape derived from N = {params:.3g}: d_model {cfg.d_model}, {cfg.n_layers} layers, "
            f"{cfg.n_heads} heads of 128, SwiGLU, vocabulary {VOCAB} ({param_count(cfg)['total']:.3g} parameters)"
        )
    elif flops is not None:
        if flops <= 0:
            raise PlanError(f"--flops {flops:g}: must be positive")
        n_params, tokens = chinchilla_optimal(flops)
        cfg = shape_for_params(n_params)
        notes.append(
            f"compute-optimal for C = {flops:.3g}: N = √(C/120) = {n_params:.3g}, D = 20·N = {tokens:.3g} "
            f"(shape: d_model {cfg.d_model}, {cfg.n_layers} layers)"
        )
    else:
        raise PlanError("give the model: --params N (with --tokens D), --flops C, --arch NAME or --config RUN.yaml")
    if tokens is None:
        n = n_params if n_params is not None else param_count(cfg)["total"]
        tokens = TOKENS_PER_PARAM * n
        notes.append(f"D = 20·N = {tokens:.3g} tokens (Chinchilla; give --tokens to change it)")
    return PlanInputs(
        cfg=cfg,
        n_params=n_params,
        tokens=float(tokens),
        seq_len=seq_len or 4096,
        micro_batch=micro_batch or 1,
        global_batch_tokens=global_batch_tokens or DEFAULT_GLOBAL_BATCH,
        notes=notes,
        run_cfg=run_cfg,
    )
