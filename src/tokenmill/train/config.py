"""The training recipe, the stability guard, fault injection and the parallel layout.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tokenmill.config_base import Strict


class GuardConfig(Strict):
    """The stability guard (docs/training.md; PaLM's batch skipping, Chowdhery et al. 2022; OPT's logbook, Zhang et al. 2022): skip non-finite and
    spiking steps, roll back when the loss does not recover."""

    enabled: bool = Field(True, description="Run the guard (off: a non-finite loss stops the run).")
    spike_factor: float = Field(5.0, gt=1.0, description="Skip a batch whose gradient norm exceeds this × the running median.")
    window: int = Field(50, ge=3, description="Accepted steps the running medians of gradient norm and loss cover.")
    min_history: int = Field(10, ge=1, description="Accepted steps before spikes are judged (early training is noisy).")
    loss_spike_factor: float = Field(1.5, gt=1.0, description="A loss above this × its running median opens a spike.")
    recover_steps: int = Field(50, ge=1, description="Steps the loss has to come back within before a rollback (M).")
    recover_tolerance: float = Field(0.1, ge=0.0, description="'Back' means loss <= (1 + this) × the pre-spike median.")
    lr_backoff: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="LR multiplier applied at every rollback (1: none; the "
        "backoff stays for the rest of the run and cost the demo more than the fault itself, "
        "benchmarks/bench_fault_recovery.py; lower it when the instabilities come from the LR).",
    )
    max_rollbacks: int = Field(3, ge=0, description="Rollbacks before the run is declared diverged.")
    max_consecutive_skips: int = Field(
        5,
        ge=1,
        description="Skipped steps in a row that force a rollback (a damaged "
        "model spikes on every batch: waiting longer only loses more steps; a shorter "
        "run of bad batches is skipped and recovers without one).",
    )
    rollback_rewind: bool = Field(
        True,
        description="A rollback rewinds the step counter to the checkpoint's step, so the "
        "run still takes its max_steps updates on the clean LR schedule; the rolled-back window's "
        "steps are trained on freshly drawn batches (another seed of the loader), never on the "
        "batches that were discarded. False: go on at the step after the rollback with the "
        "checkpoint's weights (the window's updates are lost, the schedule jumps ahead).",
    )
    rebaseline_after: int = Field(
        5,
        ge=1,
        description="Gradient spikes in a row with the loss at its usual level that "
        "make the high norm the new normal (the median restarts) instead of a spike.",
    )
    severe_factor: float = Field(
        2.0,
        ge=1.0,
        description="A spike this many times past its threshold (grad norm >= this × spike_factor × median, or loss >= 1 + this × (loss_spike_factor - 1) times its median, or non-finite) is severe.",
    )
    keep_spike_states: int = Field(
        2,
        ge=0,
        description="Severe spikes whose pre-spike training state is kept for diagnosis under checkpoints/spikes/ (the newest this many; 0: none).",
    )


class FaultConfig(Strict):
    """Deliberate faults, to prove the guard and the resume path on a real run (off by default).
    Steps are the run's attempt numbers: the optimizer step until a rewinding rollback, then the
    step plus the steps rewound (a fault happens once, as a real one does)."""

    nan_steps: list[int] = Field(default_factory=list, description="Steps whose loss is made NaN.")
    corrupt_steps: list[int] = Field(
        default_factory=list, description="Steps whose batch tokens are replaced by random ids (a corrupted batch)."
    )
    lr_blowup: list[int] | None = Field(None, description="[first, last] steps whose LR is multiplied by lr_blowup_factor.")
    lr_blowup_factor: float = Field(100.0, gt=0.0, description="LR multiplier inside the lr_blowup window.")
    # Process faults: each fires once per run (a marker under <run>/faults/), so the restarted job goes on.
    kill: list[int] | None = Field(
        None, description="[step, rank]: that rank SIGKILLs itself as the step starts, once per run (a lost node)."
    )
    hang: list[int] | None = Field(
        None,
        description="[step, rank]: that rank stops making progress as the step starts, once per run (a stuck read or a collective that never returns).",
    )
    slow: list[float] | None = Field(
        None,
        description="[rank, seconds]: that rank's every batch read takes this much longer (a straggler: slow storage or a slower device).",
    )
    # Early-warning faults: each should make one detector fire (benchmarks/bench_health_detectors.py).
    poison_bucket: str | None = Field(
        None,
        description="A bucket whose rows get random token ids over the poison_steps window (a source that started delivering garbage).",
    )
    poison_steps: list[int] | None = Field(None, description="[first, last] steps of the poison_bucket window.")
    collapse_embedding: list[int] | None = Field(
        None,
        description="[first, last] steps over which the embedding gets no update and its rows are pulled toward their mean by collapse_rate per step (a gradient flow cut: embeddings collapse to near-identical vectors).",
    )
    collapse_rate: float = Field(
        0.95,
        gt=0.0,
        lt=1.0,
        description="Share of each embedding row's distance from the mean row kept per collapse_embedding step.",
    )


class ParallelConfig(Strict):
    """How a torchrun job's ranks split the work: world size = dp · tp · pp (checked against the
    model before any process starts: train/layout.py)."""

    dp: int | None = Field(None, ge=1, description="Data-parallel ranks (None: world size / (tp · pp)).")
    tp: int = Field(
        1, ge=1, description="Tensor-parallel ranks: each block's attention heads and FFN columns split tp ways (DTensor)."
    )
    pp: int = Field(
        1,
        ge=1,
        description="Pipeline stages: the blocks cut into pp equal stages, the step's micro-batches (grad_accum) pipelined.",
    )
    pp_schedule: Literal["1f1b", "gpipe"] = Field(
        "1f1b", description="Pipeline schedule: 1F1B (activations of <= pp micro-batches alive) or GPipe (all of them)."
    )
    cp: int = Field(
        1,
        ge=1,
        description="Context-parallel ranks: every row split cp ways (zig-zag), K/V all-gathered per block; needs tp = pp = 1.",
    )

    zero: Literal[0, 1, 2, 3] | None = Field(
        None,
        description="ZeRO stage over the dp axis (also inside each pipeline stage): 0 replicas, 1 optimizer state sharded, 2 gradients too (FSDP2 without resharding after forward), 3 parameters too (FSDP2); None: from train.distributed (ddp 0, fsdp 3; with tp > 1 and pp = 1 always 3).",
    )

    sequence_parallel: bool = Field(
        True,
        description="With tp > 1, split the residual stream and the norms along the sequence between the tensor-parallel regions (their activations /tp; false: whole on every tp rank).",
    )


class LossScaleConfig(Strict):
    """Dynamic loss scaling of train.dtype=float16 (train/loss_scale.py); torch's GradScaler defaults."""

    init_scale: float = Field(
        2.0**16, gt=0, description="The loss scale of the first step (a power of two keeps unscaling exact)."
    )
    growth_factor: float = Field(2.0, gt=1, description="Scale × this after growth_interval steps in a row without overflow.")
    backoff_factor: float = Field(
        0.5, gt=0, lt=1, description="Scale × this at every step whose gradients overflow (that step is skipped)."
    )
    growth_interval: int = Field(2000, ge=1, description="Overflow-free steps in a row before the scale grows.")
    min_scale: float = Field(1.0, gt=0, description="The scale never backs off below this floor.")
    max_overflows_at_floor: int = Field(
        10,
        ge=1,
        description="This many overflows in a row with the scale at min_scale stop the run (fp16 cannot hold its gradients).",
    )


class HealthConfig(Strict):
    """Early-warning signals (docs/training.md "Early-warning signals"): activation and
    attention-logit magnitudes per layer, the loss per data bucket, a slow upward drift of the
    gradient norms, and embedding collapse. They only watch: training computes the same either way."""

    activation_stats_every: int = Field(
        50,
        ge=0,
        description="Log each block's output RMS and its attention-logit maximum every this many steps (0: never); a separate no-grad causal forward of a few rows after the step; not under tensor/pipeline parallelism.",
    )
    activation_rows: int = Field(
        4, ge=1, description="Sequences of the step's first micro-batch that the activation probe forwards."
    )
    attn_logit_queries: int = Field(
        64,
        ge=1,
        description="Query positions per sequence (evenly spaced, the last included) whose attention logits the probe scores against all their allowed keys.",
    )
    bucket_loss: bool = Field(
        True, description="Log the step's mean token loss per data bucket (causal objective, no pipeline parallelism)."
    )
    drift_window: int = Field(
        2000,
        ge=0,
        description="Steps the gradient-norm drift detector averages over (0: off); it compares each window's mean norm per layer group with the lowest earlier one; reads the norms logged every metrics_every steps.",
    )
    drift_ratio: float = Field(
        2.0,
        gt=1.0,
        description="Warn (grad_drift) when a group's window-mean gradient norm reaches this × its lowest earlier window mean.",
    )
    collapse_ratio: float = Field(
        10.0,
        gt=1.0,
        description="Warn (embedding_collapse) when the embedding's top singular value reaches this × the second; checked where the spectrum is logged (spectrum_every).",
    )
    bucket_alert_ratio: float = Field(
        1.5,
        gt=1.0,
        description="Warn (bucket_loss_warning) when a bucket's training loss stays above this × its running median while its rows keep coming (needs bucket_loss).",
    )
    bucket_alert_patience: int = Field(
        3,
        ge=1,
        description="Steps with rows of the bucket, in a row, above bucket_alert_ratio before the warning (one noisy batch is not a bad source).",
    )
    bucket_alert_window: int = Field(
        50, ge=3, description="Non-alarming per-step losses of each bucket its running median covers."
    )


class TrainConfig(Strict):
    """The training recipe: AdamW, warmup + cosine/linear/WSD, clipping, mixed precision,
    checkpoints, the stability guard, periodic eval, data parallelism under torchrun."""

    seq_len: int = Field(256, ge=1, description="Tokens per training sequence.")
    micro_batch: int = Field(16, ge=1, description="Sequences per forward/backward.")
    grad_accum: int = Field(1, ge=1, description="Micro-batches per optimizer step (per rank).")
    global_batch_tokens: int | None = Field(
        None,
        ge=1,
        description="Tokens per optimizer step over all ranks; sets grad_accum = this / "
        "(micro_batch · seq_len · world size), which must divide (None: use grad_accum).",
    )
    max_steps: int = Field(1000, ge=1, description="Optimizer steps.")
    max_tokens: int | None = Field(
        None, ge=1, description="Token budget; sets max_steps = ⌈max_tokens / tokens per step⌉ (None: use max_steps)."
    )
    max_seconds: float | None = Field(
        None,
        gt=0,
        description="Wall-clock budget in summed step seconds: stop at the step whose end is nearest it, "
        "LR schedule on the elapsed share of it; max_steps stays the ceiling (None: stop at max_steps).",
    )
    seed: int | None = Field(
        None,
        description="Seed of the initialization and the batch order (None: the run seed); "
        "a second seed of the same run measures its run-to-run noise.",
    )
    init_from: str | None = Field(
        None,
        description="Start from these weights instead of a random init: a tokenmill checkpoint (a step_<N> or checkpoints/ directory) or a local Hugging Face Llama directory; the optimizer starts fresh unless init_optimizer. None: random init.",
    )
    init_optimizer: bool = Field(
        False,
        description="With init_from a tokenmill checkpoint, also take its AdamW moments (the LR schedule stays this run's).",
    )
    lr: float = Field(3e-3, gt=0.0, description="Peak learning rate.")
    schedule: Literal["cosine", "linear", "wsd"] = Field(
        "cosine", description="After warmup: cosine or linear decay to min_lr_ratio·lr, or warmup-stable-decay."
    )
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0, description="Final LR as a fraction of peak.")
    warmup_steps: int = Field(50, ge=0, description="Linear warmup steps.")
    warmup_tokens: int | None = Field(
        None, ge=0, description="Warmup length in tokens; overrides warmup_steps (None: warmup_steps)."
    )
    decay_fraction: float = Field(
        0.2, gt=0.0, le=1.0, description="WSD: final share of the run over which the LR decays linearly."
    )
    weight_decay: float = Field(0.1, ge=0.0, description="AdamW decoupled weight decay (matrices only).")
    decay_embeddings: bool = Field(False, description="Also decay the embedding table (and a tied head).")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="AdamW β1.")
    beta2: float = Field(0.95, ge=0.0, lt=1.0, description="AdamW β2.")
    eps: float = Field(1e-8, gt=0.0, description="AdamW ε.")
    optimizer: Literal["adamw", "muon"] = Field(
        "adamw",
        description="adamw: AdamW over every parameter; muon: torch.optim.Muon over the 2-D weight matrices "
        "inside the transformer blocks, AdamW over embeddings, head, norms and the rest (not with FSDP or TP).",
    )
    muon_lr: float = Field(
        0.02,
        gt=0.0,
        description="Muon's peak LR, on the same warmup/decay schedule (0.02: Keller Jordan's Muon and torch's example).",
    )
    muon_momentum: float = Field(0.95, ge=0.0, lt=1.0, description="Muon's (Nesterov) momentum.")
    muon_weight_decay: float = Field(
        0.0, ge=0.0, description="Muon's decoupled weight decay (0: none, as in Keller Jordan's Muon)."
    )
    muon_ns_steps: int = Field(5, ge=1, description="Newton-Schulz iterations orthogonalizing each Muon update.")
    muon_adjust_lr: Literal["original", "match_rms_adamw"] = Field(
        "original", description="Muon's per-shape LR scaling: √max(1, rows/cols) (original) or 0.2·√max(rows, cols) (Moonlight)."
    )
    grad_clip: float = Field(1.0, ge=0.0, description="Global gradient-norm clip (0: off).")
    device: str = Field("auto", description="'auto' (cuda if present, else cpu), 'cpu', 'cuda', 'cuda:1'.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Autocast dtype (fp32 master weights); 'auto': bf16 on CUDA and on CPUs with "
        "AVX512-BF16/AMX, fp32 elsewhere; float16 (GPUs without bf16: V100, T4) adds dynamic loss scaling.",
    )
    loss_scale: LossScaleConfig = Field(
        default_factory=LossScaleConfig, description="Dynamic loss scaling under train.dtype=float16 (ignored otherwise)."
    )
    fp8: bool = Field(
        False,
        description="FP8 matmuls in the blocks' projections (torchao Float8Linear, tensorwise scaling, on bf16 autocast); CUDA with compute capability >= 8.9 only, needs torchao.",
    )
    activation_checkpointing: bool | Literal["selective"] = Field(
        False,
        description="true: recompute each block in backward (least memory, ~1/3 more compute); 'selective': keep the "
        "matmul and attention outputs, recompute the elementwise ops (norms, RoPE, SwiGLU, softmax); false: keep all.",
    )
    compile: bool | Literal["auto"] = Field(
        "auto", description="torch.compile the model: true, false, or 'auto' (when at least compile_min_steps steps remain)."
    )
    compile_min_steps: int = Field(
        1000,
        ge=0,
        description="'auto' compiles runs with at least this many steps left (a cold compile breaks even after ~600-1000 demo steps).",
    )
    threads: int | None = Field(None, ge=1, description="torch CPU threads (None: torch's default).")
    ckpt_every: int = Field(
        100, ge=0, description="Save a checkpoint every this many steps (0: only at the end and when stopped)."
    )
    keep_checkpoints: int = Field(2, ge=1, description="Keep this many most recent checkpoints.")
    keep_every: int = Field(0, ge=0, description="Also keep every checkpoint whose step is a multiple of this (0: none).")
    distributed: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="Data parallelism under torchrun: DDP (train.parallel.zero 0) or FSDP2 (zero 3); train.parallel.zero, when set, decides (and must agree if both are set).",
    )
    parallel: ParallelConfig = Field(
        default_factory=ParallelConfig, description="Data × tensor × pipeline layout of a torchrun job."
    )
    checksum_every: int = Field(50, ge=0, description="Compare a gradient checksum across ranks every this many steps (0: off).")
    metrics_every: int = Field(
        1,
        ge=0,
        description="Log per-layer-group gradient norms and the update/parameter ratio every this many steps (0: never); each costs a pass over the gradients or a copy of the parameters.",
    )
    spectrum_every: int = Field(
        0, ge=0, description="Log the embedding's top-2 singular-value ratio every this many steps (0: at eval steps)."
    )
    noise_scale_every: int = Field(
        1,
        ge=0,
        description="Measure the gradient noise scale B_simple every this many steps (0: never); needs grad_accum >= 2, costs one pass over the gradients.",
    )
    noise_scale_ema: float = Field(
        0.99,
        ge=0.0,
        lt=1.0,
        description="Decay of the moving averages of |G|² and tr(Σ) whose ratio is the logged B_simple (0.99: about 100 steps; the per-step estimates are noisy, often negative, at batches far below B_simple).",
    )
    # It changes no number of the run (tests/train/test_host_reads.py), so it stays out of the dumped
    # config and so of the run's fingerprint: a resume may switch it, and old runs' checkpoints still match.
    host_reads: Literal["auto", "immediate", "deferred"] = Field(
        "auto",
        exclude=True,
        description="When the host reads a step's loss, norms and metrics: 'deferred' packs them into one read a step late and skips on the device (one process), 'immediate' reads each where used; 'auto': deferred on CUDA, immediate elsewhere and under torchrun.",
    )
    guard: GuardConfig = Field(default_factory=GuardConfig)
    preempt_grace_s: float = Field(
        30.0,
        gt=0,
        description="Seconds a SIGTERM (preemption) leaves to finish the step and checkpoint (torchrun's --shutdown-timeout); a warning when a step + checkpoint is measured to take longer.",
    )
    hang_timeout_s: float | None = Field(
        300.0,
        gt=0,
        description="A rank with no finished step for this long (or 10× its longest step, when longer) is hung: every rank dumps its Python stacks to <run>/hangs/ and exits 4, so --restarts resumes the job (None: no watchdog).",
    )
    rank_stats_every: int = Field(
        10,
        ge=0,
        description="Gather every rank's batch-read and forward seconds every this many steps, in the step's existing stop-flag all-reduce (0: never).",
    )
    slow_rank_margin: float = Field(
        0.15,
        gt=0,
        description="A rank whose read + forward seconds exceed the ranks' median by this share is slow in that interval.",
    )
    slow_rank_patience: int = Field(
        3, ge=1, description="Slow intervals in a row before a rank is named in a slow_rank event (one interval is noise)."
    )
    faults: FaultConfig = Field(default_factory=FaultConfig)
    health: HealthConfig = Field(
        default_factory=HealthConfig,
        description="Early-warning signals: activations, attention logits, loss per bucket, gradient drift, embedding collapse.",
    )
    eval_every: int = Field(0, ge=0, description="Evaluate held-out loss every this many steps (0: only at end).")
    eval_docs: int = Field(32, ge=1, description="Held-out documents per bucket for in-training evals.")
    log_every: int = Field(10, ge=0, description="Print a progress line every this many steps (0: never).")
    peak_tflops: float | None = Field(
        None,
        gt=0.0,
        description="Device peak for MFU; None: the `tokenmill calibrate` entry for this device/threads/dtype, "
        "else the GPU table, else a quick measured matmul peak.",
    )
    objective: Literal["clm", "mlm", "span", "prefix_lm"] = Field(
        "clm",
        description="Pretraining objective: causal LM, masked LM, T5 span corruption "
        "(as a prefix LM over corrupted input + targets), or prefix LM.",
    )
    mlm_prob: float = Field(0.15, gt=0, lt=1, description="MLM: share of (non-special) positions selected.")
    span_noise_density: float = Field(0.15, gt=0, lt=1, description="Span corruption: share of tokens dropped.")
    span_mean_length: float = Field(3.0, ge=1, description="Span corruption: mean dropped-span length.")
    prefix_fraction: float | None = Field(
        None, gt=0, lt=1, description="Prefix LM: prefix length as a fraction of the row (None: uniform per row)."
    )

    @model_validator(mode="after")
    def _muon_fits_the_layout(self) -> "TrainConfig":
        # torch's Muon orthogonalizes each whole matrix: an FSDP or TP shard (a DTensor) is not one
        zero = self.parallel.zero
        if self.optimizer == "muon" and (self.distributed == "fsdp" or self.parallel.tp > 1 or (zero or 0) >= 2):
            raise ValueError(
                "train.optimizer=muon needs whole weight matrices on each rank: not with train.distributed=fsdp, "
                "train.parallel.zero >= 2 or train.parallel.tp > 1 (use DDP, zero 1, pipeline parallelism or optimizer=adamw)"
            )
        return self

    @model_validator(mode="after")
    def _zero_agrees_with_distributed(self) -> "TrainConfig":
        # train.distributed is the older name of the same choice. Its default (ddp) cannot be told
        # from an explicit ddp once a config is dumped and reloaded, so zero overrides ddp; but
        # fsdp (sharded parameters) with zero 0/1 (replicated parameters) is a contradiction
        zero = self.parallel.zero
        if zero is not None and zero <= 1 and self.distributed == "fsdp":
            raise ValueError(
                f"train.parallel.zero={zero} contradicts train.distributed=fsdp (FSDP2 is zero 2 or 3): set only train.parallel.zero"
            )
        return self

    @model_validator(mode="after")
    def _fp8_fits(self) -> "TrainConfig":
        # FP8 casts sit on bf16 autocast; torchao's Float8Linear needs float8-aware TP plans and the
        # weight gradient's inner dimension (the micro-batch's tokens) a multiple of 16
        if not self.fp8:
            return self
        if self.dtype in ("float32", "float16"):
            raise ValueError(f"train.fp8 runs on top of bf16 autocast: not with train.dtype={self.dtype}")
        if self.parallel.tp > 1 or self.parallel.pp > 1:
            raise ValueError("train.fp8 is not supported with train.parallel.tp > 1 or pp > 1 (DDP and FSDP are)")
        if (self.micro_batch * self.seq_len) % 16:
            raise ValueError(
                f"train.fp8 needs train.micro_batch × train.seq_len a multiple of 16 (FP8 matmuls), got {self.micro_batch * self.seq_len}"
            )
        return self

    @model_validator(mode="after")
    def _fp16_fits(self) -> "TrainConfig":
        # the pipeline schedule runs each stage's backward inside torch's PipelineSchedule, whose
        # loss function this trainer does not scale: fp16 there would underflow unscaled gradients
        if self.dtype == "float16" and self.parallel.pp > 1:
            raise ValueError("train.dtype=float16 (loss scaling) is not supported with train.parallel.pp > 1 (use bfloat16)")
        return self

    @model_validator(mode="after")
    def _batch_adds_up(self) -> "TrainConfig":
        # the world size is known only at launch (train/budget.py checks it there); a global batch
        # that is no whole number of one rank's micro-batches cannot fit any world size
        per_micro = self.micro_batch * self.seq_len
        if self.global_batch_tokens is not None and self.global_batch_tokens % per_micro:
            raise ValueError(
                f"train.global_batch_tokens={self.global_batch_tokens} is not a multiple of "
                f"train.micro_batch × train.seq_len = {per_micro}"
            )
        return self
