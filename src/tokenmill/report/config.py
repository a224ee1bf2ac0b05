"""The report: its title, TensorBoard, and the stopping-rule verdict's law and thresholds.

Composed into the run config by `tokenmill.config.RunConfig`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tokenmill.config_base import Strict


class StopConfig(Strict):
    """Thresholds of the report's stopping-rule verdict (docs/operations.md "When to stop"; report/stopping.py)."""

    min_evals: int = Field(3, ge=3, description="Evaluations the loss slope needs (a line through two has no error).")
    window_decades: float = Field(
        1.0,
        gt=0,
        description="The slope is fitted over the evaluations in this many decades of tokens before the last (at least min_evals of them).",
    )
    train_window: int = Field(
        20, ge=1, description="Train-loss records (steps) averaged up to each evaluation: the smoothed train loss."
    )
    diminishing_fraction: float = Field(
        0.5,
        ge=0,
        description="Past the compute-optimal tokens per parameter, a held-out slope below this fraction of the law's is diminishing returns.",
    )
    flat_sigmas: float = Field(
        2.0,
        ge=0,
        description="A slope within this many standard errors of 0 counts as flat (diminishing returns past the optimal ratio).",
    )
    rise_tolerance: float = Field(
        0.005, ge=0, description="A bucket's held-out loss more than this fraction above its minimum of the window is rising."
    )
    gap_tolerance: float = Field(
        0.005,
        ge=0,
        description="The held-out − train gap more than this fraction of the held-out loss above its minimum of the window has widened.",
    )
    epoch_limit: float = Field(
        4.0, gt=0, description="Epochs over a bucket beyond which repetition stops paying (Muennighoff et al. 2023: about 4)."
    )


class ReportConfig(Strict):
    """The self-contained HTML report."""

    title: str | None = Field(None, description="Title shown on the report (None: the run name).")
    tensorboard: Literal["auto", "on", "off"] = Field(
        "auto", description="Write the events as TensorBoard scalars to <run>/tensorboard: 'auto' when tensorboard is installed."
    )
    scaling_law: str | None = Field(
        None,
        description="`tokenmill scaling fit`'s fit.json the stopping signals compare with (None: the published Chinchilla fit, slope only).",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names `report --serve` answers to besides 127.0.0.1, localhost, [::1] and the --host address (e.g. this machine's name with --host 0.0.0.0); any other Host header gets 421, so a DNS-rebinding page cannot read the report.",
    )
    stop: StopConfig = Field(default_factory=StopConfig, description="Thresholds of the stopping-rule verdict.")
