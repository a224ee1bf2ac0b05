"""Evaluation: held-out slices, tasks, probes, contamination, memorization.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator

from tokenmill.config_base import Strict


class GenerationConfig(Strict):
    """How a generative task's answers are produced (greedy or sampled, stop sequences, a token limit)."""

    max_new_tokens: int = Field(64, ge=1, description="Most new tokens generated per answer.")
    stop: list[str] = Field(
        default_factory=lambda: ["\n\n"], description="Generation ends at the first of these strings (cut from the answer)."
    )
    temperature: float = Field(0.0, ge=0.0, description="0: greedy decoding; above 0: sampling at this temperature.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass (None: off).")
    samples: int = Field(1, ge=1, description="Answers generated per item (pass@k needs samples >= k).")
    pass_k: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1], min_length=1, description="The k of pass@k reported for code tasks (each >= 1)."
    )
    seed: int = Field(0, description="Seed of the sampling generator (per item: seed + item index).")


class ExactMatchConfig(Strict):
    """How a generated answer is compared with a task's accepted answers: lm-evaluation-harness's
    exact_match (regexes removed first, then case, punctuation, digits), after stripping whitespace.
    The defaults are lm-eval's for short-answer QA (triviaqa): case and punctuation ignored."""

    strip: bool = Field(True, description="Strip leading and trailing whitespace first (lm-eval's remove_whitespace filter).")
    regexes_to_ignore: list[str] = Field(
        default_factory=list, description="Regular expressions removed from both strings before the options below."
    )
    ignore_case: bool = Field(True, description="Compare lowercased strings.")
    ignore_punctuation: bool = Field(True, description="Remove ASCII punctuation (Python's string.punctuation) before comparing.")
    ignore_numbers: bool = Field(False, description="Remove the digits 0-9 before comparing.")

    @field_validator("regexes_to_ignore")
    @classmethod
    def _compiles(cls, v: list[str]) -> list[str]:
        for rx in v:
            try:
                re.compile(rx)
            except re.error as e:
                raise ValueError(f"{rx!r} is not a regular expression: {e}") from None
        return v


class TaskConfig(Strict):
    """A downstream task read from a local file in a public layout."""

    name: str = Field(..., min_length=1, description="Task name shown in eval results and the report.")
    path: str = Field(
        ..., description="JSONL file of the task's items ('package:tasks/NAME.jsonl': a file shipped with tokenmill)."
    )
    format: Literal["hellaswag", "arc", "piqa", "winogrande", "lambada", "mmlu", "bigbench", "jsonl"] = Field(
        ...,
        description="Item layout: multiple choice by log-likelihood (hellaswag, arc, piqa, winogrande, mmlu), cloze last word "
        "(lambada), BIG-bench task.json, or tokenmill's generic JSONL (README: multiple choice, generative or code items).",
    )
    mode: Literal["auto", "multiple_choice", "generate"] = Field(
        "auto",
        description="Which form of the items is scored where a layout holds both (bigbench, jsonl); auto: the form the file's items take.",
    )
    generation: GenerationConfig = Field(default_factory=GenerationConfig, description="Decoding of generative and code items.")
    exact_match: ExactMatchConfig = Field(
        default_factory=ExactMatchConfig, description="Normalisation of generated and accepted answers before exact match."
    )
    shots: int = Field(
        0,
        ge=0,
        description="Solved examples prepended to each prompt (taken deterministically from the file, never the item itself).",
    )
    limit: int | None = Field(None, ge=1, description="Score at most this many items (None: all).")
    max_bytes: int = Field(
        64 << 20,
        ge=1,
        description="A task file larger than this many bytes is refused before it is read (every item is held in memory).",
    )
    max_line_bytes: int = Field(
        4 << 20, ge=1, description="A JSONL task file's line longer than this many bytes is refused, naming the line."
    )


class ProbeConfig(Strict):
    """A small fixed text set scored at every evaluation (docs/evaluation.md)."""

    name: str = Field(..., min_length=1, description="Probe set name shown on the timeline and in the report.")
    path: str = Field(
        ...,
        description="JSONL with a 'text' field per line, or plain text with probes separated by blank lines "
        "('package:probes/NAME.txt': a file shipped with tokenmill).",
    )


class SemanticContaminationConfig(Strict):
    """The embedding back-check beside the 13-gram rule: items whose meaning is in the training text."""

    enabled: bool = Field(False, description="Run the semantic back-check of every task against the training documents.")
    threshold: float = Field(
        0.7,
        gt=0.0,
        le=1.0,
        description="Cosine similarity at which an item counts as found in a training window (BENCHMARKS.md: the best mean F1 over paraphrases and verbatim copies on a tuning half of planted BIG-bench items, confirmed on the other half; 0.75 trades recall for precision).",
    )
    dim: int = Field(128, gt=1, description="Dimensions of the word vectors tokenmill trains (PPMI + SVD) on the training text.")
    max_train_words: int = Field(
        5_000_000, gt=0, description="Words of training text the embedder is trained on (every document is still scanned)."
    )


class LongContextConfig(Strict):
    """Whether a lengthened context is used (eval/long_context.py): loss by position, passkey probe."""

    enabled: bool = Field(False, description="Score bpb by position and the passkey probe in `tokenmill eval`.")
    seq_len: int | None = Field(
        None, ge=8, description="Length scored (None: the checkpoint's model.max_seq_len, the longest phase)."
    )
    position_buckets: int = Field(4, ge=1, description="Equal-width position buckets (the trained length is added as an edge).")
    max_docs: int = Field(64, ge=1, description="Held-out documents of at least seq_len tokens scored by position.")
    passkey_trials: int = Field(40, ge=0, description="Passkey trials, keys at depths spread over the filler (0: off).")


class CheapTierConfig(Strict):
    """What the trainer itself evaluates while `eval.tiers` is set: held-out bpb per bucket, always."""

    every_steps: int | None = Field(
        None, ge=1, description="Steps between in-training evaluations (None: train.eval_every); the last step is always scored."
    )
    probes: bool = Field(True, description="Score the probe sets (eval.probes) at every in-training evaluation.")
    samples: bool = Field(False, description="Write generation samples at every in-training evaluation (else the watcher does).")


class ExpensiveTierConfig(Strict):
    """What `tokenmill eval --watch RUN` scores in its own process: the full `tokenmill eval` of a checkpoint."""

    every_checkpoints: int = Field(
        1,
        ge=1,
        description="Score the checkpoints whose step is a multiple of this many train.ckpt_every periods (and the run's last one).",
    )
    poll_seconds: float = Field(2.0, gt=0.0, description="Seconds between looks at the checkpoint directory.")


class TiersConfig(Strict):
    """Evaluation off the training path: a cheap tier inside the trainer, the expensive one in a watcher process."""

    cheap: CheapTierConfig = Field(default_factory=CheapTierConfig, description="Scored by the trainer (it waits for it).")
    expensive: ExpensiveTierConfig = Field(
        default_factory=ExpensiveTierConfig, description="Scored by `tokenmill eval --watch RUN` (the trainer never waits)."
    )


class EvalConfig(Strict):
    """Held-out loss / perplexity / bits-per-byte per bucket, unigram baseline, samples, tasks,
    contamination and memorization audits."""

    tasks: list[TaskConfig] = Field(
        default_factory=list, description="Downstream tasks scored by `tokenmill eval` (and in training, see tasks_in_training)."
    )
    tasks_in_training: bool = Field(
        True, description="Also score the tasks at every in-training evaluation, so their curves share the loss timeline."
    )
    probes: list[ProbeConfig] = Field(default_factory=list, description="Probe sets scored at every evaluation, in training too.")
    contamination_n: int = Field(13, ge=1, description="Token n-gram length of the contamination check.")
    contamination_threshold: float = Field(
        0.01,
        ge=0.0,
        le=1.0,
        description="An eval set with more than this share of its n-grams in the training tokens is flagged.",
    )
    semantic_contamination: SemanticContaminationConfig = Field(default_factory=SemanticContaminationConfig)
    memorization_docs: int = Field(
        32, ge=0, description="Training and held-out documents per bucket whose prefixes are continued greedily (0: off)."
    )
    memorization_prefix: int = Field(32, ge=1, description="Prefix tokens given to the model.")
    memorization_suffix: int = Field(32, ge=1, description="Continuation tokens that must match exactly.")

    long_context: LongContextConfig = Field(
        default_factory=LongContextConfig, description="Long-context evaluation (after a context extension)."
    )

    max_docs: int | None = Field(200, ge=1, description="Held-out documents per bucket (None: all).")
    batch_size: int = Field(16, ge=1, description="Windows per forward pass.")
    num_samples: int = Field(3, ge=0, description="Generated samples written with every eval, in training too.")
    sample_tokens: int = Field(64, ge=1, description="New tokens per sample.")
    temperature: float = Field(0.8, ge=0.0, description="Sampling temperature.")
    top_k: int = Field(50, ge=1, description="Sample from the k most likely tokens.")
    prompt_tokens: int = Field(16, ge=1, description="Prompt length taken from the start of held-out documents.")
    sandbox: SandboxConfig = Field(
        default_factory=lambda: SandboxConfig(), description="Limits of code tasks' candidate programs."
    )

    tiers: TiersConfig | None = Field(
        None,
        description="None: every in-training evaluation scores buckets, probes, samples and (tasks_in_training) tasks. Set: the "
        "trainer scores only the cheap tier, and tasks and audits are left to `tokenmill eval --watch RUN`.",
    )

    def in_training_every(self, eval_every: int) -> int:
        """Steps between in-training evaluations: the cheap tier's when tiers are set, else train.eval_every."""
        if self.tiers is not None and self.tiers.cheap.every_steps is not None:
            return self.tiers.cheap.every_steps
        return eval_every


class SandboxConfig(Strict):
    """Isolation and limits of the process a code task's candidate program runs in (eval/sandbox.py)."""

    timeout_s: float = Field(10.0, gt=0.0, description="Wall-clock seconds before the program's whole process group is killed.")
    cpu_s: int = Field(10, ge=1, description="CPU seconds (RLIMIT_CPU); past it the kernel kills the program.")
    memory_mb: int = Field(
        512,
        ge=64,
        description="Address space in MiB per process (RLIMIT_AS); allocations past it fail. "
        "With a cgroup, the program's whole process tree also gets memory_mb + disk_mb + 64 MiB of memory.",
    )
    file_size_mb: int = Field(16, ge=1, description="Largest file the program may write, stderr included, in MiB (RLIMIT_FSIZE).")
    open_files: int = Field(64, ge=16, description="Open file descriptors (RLIMIT_NOFILE).")
    max_processes: int = Field(
        4,
        ge=0,
        description="Processes and threads the program may start: its cgroup's pids.max where one can be made, "
        "else RLIMIT_NPROC beyond the user's running tasks (not enforced for root: code tasks are then refused).",
    )
    isolation: Literal["namespaces", "process"] = Field(
        "namespaces",
        description=(
            "namespaces: each program in its own user, mount, PID, network and IPC namespaces, read-only root, "
            "no capabilities, seccomp (refused with one line where the kernel does not allow it); process: only "
            "rlimits and an in-process audit hook, not a security boundary (docs/evaluation.md)."
        ),
    )
    disk_mb: int = Field(64, ge=1, description="Size of the program's writable tmpfs in MiB (namespaces isolation).")
    max_files: int = Field(
        1024, ge=16, description="Files and directories the program may create (the tmpfs's inodes; namespaces isolation)."
    )
    isolate_network: bool = Field(
        True,
        description="process isolation: run in a new empty network namespace (`unshare -rn`) where the kernel allows it "
        "unprivileged (namespaces isolation always does).",
    )
    workers: int = Field(2, ge=1, description="Candidate programs run at the same time.")
    stderr_lines: int = Field(20, ge=1, description="Last lines of the program's stderr kept in its verdict.")
