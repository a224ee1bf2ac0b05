"""The `tokenmill` command: one sub-command per stage, `run` for all of them, `demo` for a tour.

Every command takes a YAML config and `--set section.key=value` overrides; the run directory is
`<root>/<name>` from the config unless `--run-dir` says otherwise.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable, Iterable, Optional

import typer
from rich.console import Console
from rich.text import Text

from tokenmill.config import RunConfig, load_config
from tokenmill.config_base import ConfigError, close_keys
from tokenmill.errors import UserError
from tokenmill.runs import STAGES, RunDir
from tokenmill.summaries import plain, summary_line
from tokenmill.terminal import print_table

app = typer.Typer(
    help="tokenmill: raw text to a trained, evaluated base language model, auditable and resumable.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
tokenizer_app = typer.Typer(help="Train and audit the byte-level BPE tokenizer.", no_args_is_help=True)
app.add_typer(tokenizer_app, name="tokenizer")
# Messages hold paths, ids, names and exception text: never break them, and never read rich markup
# from them (a document id with "[/]" in it crashed the printer); styles are set with style=/Text.
console = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)
out = Console(markup=False)  # tables on stdout: their cells are data too

# No click-side path checks: the config loader names a missing file or a directory in one line,
# where click would print a usage box.
ConfigArg = typer.Argument(..., help="Run config (YAML). See examples/ and `tokenmill demo`.", exists=False)
SetOpt = typer.Option(None, "--set", "-s", help="Override a config key: section.key=value (repeatable).")
RunDirOpt = typer.Option(None, "--run-dir", help="Run directory (default: <root>/<name> from the config).")


def demo_config_path() -> Path:
    return Path(str(resources.files("tokenmill") / "configs" / "demo.yaml"))


def _open(config: Path | None, overrides: list[str] | None, run_dir: Path | None) -> RunDir:
    cfg: RunConfig = load_config(config, overrides or [])
    return RunDir.create(cfg, run_dir)


def _print_eval(run: RunDir, step: int | None = None) -> None:
    """The bits-per-byte table of the run's evaluation at `step` (default: the newest), when there
    is one: what `run`, `demo` and `eval` end with."""
    from tokenmill import json_limits
    from tokenmill.eval.table import bpb_table, latest_eval, small_sample_notes, tasks_table

    record = latest_eval(run.path) if step is None else json_limits.load_file(run.sub("eval", f"{step}.json"))
    if record is not None:
        print_table(bpb_table(record, with_notes=False), console)
        for note in small_sample_notes(record):
            console.print(Text(f"warning: {note}", style="yellow"))
        tasks = tasks_table(record)
        if tasks is not None:
            print_table(tasks, console)


def _say(label: str, style: str, message: object = "", sep: str = ": ") -> None:
    """One line: a coloured label, then the message as plain text (a mapping or a list in words,
    `key value, key value`: a person never reads a Python repr)."""
    from tokenmill.train.launch_agent import first_in_job

    text = plain(message) if isinstance(message, (Mapping, list, tuple)) else str(message)
    if first_in_job(label + sep + text):  # K ranks that hit the same error say it once
        console.print(Text.assemble((label, style), sep + text if text else ""))


def user_error_message(exc: BaseException) -> str:
    """A user error as one line naming the file, field or record (a message over several lines, a
    YAML mark or an OSError's errno would otherwise spill or hide it)."""
    import yaml
    from pydantic import ValidationError

    from tokenmill.config import yaml_problem
    from tokenmill.config_base import format_validation_error

    if isinstance(exc, ValidationError):
        text = format_validation_error(exc, exc.title)
    elif isinstance(exc, yaml.YAMLError):
        text = f"not valid YAML: {yaml_problem(exc)}"
    elif isinstance(exc, OSError) and exc.filename is not None:
        names = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
        text = f"{names}: {exc.strerror or exc}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _guard(fn: Callable[[], Any], resume_hint: str | None = None, checkpoint_hint: str | None = None) -> Any:
    """User errors (bad config, missing input, bad data, a path that cannot be read or written)
    print one line, no traceback. After Ctrl-C or a preemption, the hint says how to continue,
    and only where the work does continue: `checkpoint_hint` when training saved a checkpoint,
    else `resume_hint` (a stage that picks up its finished parts), else nothing. Every command a
    message or hint names is one the user can paste: CONFIG in it becomes their config (with their
    --set and --run-dir), and a hint's {again} and {resume} the command they ran."""
    import yaml
    from pydantic import ValidationError

    try:
        return fn()
    except (ConfigError, ValidationError) as exc:
        _say("config error", "red", paste_ready(user_error_message(exc)))
        raise typer.Exit(2)
    except (UserError, ValueError, OSError, yaml.YAMLError) as exc:
        _say("error", "red", paste_ready(user_error_message(exc)))
        raise typer.Exit(1)
    except KeyboardInterrupt as exc:  # Ctrl-C (130), or a preemption's SIGTERM (TrainingPreempted: 75)
        _say(paste_ready(" ".join(str(exc).split())) or "interrupted", "yellow", sep="")
        saved = getattr(exc, "checkpoint", None) is not None  # the trainer's: a checkpoint was written
        hint = checkpoint_hint if saved and checkpoint_hint else resume_hint
        if hint:
            _say(hint_text(hint), "yellow", sep="")
        raise typer.Exit(getattr(exc, "exit_code", 130))


def _click() -> Any:
    """The click package typer parses with: typer ≥ 0.23 carries its own copy (typer._click), older
    ones use click itself; the current context is only found in the one that made it."""
    import importlib

    core = next(c for c in typer.Context.__mro__ if "__enter__" in vars(c)).__module__  # ...click.core
    return importlib.import_module(core.rsplit(".", 1)[0])


def _context() -> Any:
    """The click context of the command being run (None outside one)."""
    import importlib

    return importlib.import_module(_click().__name__ + ".globals").get_current_context(silent=True)


def _command_path(ctx: Any) -> str:
    """The sub-command being run: `train`, `tokenizer train` (the root's name is however Python
    was started, so it is left out)."""
    names, parent = [], ctx
    while parent.parent is not None:
        names.append(str(parent.info_name))
        parent = parent.parent
    return " ".join(reversed(names))


def hint_text(hint: str) -> str:
    """A hint with `{again}` / `{resume}` filled in with the command being run (with --resume);
    outside a command (a library call) it says "the same command" rather than an empty command."""
    again, resume = this_command(), this_command("--resume")
    if not again:
        hint = hint.replace("`{again}`", "{again}").replace("`{resume}`", "{resume}")
        again, resume = "the same command", "the same command with --resume"
    return hint.format(again=again, resume=resume)


def this_command(flag: str | None = None) -> str:
    """The command being run, as the user could type it again: its sub-command and every argument
    and option given on the command line (paths quoted for the shell), plus `flag` when it is not
    there yet. Empty outside a command."""
    import shlex

    ctx, click = _context(), _click()
    if ctx is None:
        return ""
    words = ["tokenmill", *_command_path(ctx).split()]
    for param in ctx.command.params:
        value = ctx.params.get(str(param.name))
        if ctx.get_parameter_source(str(param.name)) != click.core.ParameterSource.COMMANDLINE or value is None:
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if param.param_type_name == "argument":
            words += [str(v) for v in values]
        elif param.param_type_name == "option":
            words += _option_words(param, values)
    if flag is not None and flag not in words:
        words.append(flag)
    return shlex.join(words)


def _option_words(option: Any, values: list[Any]) -> list[str]:
    """One option as typed: a flag alone (its --no- form when off), else the option before each value."""
    name = max(option.opts, key=len)  # --set rather than -s: says what it is
    if option.is_flag:
        on = bool(values[0])
        return [name] if on else list(option.secondary_opts[:1])
    return [w for v in values for w in (name, str(v))]


# The commands whose CONFIG is a run config (`tokenmill plan`'s and `curate`'s option or argument),
# and those that take a run directory, whose config.yaml is the run's config.
_RUN_CONFIG_COMMANDS = {"curate", "curate-eval", "tokenizer train", "tokenize", "train", "eval", "report", "run", "demo"}
_RUN_CONFIG_COMMANDS |= {"checkpoint average", "verify-resume", "plan"}
_RUN_DIR_COMMANDS = {"replay", "trace", "stop-signals"}


def _config_words() -> str | None:
    """The user's run config as a hint's commands take it: the path, their --set overrides and
    --run-dir, quoted for the shell (None where the command has no run config)."""
    import shlex

    ctx = _context()
    if ctx is None:
        return None
    command, params = _command_path(ctx), ctx.params
    config, run_dir = params.get("config"), params.get("run_dir")
    if command in _RUN_DIR_COMMANDS or params.get("watch"):
        run_dir = params.get("run_path") or params.get("watch")
        config = Path(run_dir) / "config.yaml"
    elif command == "demo":
        config = demo_config_path()
    elif command == "curate" and config is None and len(params.get("inputs") or []) == 1:
        config = params["inputs"][0]  # `tokenmill curate CONFIG`
    elif command not in _RUN_CONFIG_COMMANDS:
        return None
    if not isinstance(config, Path):
        return None
    words = [str(config)]
    for override in params.get("set_") or []:
        words += ["--set", override]
    if run_dir is not None:
        words += ["--run-dir", str(run_dir)]
    return shlex.join(words)


_COMMAND_SPAN = re.compile(r"`([^`]*\btokenmill\b[^`]*)`")


def paste_ready(message: str) -> str:
    """The message with CONFIG, in each `tokenmill ...` command it names, replaced by the user's
    config (path, --set overrides, --run-dir): errors raised deep in a stage say `tokenmill
    tokenizer train CONFIG`, and the command line is only known here."""
    words = _config_words()
    if words is None:
        return message
    return _COMMAND_SPAN.sub(lambda m: "`" + re.sub(r"\bCONFIG\b", lambda _: words, m.group(1)) + "`", message)


def _progress(message: str) -> None:
    _say("▶", "cyan", message, sep=" ")


RESUME_TRAIN = "`{resume}` continues from it."
RERUN_CONTINUES = "`{again}` continues from it."
RERUN_REUSES = "`{again}` continues: finished runs are reused."


def _one_stage(stage: str, config: Path, overrides: list[str] | None, run_dir: Path | None) -> None:
    from tokenmill.pipeline import run_stage

    def go() -> None:
        run = _open(config, overrides, run_dir)
        run_stage(run, stage)

    _guard(go)


@app.command()
def curate(
    inputs: Optional[list[Path]] = typer.Argument(
        None,
        metavar="CONFIG | INPUT",
        help="A run config (YAML), as every stage takes; or, with -o OUT, files or directories to curate: "
        "WARC/WET, HTML, JSONL(.gz/.zst), Parquet, text, code trees.",
    ),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Output directory (required with INPUTs)."),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="Run config (YAML) whose `curate` section curates the INPUTs (with -o OUT)."
    ),
    steps: Optional[str] = typer.Option(None, "--steps", help="Comma-separated subset of the steps, run in canonical order."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help="Worker processes (or Ray CPUs)."),
    executor: Optional[str] = typer.Option(None, "--executor", help="local (processes) or ray (RAY_ADDRESS, else a local Ray)."),
    bucket: Optional[str] = typer.Option(
        None, "--bucket", help="Bucket for the INPUTs (default: code for code trees, else web)."
    ),
    reference: Optional[Path] = typer.Option(
        None,
        "--reference",
        help="Text that reads like what you want (a file or directory): the model-based quality "
        "step learns from it and removes what reads least like it (curate.model_quality.reference).",
    ),
    set_: Optional[list[str]] = SetOpt,
    run_dir: Optional[Path] = RunDirOpt,
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Replace tokenmill's earlier curate output in OUT (only the entries its .tokenmill "
        "marker lists; other files there are kept). A folder without that marker is refused "
        "even with --overwrite.",
    ),
) -> None:
    """Extract, normalize, filter, deduplicate and decontaminate text into curated Parquet shards.

    `tokenmill curate CONFIG` curates the config's sources into its run directory, as every
    stage takes its config. `tokenmill curate INPUT... -o OUT [--config CONFIG]` curates those
    files into OUT (with the config's `curate` section, else the defaults); a YAML file given
    there as the only INPUT, or one that reads as a run config, is refused rather than curated as text.
    Steps (canonical order): license (off without curate.license_policy), extract, normalize, url, langid,
    quality, model_quality, classify, safety, pii,
    exact_dedup, minhash_dedup, line_dedup, substring_dedup (off unless curate.substring_dedup.enabled),
    decontaminate, bucket. Writes OUT/<bucket>/part-*.parquet,
    OUT/_rejected/ (every removed document with the step, rule and measured value) and
    OUT/_funnel.json. A killed run, started again, continues where it stopped. OUT must be new,
    empty, or an earlier `tokenmill curate -o` output (a .tokenmill marker), which --overwrite
    replaces (any other file there is kept). An INPUT that exists is read as that file, even when
    its name holds [ * ?; only one that names nothing is a glob pattern.
    """
    from tokenmill.pipeline import run_stage

    overrides = _curate_overrides(set_, steps, workers, executor, reference)

    def go() -> None:
        stage_config, paths = _curate_mode(list(inputs or []), out, config)
        if stage_config is not None:
            run_stage(_open(stage_config, overrides, run_dir), "curate")
            return
        assert out is not None  # _curate_mode refuses INPUTs without -o OUT
        from tokenmill.data.curate import curate as curate_paths
        from tokenmill.data.sources import sources_from_paths

        run_cfg = load_config(config, overrides)
        cfg = run_cfg.curate.model_copy(update={"sources": sources_from_paths([str(p) for p in paths], bucket)})
        from tokenmill.runs import EventLog, check_event_log

        where = out.absolute()  # `-o .` has no name to put the event log beside
        log = where.parent / f".{where.name}.events.jsonl"
        check_event_log(log)
        summary = curate_paths(
            cfg,
            out,
            base_dir=config.parent if config else Path.cwd(),
            events=EventLog(log),
            seed=run_cfg.seed,
            overwrite=overwrite,
        )
        _say("✓ curate", "green", summary_line("curate", summary), sep=" ")

    _guard(go, resume_hint="`{again}` continues: finished shards are not redone.")


def _q(path: Path | str) -> str:
    """A path as a shell word: a hint's command pastes as it is, spaces and all."""
    import shlex

    return shlex.quote(str(path))


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def _reads_as_run_config(path: Path) -> bool:
    """A YAML file whose top-level keys are all run config sections (name, curate, train, ...)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and bool(data) and set(map(str, data)) <= set(RunConfig.model_fields)


def _curate_mode(inputs: list[Path], out: Optional[Path], config: Optional[Path]) -> tuple[Optional[Path], list[Path]]:
    """(the run config whose sources to curate into its run directory, or None; the INPUTs to
    curate into OUT). One YAML argument without -o is a config, as for every other stage; a YAML
    INPUT with -o that is the only one, or reads as a run config, is refused: curating a config
    file as text is never what was meant, and would fail far from the cause."""
    if len(inputs) == 1 and _is_yaml(inputs[0]) and out is None:
        if config is not None:
            raise ConfigError(
                f"tokenmill curate: two configs ({inputs[0]} and --config {config}); give one: `tokenmill curate {_q(inputs[0])}`"
            )
        return inputs[0], []
    if not inputs:
        if config is None:
            raise ConfigError("tokenmill curate: give the run config (`tokenmill curate CONFIG`), or INPUT paths with -o OUT")
        return config, []
    if out is None:
        raise ConfigError("tokenmill curate INPUT...: -o OUT is required (or give one run config: `tokenmill curate CONFIG`)")
    for p in inputs:
        if _is_yaml(p) and (len(inputs) == 1 or _reads_as_run_config(p)):
            raise ConfigError(
                f"{p}: a YAML file given as an INPUT to curate as text; did you mean `tokenmill curate {_q(p)}` "
                f"(its sources into its run directory) or `tokenmill curate --config {_q(p)} INPUT... -o {_q(out)}`?"
            )
    return None, inputs


def _curate_overrides(
    set_: Optional[list[str]], steps: Optional[str], workers: Optional[int], executor: Optional[str], reference: Optional[Path]
) -> list[str]:
    """The --set overrides, then curate's own flags as the config keys they stand for."""
    overrides = list(set_ or [])
    if steps:
        overrides.append(f"curate.steps=[{steps}]")
    if workers is not None:
        overrides.append(f"curate.workers={workers}")
    if executor is not None:
        overrides.append(f"curate.executor={executor}")
    if reference is not None:  # a JSON string is YAML: any path survives the override parser
        overrides.append(f"curate.model_quality.reference={json.dumps(str(reference.absolute()))}")
    return overrides


@app.command("curate-eval")
def curate_eval(
    what: str = typer.Argument(..., help="pii, safety or quality"),
    labelled: Path = typer.Argument(..., help="Labelled JSONL file (see `tokenmill.data.curate_eval`)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Run config whose curate section is used."),
    set_: Optional[list[str]] = SetOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the safety result as JSON, not a table."),
) -> None:
    """Measure a curation filter on labelled data: PII recall and over-removal per bucket,
    toxicity false-positive rate and recall per slice (news, medicine, law, code, fiction...; the
    word list alone and with its second-pass classifier), or the quality rules' keep rate per
    language on parallel text, with the spread across languages."""
    import json as _json

    def go() -> None:
        from tokenmill.data import curate_eval as ce

        cfg = load_config(config, list(set_ or [])).curate
        if what == "pii":
            result = ce.eval_pii(labelled, cfg)
        elif what == "safety":
            result = ce.eval_safety(labelled, cfg, base_dir=config.parent if config else None)
            if not as_json:
                typer.echo(ce.safety_table(result))
                return
        elif what == "quality":
            result = ce.eval_quality(labelled, cfg)
        else:
            raise ConfigError(f"curate-eval: unknown target {what!r}: pii, safety or quality")
        typer.echo(_json.dumps(result, indent=1))

    _guard(go)


@app.command("quality-calibrate")
def quality_calibrate(
    reference: Path = typer.Argument(
        ..., help='JSONL of reference documents: {"text": ..., "language": ISO code}, English included.'
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Profile file to write (set curate.quality.language_profiles to it)."),
    stoplists: Optional[Path] = typer.Option(None, help="Directory of jusText-named stop lists (default: jusText's own)."),
    min_docs: int = typer.Option(10, help="Languages with fewer reference documents keep the fallback."),
) -> None:
    """Per-language quality thresholds from reference text (FineWeb-2's method): each signal's
    median in the language over its median in English scales English's thresholds."""

    def go() -> None:
        from tokenmill.data.steps.language_calibration import calibrate_file, check_profile_target, write_profiles

        check_profile_target(out)  # before the work: a file tokenmill did not write is never replaced
        profiles = calibrate_file(reference, stoplists, min_docs=min_docs)
        write_profiles(profiles, out, source=str(reference))
        for lang, p in profiles.items():
            words = p.stop_words or []
            some = ", ".join(words[:8]) + (", …" if len(words) > 8 else "")
            typer.echo(
                f"{lang}: {p.documents} documents, scale {p.scale}, "
                + (f"{len(words)} stop words ({some})" if words else "no stop-word check")
            )
        _say("✓", "green", f"{len(profiles)} profiles → {out}", sep=" ")

    _guard(go)


@tokenizer_app.command("train")
def tokenizer_train(config: Path = ConfigArg, set_: Optional[list[str]] = SetOpt, run_dir: Optional[Path] = RunDirOpt) -> None:
    """Train a byte-level BPE on a seeded sample of the curated training text.

    Writes tokenizer/tokenizer.json (HF tokenizers format) and tokenizer/audit.json
    (bytes per token and exact round-trip, per bucket, on held-out documents).
    """
    _one_stage("tokenizer", config, set_, run_dir)


@app.command()
def tokenize(config: Path = ConfigArg, set_: Optional[list[str]] = SetOpt, run_dir: Optional[Path] = RunDirOpt) -> None:
    """Encode curated documents into memmapped token shards with document offsets.

    Writes tokens/<bucket>/{train,val}-*.bin/.idx/.docs.parquet and tokens/_meta.json; each
    document ends with EOS and its id maps back to the curated row.
    """
    _one_stage("tokenize", config, set_, run_dir)


@app.command()
def train(
    config: Path = ConfigArg,
    set_: Optional[list[str]] = SetOpt,
    run_dir: Optional[Path] = RunDirOpt,
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest valid checkpoint."),
    restarts: int = typer.Option(
        0,
        "--restarts",
        min=0,
        help="Restart training from the latest checkpoint "
        "after a crash, a killed or a hung rank, up to N times (one process: a "
        "supervising parent; with --nproc: torchrun --max-restarts).",
    ),
    nproc: int = typer.Option(
        1,
        "--nproc",
        min=1,
        help="Train on K processes of this machine (torchrun "
        "--standalone) laid out as train.parallel (dp × tp × pp = K), checked against "
        "the model before any process starts; the data stages run first, here. With --nnodes: "
        "processes per node.",
    ),
    nnodes: int = typer.Option(
        1, "--nnodes", min=1, help="Train on N machines, each running this command (torchrun, elastic c10d rendezvous)."
    ),
    node_rank: int = typer.Option(0, "--node-rank", min=0, help="This machine's index, 0..N-1; node 0 hosts the rendezvous."),
    rdzv: Optional[str] = typer.Option(
        None, "--rdzv", help="HOST:PORT where the nodes meet: node 0's address and a free port (needed with --nnodes > 1)."
    ),
    rdzv_timeout: int = typer.Option(
        600, "--rdzv-timeout", min=1, help="Seconds the nodes wait for each other to (re)join the rendezvous."
    ),
    print_launch: bool = typer.Option(
        False, "--print-launch", help="Check the options, print the torchrun command line this node would run, exit."
    ),
) -> None:
    """Train the model on the token store: AdamW, warmup + cosine, clipping, atomic checkpoints.

    One `train_step` event per optimizer step goes to events.jsonl. Ctrl-C, and SIGTERM (a
    preemption: spot instances, Slurm), finish the step on every rank and save a checkpoint
    there; `--resume` continues from it with exactly the same losses. A rank that finishes no
    step for train.hang_timeout_s dumps every rank's Python stacks to <run>/hangs/ and ends the
    job. Exit codes: 1 user error, 2 config error, 3 crash (an unexpected exception, traceback
    printed), 4 a hung rank, 75 preempted (checkpoint saved), 130 Ctrl-C. With --restarts N a
    crash, a hang or a fatal signal (SIGKILL, SIGSEGV...) restarts training with --resume,
    writing a `restart` event; user errors, Ctrl-C and preemption do not.
    """
    from tokenmill.train.supervisor import shell_exit_code, supervise, train_command

    from tokenmill.train.watchdog import restart_attempt

    resume = resume or restart_attempt() > 0  # a rank of a group torchrun restarted goes on from the checkpoint
    if nproc > 1 or nnodes > 1 or print_launch:
        nodes = _Nodes(nnodes, node_rank, rdzv, rdzv_timeout, print_launch)
        rc = _guard(lambda: _launch_ranks(config, list(set_ or []), run_dir, nproc, resume, restarts, nodes))
        if rc != 0:
            raise typer.Exit(rc)
        return
    if restarts > 0:

        def go() -> int:
            run = _open(config, set_, run_dir)
            return supervise(train_command(config, list(set_ or []), run.path), run.path, restarts, resume).returncode

        rc = _guard(go)
        if rc != 0:
            raise typer.Exit(shell_exit_code(rc))
        return
    _train_here(config, set_, run_dir, resume)


def _train_here(config: Path, overrides: list[str] | None, run_dir: Optional[Path], resume: bool) -> None:
    """`tokenmill train` in this process. A crash (not a user error: a bug or a device failure)
    prints its traceback and exits 3, naming the checkpoint `--resume` would continue from, if any."""
    from tokenmill.pipeline import run_stage
    from tokenmill.train.checkpoint import latest_checkpoint
    from tokenmill.train.supervisor import CRASH_EXIT

    opened: list[RunDir] = []

    def go() -> None:
        opened.append(_open(config, overrides, run_dir))
        run_stage(opened[0], "train", resume=resume)

    try:
        _guard(go, checkpoint_hint=RESUME_TRAIN)
    except typer.Exit:
        raise
    except Exception:
        import traceback

        traceback.print_exc()
        latest = latest_checkpoint(opened[0].sub("checkpoints")) if opened else None
        how = (
            f"`{this_command('--resume')}` continues from {latest}; add `--restarts N` to do so automatically"
            if latest is not None
            else "no checkpoint was saved: training starts over when run again"
        )
        _say("training crashed", "red", f"(exit code {CRASH_EXIT}); {how}", sep=" ")
        raise typer.Exit(CRASH_EXIT)


@dataclass(frozen=True)
class _Nodes:
    """`tokenmill train`'s multi-node options (one node: nnodes 1, no rendezvous)."""

    nnodes: int = 1
    node_rank: int = 0
    rdzv: Optional[str] = None
    rdzv_timeout: int = 600
    print_only: bool = False


def _torchrun_command(
    config: Path,
    overrides: list[str],
    run_path: Path,
    nproc: int,
    restarts: int,
    grace: int,
    nodes: _Nodes,
    endpoint: Optional[tuple[str, int]],
) -> list[str]:
    """The torchrun command line of this node: --standalone for one node, else an elastic c10d
    rendezvous at `endpoint` (--rdzv)."""
    from tokenmill.train.multinode import torchrun_node_args

    where = (
        ["--standalone"]
        if endpoint is None
        else torchrun_node_args(nodes.nnodes, nodes.node_rank, endpoint, run_path, nodes.rdzv_timeout)
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nproc}"]
    cmd += [f"--max-restarts={restarts}", f"--shutdown-timeout={grace}", "-m", "tokenmill", "train", str(config)]
    cmd += ["--run-dir", str(run_path)]
    for o in overrides:
        cmd += ["--set", o]
    return cmd


def _launch_ranks(
    config: Path,
    overrides: list[str],
    run_dir: Optional[Path],
    nproc: int,
    resume: bool,
    restarts: int = 0,
    nodes: _Nodes = _Nodes(),
) -> int:
    """`tokenmill train --nproc K [--nnodes N ...]`: refuse a layout or node options that cannot
    work, finish the data stages in this process (one node; several nodes need them finished),
    then run K ranks under torchrun (which restarts the group up to `restarts` times after a rank
    fails); returns the exit code for the shell.

    torchrun runs as a child in its own process group: a SIGINT or SIGTERM reaching this process
    is passed on to it once (it passes it to the ranks, which stop together at a step end with a
    checkpoint), and its --shutdown-timeout is train.preempt_grace_s, the time the ranks get
    before SIGKILL."""
    import os
    import shlex

    from tokenmill.pipeline import run_pipeline
    from tokenmill.runs import read_events
    from tokenmill.train.layout import check_launch
    from tokenmill.train.multinode import AGENT_ENV, MultinodeError, check_nodes, check_rendezvous
    from tokenmill.train.stop_signals import PREEMPTED_EXIT
    from tokenmill.train.launch_agent import failure_line
    from tokenmill.train.supervisor import shell_exit_code

    endpoint = check_nodes(nodes.nnodes, nodes.node_rank, nodes.rdzv)  # before anything is touched
    run = _open(config, overrides, run_dir)  # a layout that does not fit the model is a config error
    grace = max(1, math.ceil(run.config.train.preempt_grace_s))
    cmd = _torchrun_command(config, overrides, run.path.resolve(), nproc, restarts, grace, nodes, endpoint)
    sizes = check_launch(run.config.model, run.config.train, nproc * nodes.nnodes)
    if nodes.print_only:
        env = [f"{k}={v}" for k, v in AGENT_ENV.items()] if endpoint else []
        typer.echo(shlex.join(env + cmd + (["--resume"] if resume else [])))
        return 0
    if nodes.nnodes > 1:
        if not run.is_fresh("tokenize"):  # N nodes running the data stages at once would race on one run dir
            raise MultinodeError(
                f"--nnodes {nodes.nnodes} trains on finished data: run `tokenmill tokenize {config}` once (one node) first"
            )
        assert endpoint is not None
        check_rendezvous(endpoint, nodes.node_rank, nodes.rdzv_timeout)  # bounded, before torchrun retries for minutes
        os.environ.update(AGENT_ENV)
    elif not run.is_fresh("tokenize"):  # torchrun ranks only train, on finished data
        run_pipeline(run, stages=("curate", "tokenizer", "tokenize"))
    where = f"{nodes.nnodes} nodes × {nproc}" if nodes.nnodes > 1 else f"{nproc}"
    _say("▶ train", "bold", f"on {where} ranks: {sizes.describe()}", sep=" ")
    done, failures = _run_agent(cmd, run.path, resume)
    if done.interrupted and done.returncode != 0:
        ends = [
            e["kind"]
            for e in read_events(run.path / "events.jsonl")
            if e.get("stage") == "train" and e.get("kind") in ("preempted", "interrupted", "child_started")
        ]
        if ends and ends[-1] == "preempted":
            return PREEMPTED_EXIT
        if ends and ends[-1] == "interrupted":
            return 130
    if failures and not done.interrupted:  # the ranks' own lines (their error, a crash's traceback) are above
        _say("training stopped", "red", failure_line(failures))
    elif endpoint is not None and done.returncode != 0 and not done.interrupted:
        _say(
            f"node {nodes.node_rank}: training ended (torchrun exit code {done.returncode})",
            "red",
            f"a RendezvousTimeoutError above means not all {nodes.nnodes} nodes joined {nodes.rdzv} within "
            f"--rdzv-timeout {nodes.rdzv_timeout}; start the missing node(s) with the same command (add --resume to go on)",
        )
    return shell_exit_code(done.returncode)


def _run_agent(cmd: list[str], run_path: Path, resume: bool) -> tuple[Any, dict[int, int]]:
    """torchrun's agent, as train/launch_agent.py runs it: a rank's failure becomes one line and the
    rank's exit code, not torchrun's ChildFailedError traceback. Returns how it ended and the failed
    ranks' exit codes. The launch folder (where ranks claim the lines they say, so K ranks with one
    error print it once) is removed after."""
    import os
    import shutil
    import signal
    import tempfile

    from tokenmill.train.launch_agent import LAUNCH_DIR_ENV, MODULE, read_failures
    from tokenmill.train.supervisor import supervise

    agent = [MODULE if part == "torch.distributed.run" else part for part in cmd]
    launch_dir = Path(tempfile.mkdtemp(prefix="tokenmill-launch-"))
    os.environ[LAUNCH_DIR_ENV] = str(launch_dir)  # inherited by the agent and its ranks
    try:
        # restarts are torchrun's (one agent for the job); should this process die, torchrun gets SIGTERM
        # and stops its ranks the preemption way (checkpoint, exit) instead of leaving them orphaned
        done = supervise(agent, run_path, restarts=0, resume=resume, death_signal=signal.SIGTERM)
        return done, read_failures(launch_dir)
    finally:
        os.environ.pop(LAUNCH_DIR_ENV, None)
        shutil.rmtree(launch_dir, ignore_errors=True)


@app.command("eval")
def eval_(
    config: Optional[Path] = typer.Argument(None, help="Run config (YAML); not needed with --watch.", exists=False),
    set_: Optional[list[str]] = SetOpt,
    run_dir: Optional[Path] = RunDirOpt,
    checkpoint: Optional[Path] = typer.Option(None, help="Checkpoint directory (default: latest)."),
    watch: Optional[Path] = typer.Option(
        None,
        "--watch",
        metavar="RUN",
        help="Follow RUN's checkpoints in this process and score every due one (eval.tiers.expensive) until training ends.",
    ),
    device: str = typer.Option("auto", "--device", help="--watch: device to score on (auto: the last CUDA device, else cpu)."),
    reference_hf: Optional[Path] = typer.Option(
        None,
        "--reference-hf",
        help="An export of the checkpoint (`tokenmill export hf`): score the config's generative and code tasks "
        "(the shipped quiz_qa and python_code when it has none) with tokenmill and with transformers' generate "
        "on the export, greedy, side by side; exit 1 when any answer or number differs. Writes nothing.",
    ),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="With --reference-hf: the first N items of each task."),
) -> None:
    """Held-out loss, perplexity and bits-per-byte per bucket, beside a unigram baseline; samples.

    Writes eval/<step>.json and an `eval` event; with --watch, eval/watch/step_<N>.json per checkpoint.
    """
    from tokenmill.eval.evaluate import run_eval

    def go() -> None:
        if watch is not None:
            _watch(watch, device)
            return
        if config is None:
            raise ConfigError("eval: give the run config (or --watch RUN)")
        run = _open(config, set_, run_dir)
        if reference_hf is not None:
            from tokenmill.export.hf_reference import check_against_hf, comparison_lines

            rows = check_against_hf(run, reference_hf, checkpoint, limit=limit)
            typer.echo("\n".join(comparison_lines(rows)))
            if not all(r["agree"] for r in rows):
                _say("differ", "red", "tokenmill and the HF reference disagree (items above)")
                raise typer.Exit(1)
        elif checkpoint is None:
            from tokenmill.pipeline import run_stage

            run_stage(run, "eval")
            _print_eval(run)
        else:
            _print_eval(run, run_eval(run, checkpoint)["step"])

    _guard(go)


def _watch(run_path: Path, device: str) -> None:
    """`eval --watch RUN`: the run's own config.yaml says what to score (config and --set are not read)."""
    from tokenmill.eval.watch import Watcher, watch_device

    cfg_file = run_path / "config.yaml"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{cfg_file}: not a run directory (no config.yaml)")
    run = RunDir(config=load_config(cfg_file), path=run_path)
    watcher = Watcher(run, watch_device(device), lambda line: _say("watch", "cyan", line))
    every = f"steps that are multiples of {watcher.period} and the last" if watcher.period else "the last step"
    _progress(f"watching {run_path / 'checkpoints'} on {watcher.device}: scoring checkpoints at {every}")
    done = watcher.run_until_done()
    steps = ", ".join(map(str, done["scored"])) or "none"
    skipped = f"; {len(done['skipped'])} skipped (removed before they were scored)" if done["skipped"] else ""
    _say("✓ watch", "green", f"training ended at step {done['final_step']}; checkpoints scored: {steps}{skipped}", sep=" ")


@app.command()
def report(
    config: Path = ConfigArg,
    set_: Optional[list[str]] = SetOpt,
    run_dir: Optional[Path] = RunDirOpt,
    serve: bool = typer.Option(
        False, "--serve", help="Serve the report on http://HOST:PORT/ and reload it as the run writes (Ctrl-C stops)."
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Anything but a loopback address exposes the report to the network (a warning is printed)."
    ),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port to serve on; 0 picks a free one."),
    tensorboard: bool = typer.Option(
        False,
        "--tensorboard",
        help="Write the events as TensorBoard scalars to <run>/tensorboard even when report.tensorboard is off (live with --serve).",
    ),
) -> None:
    """Build the self-contained report.html: data (funnel, removals, duplicates, distributions,
    effective tokens, tokenizer, planned vs delivered), run timeline with event markers, model
    evaluation (slices, probes, tasks, contamination, memorization, canaries, samples), scaling.

    With --serve, serve it for a run that is still training and refresh as events arrive."""
    from tokenmill.pipeline import run_stage

    if serve:
        from tokenmill.report.serve import serve_report

        _guard(lambda: serve_report(_open(config, set_, run_dir), host=host, port=port, tensorboard=tensorboard))
        return

    overrides = [*(set_ or []), *(["report.tensorboard=on"] if tensorboard else [])]

    def go() -> Path:
        r = _open(config, overrides, run_dir)
        summary = run_stage(r, "report")
        if summary.get("warning"):  # lines of events.jsonl the report left out
            console.print(f"warning: {summary['warning']}", style="yellow")
        if summary.get("tensorboard"):
            console.print(f"TensorBoard scalars: {summary['tensorboard']} (tensorboard --logdir {summary['tensorboard']})")
        return r.sub("report.html").resolve()

    typer.echo(str(_guard(go)))


@app.command()
def replay(
    run_path: Path = typer.Argument(..., metavar="RUN", help="Run directory (holds config.yaml)."),
    step: int = typer.Option(..., "--step", help="Optimizer step whose global batch to replay."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    no_loss: bool = typer.Option(False, "--no-loss", help="Only list the documents."),
) -> None:
    """List the documents in the global batch of step N (curated id, source, url, bucket, token span)
    and recompute that batch's loss from the checkpoint before N (docs/training.md, "Replay a step").
    """
    import json as _json

    from rich.table import Table

    def go() -> None:
        from tokenmill.train.replay import batch_documents, replay_loss

        cfg_file = run_path / "config.yaml"
        if not cfg_file.exists():
            raise FileNotFoundError(f"{cfg_file}: not a run directory")
        r = RunDir(config=load_config(cfg_file), path=run_path)
        docs = batch_documents(r, step)
        loss = None if no_loss else replay_loss(r, step)
        if as_json:
            typer.echo(_json.dumps({"step": step, "documents": docs, "loss": loss}, indent=1))
            return
        table = Table(title=f"global batch of step {step}: {len(docs)} document spans")
        for col in ("micro", "row", "bucket", "doc_id", "source", "url", "tokens"):
            table.add_column(col)
        for d in docs:  # the whole id, as the curated row and the rejected log have it (a user's own id too)
            table.add_row(
                str(d["micro"]),
                str(d["row"]),
                d["bucket"],
                d["doc_id"],
                str(d["source"]),
                str(d["url"]),
                f"{d['token_start']}:{d['token_end']}",
            )
        print_table(table, out)
        if loss is not None:
            console.print(
                f"loss recomputed from {loss['from_checkpoint'] or 'the initial weights'} "
                f"(+{loss['rolled_forward_steps']} steps): {loss['loss']:.6f}; logged: {loss['logged_loss']}; "
                f"identical: {loss['matches_log']}"
            )

    _guard(go)


@app.command()
def trace(
    run_path: Path = typer.Argument(..., metavar="RUN", help="Run directory (holds config.yaml)."),
    text: Optional[str] = typer.Option(None, "--text", help="One model output to trace."),
    file: Optional[Path] = typer.Option(None, "--file", help="Outputs: one per line, or JSONL with a 'text' field."),
    top: int = typer.Option(5, "--top", help="Training documents listed per output."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """The training documents nearest each output: id, bucket, source, exact token n-gram overlap,
    embedding similarity and the steps that trained on them (index cached in <run>/trace/)."""

    def go() -> None:
        from tokenmill.eval.trace import OutputFile, TraceError, max_output_bytes, trace_outputs, trace_stream

        if (text is None) == (file is None):
            raise TraceError("give the output to trace with --text or --file (one of them)")
        cfg_file = run_path / "config.yaml"
        if not cfg_file.is_file():
            raise TraceError(f"{cfg_file}: not a run directory (no config.yaml)")
        r = RunDir(config=load_config(cfg_file), path=run_path)
        outputs = OutputFile(file, max_output_bytes(r)) if file is not None else None  # streamed, each output capped
        results = trace_stream(r, outputs, top) if outputs is not None else iter(trace_outputs(r, [text or ""], top))
        if as_json:  # a JSON list written one output at a time: none is held after it is printed
            sep = "["
            for res in results:
                typer.echo(sep + json.dumps(res, indent=1), nl=False)
                sep = ",\n"
            typer.echo("[]" if sep == "[" else "]")
        else:
            _print_traces(results)
        if outputs is not None and outputs.cut:
            cap = f"{outputs.max_bytes:,} bytes"
            _say(
                "note",
                "yellow",
                f"{outputs.cut} output(s) longer than {cap} (4 contexts of train.seq_len) were traced on their first {cap}",
            )

    _guard(go)


def _print_traces(results: Iterable[dict[str, Any]]) -> None:
    from rich.table import Table

    for i, res in enumerate(results, 1):
        table = Table(title=f"output {i}: {res['ngrams']} token {res['n']}-grams")
        for col in ("rank", "doc_id", "bucket", "source", "n-gram overlap", "similarity", "steps"):
            table.add_column(col)
        for k, d in enumerate(res["documents"], 1):
            steps = ", ".join(map(str, d["steps"][:10])) + (f" … ({d['steps_count']})" if d["steps_count"] > 10 else "")
            table.add_row(
                str(k),
                d["doc_id"],
                d["bucket"],
                str(d["source"] or d["url"] or "—"),
                f"{d['ngram_overlap']}/{res['ngrams']}",
                "—" if d["similarity"] is None else f"{d['similarity']:.3f}",
                steps or "never sampled",
            )
        print_table(table, out)


@app.command("stop-signals")
def stop_signals_(
    run_path: Path = typer.Argument(..., metavar="RUN", help="Run directory (holds config.yaml)."),
    law: Optional[Path] = typer.Option(
        None,
        "--law",
        help="A `tokenmill scaling fit` fit.json to compare "
        "with (default: report.scaling_law, else the published Chinchilla fit).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Should this run keep training (docs/operations.md, "When to stop")? The held-out loss slope per decade of tokens
    against the scaling law's, the gap to the law, the held-out − train gap, tokens per parameter
    against the compute-optimal ratio, epochs per bucket, and the verdict with the numbers behind it."""
    import json as _json

    from rich.table import Table

    from tokenmill.report.stopping import TOO_FEW, resolve_law, stop_signals
    from tokenmill.report.stopping_section import BUCKET_HEADER, SIGNAL_HEADER, bucket_rows, signals_rows

    def go() -> Any:
        cfg_file = run_path / "config.yaml"
        if not cfg_file.exists():
            raise FileNotFoundError(f"{cfg_file}: not a run directory")
        r = RunDir(config=load_config(cfg_file), path=run_path)
        return stop_signals(r, resolve_law(r, law))

    s = _guard(go)
    if as_json:
        typer.echo(_json.dumps(s.to_dict(), indent=1))
        return
    if s.verdict != TOO_FEW:
        for title, header, rows in (
            ("stopping signals", SIGNAL_HEADER, signals_rows(s)),
            ("per bucket", BUCKET_HEADER, bucket_rows(s)),
        ):
            t = Table(title=title)
            for col in header:
                t.add_column(col)
            for row in rows:
                t.add_row(*row)
            out.print(t)
    out.print(f"verdict: {s.verdict}")
    for line in s.reasons + [f"note: {n}" for n in s.notes]:
        out.print(f"  {line}")


@app.command()
def run(
    config: Path = ConfigArg,
    set_: Optional[list[str]] = SetOpt,
    run_dir: Optional[Path] = RunDirOpt,
    force: Optional[list[str]] = typer.Option(
        None,
        "--force",
        help=f"Rerun this stage even if unchanged ({', '.join(STAGES)}); `--force train` retrains from step 0, "
        "moving checkpoints/ and eval/ aside to checkpoints.stale-<time>-forced/ (never deleted).",
    ),
) -> None:
    """Run every stage in order, skipping stages whose config and inputs are unchanged since they finished.

    Every stage's config checks run before the first stage starts, so a typo (a mixture bucket,
    an init_from path, an eval task file) is one line and changes nothing. Training continues
    from its last checkpoint when it was interrupted; when the train config or its data changed,
    the old checkpoints and their evaluations are moved aside to
    <run>/checkpoints.stale-<time>-config-changed/ (or -data-changed/), never deleted, and
    training starts over. The report is rebuilt.
    """
    from tokenmill.pipeline import run_pipeline

    def go() -> Path:
        for stage in force or []:
            if stage not in STAGES:
                near = close_keys(stage, STAGES)
                meant = f" (did you mean {' or '.join(near)}?)" if near else ""
                raise ConfigError(f"--force {stage}: unknown stage{meant}; stages are {', '.join(STAGES)}")
        r = _open(config, set_, run_dir)
        run_pipeline(r, force=frozenset(force or []))
        _print_eval(r)
        return r.sub("report.html").resolve()

    typer.echo(str(_guard(go, checkpoint_hint=RERUN_CONTINUES)))


@app.command()
def demo(set_: Optional[list[str]] = SetOpt, run_dir: Optional[Path] = RunDirOpt) -> None:
    """The whole pipeline on a corpus embedded in every Python install (no data, no download).

    Buckets: the standard library's source (code), pydoc's HTML pages for its modules (web) and
    the language reference topics (reference). Prints the path of runs/demo/report.html.
    Ctrl-C during training and running it again continues from the last checkpoint.
    """
    from tokenmill.pipeline import run_pipeline

    def go() -> Path:
        r = _open(demo_config_path(), set_, run_dir)
        run_pipeline(r)
        _print_eval(r)
        return r.sub("report.html").resolve()

    path = _guard(go, checkpoint_hint=RERUN_CONTINUES)
    console.print("report:", style="bold green")
    typer.echo(str(path))


checkpoint_app = typer.Typer(help="Checkpoint tools: average the last n checkpoints.", no_args_is_help=True)
app.add_typer(checkpoint_app, name="checkpoint")


@checkpoint_app.command("average")
def checkpoint_average(
    config: Path = ConfigArg,
    last: int = typer.Option(..., "--last", "-n", min=1, help="Average the newest N valid checkpoints."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Output directory (default: <run>/checkpoints/avg_last<N>)."),
    set_: Optional[list[str]] = SetOpt,
    run_dir: Optional[Path] = RunDirOpt,
) -> None:
    """Average the model weights of the run's last N checkpoints (float64 mean, original dtype).

    Writes a model-only checkpoint (model.safetensors, state.json with `averaged_from`,
    SHA256SUMS) that `tokenmill eval --checkpoint DIR` accepts; training never resumes from it.
    """
    from tokenmill.train.averaging import average_last

    def go() -> Path:
        return average_last(_open(config, set_, run_dir), last, out)

    typer.echo(str(_guard(go)))


export_app = typer.Typer(help="Export a checkpoint to other tools (hf: transformers LlamaForCausalLM).", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("hf")
def export_hf_cmd(
    checkpoint: Path = typer.Argument(..., help="A step_N checkpoint, or a run's checkpoints/ directory (newest valid)."),
    out: Path = typer.Argument(..., help="Output directory (config.json, model.safetensors, tokenizer files)."),
    tokenizer: Optional[Path] = typer.Option(
        None, "--tokenizer", help="tokenizer.json (default: <run>/tokenizer/tokenizer.json)."
    ),
    force: bool = typer.Option(
        False,
        "--overwrite",
        "--force",
        help="Replace OUT when it holds an earlier tokenmill "
        "export (only the files tokenmill wrote; a directory of other files is refused).",
    ),
) -> None:
    """Write a Hugging Face LlamaForCausalLM + PreTrainedTokenizerFast directory, loadable with
    `from_pretrained(OUT)` and `lm_eval --model hf --model_args pretrained=OUT`."""
    from tokenmill.export.hf import EXPORT_FILES, export_hf
    from tokenmill.export.hf_reference import export_step

    def go() -> tuple[Path, int | None]:
        written = export_hf(checkpoint, out, tokenizer, overwrite=force)
        return written, export_step(written)

    written, step = _guard(go)
    _say("✓ export hf", "green", f"step {step} of {checkpoint} → {written}", sep=" ")
    for name in EXPORT_FILES:
        f = written / name
        console.print(f"  {name}  {_size(f.stat().st_size)}")
    typer.echo(str(written))  # stdout: the folder alone, for a script


def _size(n: int) -> str:
    """Bytes as a person reads them: 680 B, 12.3 kB, 1.2 MB, 3.4 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


@app.command("verify-resume")
def verify_resume_cmd(
    config: Path = ConfigArg,
    kills: int = typer.Option(2, "--kills", "-k", min=1, help="SIGKILLs at random steps in the killed run."),
    steps: Optional[int] = typer.Option(
        None, "--steps", help="Compare only the first S steps (train.max_steps=S for both runs)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed that draws the kill steps."),
    keep_scratch: bool = typer.Option(False, "--keep-scratch", help="Keep <run>/verify_resume/ even when identical."),
    set_: Optional[list[str]] = SetOpt,
    run_dir: Optional[Path] = RunDirOpt,
) -> None:
    """Prove exact resume on this config: train once uninterrupted and once with K real SIGKILLs
    (each followed by --resume), then compare the loss of every step bitwise.

    Runs curate, tokenizer and tokenize first when they are not done. Writes
    <run>/verify_resume.json; exits 1 unless every step's loss is identical.
    """
    from tokenmill.verify_resume import render, verify_resume

    def go() -> dict[str, Any]:
        return verify_resume(
            _open(config, set_, run_dir),
            kills=kills,
            steps=steps,
            seed=seed,
            keep_scratch=keep_scratch,
            say=lambda m: console.print(m),
        )

    result = _guard(go)
    console.print(render(result))
    for m in result["mismatches"][:5]:
        _say(f"step {m['step']}", "red", f"resumed {m['resumed']!r}, uninterrupted {m['reference']!r}")
    if result["missing_steps"]:
        _say("steps never run in the killed run", "red", result["missing_steps"][:20])
    colour = {"identical": "green", "mismatch": "red"}.get(result["verdict"], "yellow")
    console.print(f"verdict: {result['verdict']}", style=f"bold {colour}")
    if result["verdict"] != "identical":
        raise typer.Exit(1)


@app.command()
def calibrate(
    seconds: float = typer.Option(2.0, "--seconds", help="Timing budget per dtype, split over the matrix sizes."),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads (default: torch's; match train.threads)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:N."),
) -> None:
    """Measure this machine's matmul peak FLOP/s (fp32, and bf16 where native) for MFU.

    Times square matmuls of a few sizes (best of repeats) at the given thread count and writes
    the peaks to $TOKENMILL_CACHE/calibration.json (default ~/.cache/tokenmill/), keyed by
    device name, threads and dtype; the trainer's MFU then uses the entry that matches its run.
    """
    from rich.table import Table

    from tokenmill.scaling.calibrate import calibrate as run_calibration, write_calibration

    def go() -> tuple[list[dict[str, Any]], Path]:
        entries = run_calibration(device, threads=threads, seconds=seconds)
        return entries, write_calibration(entries)

    entries, path = _guard(go)
    table = Table(title=f"matmul peak: {entries[0]['device']}, {entries[0]['threads']} threads, torch {entries[0]['torch']}")
    table.add_column("dtype")
    for n in entries[0]["by_size"]:
        table.add_column(f"n={n} GFLOP/s", justify="right")
    table.add_column("peak GFLOP/s", justify="right")
    for e in entries:
        table.add_row(e["dtype"], *(f"{v / 1e9:,.1f}" for v in e["by_size"].values()), f"{e['peak_flops'] / 1e9:,.1f}")
    out.print(table)
    typer.echo(str(path))


@app.command()
def plan(
    params: Optional[float] = typer.Option(
        None, "--params", help="Parameters N (e.g. 7e9); the shape is derived with d_model = 128 × layers."
    ),
    tokens: Optional[float] = typer.Option(None, "--tokens", help="Training tokens D (default: the config's budget, else 20·N)."),
    flops: Optional[float] = typer.Option(
        None, "--flops", help="Compute budget C alone: size N = √(C/120), D = 20·N (Chinchilla)."
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="Run config: its model, seq_len, micro-batch, global batch and token budget."
    ),
    arch: Optional[str] = typer.Option(None, "--arch", help="A known shape: llama2-7b, llama2-13b, llama2-70b."),
    devices: Optional[int] = typer.Option(None, "--devices", "-n", min=1, help="Devices (default: the config's; else 8)."),
    device: Optional[str] = typer.Option(None, "--device", help="h100, h200, a100-40gb/80gb, cpu, this (default: config's)."),
    mfu: Optional[float] = typer.Option(None, "--mfu", help="MFU (default: measured on a CPU with --config, else 0.38)."),
    price: Optional[float] = typer.Option(None, "--price", help="USD per device-hour (default: the preset's rough cloud price)."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Tokens per sequence (default: the config's, else 4096)."),
    micro_batch: Optional[int] = typer.Option(
        None, "--micro-batch", help="Sequences per micro-batch (default: the config's, else 1)."
    ),
    global_batch: Optional[int] = typer.Option(
        None, "--global-batch-tokens", help="Tokens per optimizer step (default: the config's, else 4Mi)."
    ),
    tp: Optional[int] = typer.Option(None, "--tp", help="Fix tensor parallelism (default: searched)."),
    pp: Optional[int] = typer.Option(None, "--pp", help="Fix pipeline stages (default: searched)."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Fix data parallelism (default: searched)."),
    zero: Optional[int] = typer.Option(None, "--zero", min=0, max=3, help="Fix the ZeRO stage (3 = FSDP; default: searched)."),
    checkpointing: Optional[bool] = typer.Option(
        None, "--checkpointing/--no-checkpointing", help="Fix activation checkpointing (default: searched)."
    ),
    sequence_parallel: bool = typer.Option(
        True,
        "--sequence-parallel/--no-sequence-parallel",
        help="Shard the norm/dropout activations over TP ranks too (Korthikanti et al.).",
    ),
    no_master: bool = typer.Option(
        False, "--no-master-weights", help="No fp32 master copy (Adam 8 B/param, as bf16-only recipes count)."
    ),
    reserve_gb: float = typer.Option(5.0, "--reserve-gb", min=0, help="GB per device kept for NCCL buffers and scratch."),
    inference_tokens: float = typer.Option(
        0.0, "--inference-tokens", help="Tokens the model will serve: adds the inference-aware size (Sardana et al.)."
    ),
    noise_from: Optional[Path] = typer.Option(
        None,
        "--noise-from",
        help="A run directory whose measured gradient noise scale judges the batch (default: the --config run's own, when it has one).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the same figures as JSON."),
    set_: Optional[list[str]] = SetOpt,
) -> None:
    """Plan a pretraining run: FLOPs (6ND and exact), steps, wall-clock, cost, compute-optimal and
    inference-aware sizes, and a parallel layout with its memory per device, every assumption printed.

    With --config: the config's own device, batch and steps; on a CPU, time from its timed steps.

    Examples: `tokenmill plan --config RUN.yaml`, `tokenmill plan --flops 1e22`, `tokenmill plan --config
    RUN.yaml --devices 64 --device h100`, `tokenmill plan --params 7e9 --tokens 1e12 --devices 512 --mfu 0.38`.
    """
    from tokenmill.scaling.plan import plan_for, resolve_inputs

    def go() -> Any:
        run_cfg = load_config(config, list(set_ or [])) if config is not None else None
        spec, n, notes, measured = _plan_target(run_cfg, device, devices, mfu, price)
        inputs = resolve_inputs(params, tokens, flops, arch, run_cfg, n, seq_len, micro_batch, global_batch)
        inputs.notes[:0] = notes
        return plan_for(
            inputs,
            n,
            spec,
            measured.mfu if measured is not None else (mfu or 0.38),
            measured=measured,
            layout={"tp": tp, "pp": pp, "dp": dp, "zero": zero, "checkpointing": checkpointing},
            inference_tokens=inference_tokens,
            master_weights=not no_master,
            reserve_bytes=reserve_gb * 1e9,
            sequence_parallel=sequence_parallel,
            **_plan_noise(noise_from, run_cfg),
        )

    _print_plan(_guard(go), as_json)


def _plan_target(
    run_cfg: Optional[RunConfig], device: Optional[str], devices: Optional[int], mfu: Optional[float], price: Optional[float]
) -> tuple[Any, int, list[str], Any]:
    """(device spec, device count, notes, the CPU measurement or None) of `plan`: the config's
    device unless --device; on one CPU with --config and no --mfu, its steps timed (announced on
    stderr first: it trains for a few seconds)."""
    from tokenmill.scaling.devices import cpu_spec, get_device
    from tokenmill.scaling.plan import config_target
    from tokenmill.scaling.plan_measure import measure_cpu_plan

    name, n, notes = config_target(run_cfg, device, devices)
    if run_cfg is None or name != "cpu" or n != 1 or mfu is not None:
        return get_device(name, price), n, notes, None
    typer.echo("plan: timing a few training steps of this config on this CPU ...", err=True)
    measured = measure_cpu_plan(run_cfg)
    return cpu_spec(measured.peak_flops, f"this CPU: {measured.peak_origin}"), n, notes, measured


def _plan_noise(noise_from: Optional[Path], run_cfg: Optional[RunConfig]) -> dict[str, Any]:
    """make_plan's `noise` (the measured gradient noise scale that judges the batch) and
    `noise_source` (the run it came from): --noise-from's, else the --config run's own (None where it has none)."""
    from tokenmill.scaling.critical_batch import run_noise

    noise_dir = noise_from or (Path(run_cfg.root) / run_cfg.name if run_cfg is not None else None)
    noise = run_noise(noise_dir) if noise_dir is not None else None
    if noise_from is not None and noise is None:
        raise UserError(
            f"--noise-from {noise_from}: no measured noise scale in its events.jsonl (train with "
            f"train.grad_accum >= 2 and train.noise_scale_every > 0)"
        )
    return {"noise": noise, "noise_source": str(noise_dir)}


def _print_plan(result: Any, as_json: bool) -> None:
    """The plan as tables (or JSON); exit 1 when no layout fits, after printing everything else."""
    from tokenmill.scaling.plan_report import render_plan

    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=1))
    else:
        for part in render_plan(result):
            Console(width=120, soft_wrap=True).print(part)
    if result.layout is None:
        raise typer.Exit(1)  # planned everything but the layout: a script must not take it for a full plan


mixture_app = typer.Typer(
    help="Mixture weights by experiment: DoReMi and a data-mixing-law regression on proxy models.", no_args_is_help=True
)
app.add_typer(mixture_app, name="mixture")


@mixture_app.command("optimize")
def mixture_optimize(
    config: Path = typer.Argument(
        ..., help="Mixture-optimization config (YAML): base run config, methods, proxy size, comparison."
    ),
) -> None:
    """Find bucket weights with small proxy models trained on your token store (DoReMi; a data
    mixing law fitted over sampled mixtures), optionally measure them against uniform and
    token-proportional weights at the base size, and write <root>/<name>/mixture/optimized.yaml and
    mixture.html. Running it again continues: finished proxy and comparison runs are reused."""
    from rich.table import Table

    from tokenmill.decisions.optimize import run_optimize
    from tokenmill.report.mixture_page import write_mixture_page

    result = _guard(lambda: run_optimize(config, progress=_progress), resume_hint=RERUN_REUSES)
    page = write_mixture_page(Path(result["dir"]), result)
    buckets = result["buckets"]
    table = Table(title="bucket weights")
    for col in ("method", *buckets, "mean held-out bpb (seeds)"):
        table.add_column(col, justify="left" if col == "method" else "right")
    compare = result.get("compare", {})
    total = sum(result["available_tokens"].values())
    rows = {
        "uniform": {b: 1 / len(buckets) for b in buckets},
        "proportional": {b: result["available_tokens"][b] / total for b in buckets},
    }
    rows.update({m: result[m]["weights"] for m in ("doremi", "regmix") if m in result})
    for name, w in rows.items():
        c = compare.get(name)
        measured = (
            ""
            if c is None
            else f"{c['mean_bpb']:.4f}" + (f" ± {c['std_bpb']:.4f}" if c["std_bpb"] else "") + f" ({len(c['runs'])})"
        )
        table.add_row(name + (" ✓" if name == result["chosen"] else ""), *(f"{w[b]:.3f}" for b in buckets), measured)
    out.print(table)
    typer.echo(f"weights of {result['chosen']}: {result['optimized']}; page: {page}")


@app.command("source-value")
def source_value(
    config: Path = typer.Argument(..., help="Source-value config (YAML): base run config, seeds, shares."),
    source: Optional[str] = typer.Option(
        None,
        "--source",
        help="The new source: a bucket of the token store, or a file or directory of new data to curate into a new bucket (overrides the config's).",
    ),
) -> None:
    """Is a new source worth adding? Paired runs with and without it at equal tokens, and an
    annealing test (the LR decayed to 0 on a mix holding it), per seed; prints Δ bits-per-byte per
    held-out slice, the noise band over seeds and a verdict (helps / hurts / within noise), and
    writes source_value.json and source_value.html. Running it again continues."""
    from rich.table import Table

    from tokenmill.decisions.source_value import run_source_value
    from tokenmill.report.mixture_page import write_source_value_page

    result = _guard(lambda: run_source_value(config, source, progress=_progress), resume_hint=RERUN_REUSES)
    page = write_source_value_page(Path(result["dir"]), result)
    for name, t in result["tests"].items():
        table = Table(
            title=f"{name}: {t['verdict']} (Δ other slices {t['delta_other_slices']:+.4f}, band ±{t['noise_band']:.4f})"
        )
        table.add_column("slice")
        table.add_column("Δ bpb (with − without)", justify="right")
        for s, d in t["delta_bpb"].items():
            table.add_row(s + (" (the source)" if s == result["source"] else ""), f"{d:+.4f}")
        out.print(table)
    typer.echo(f"page: {page}")


@app.command()
def ablate(
    config: Path = typer.Argument(
        ..., help="Ablation config (YAML): base run config, arms (curation variants), sizes, seeds, evaluation set."
    ),
) -> None:
    """What each curation step buys in model quality: every arm (a variation of the curate config:
    a step off, a threshold moved, a classifier cut) is curated from the same raw sources,
    tokenized with one shared tokenizer and trained at equal tokens at every size and seed, then
    scored on one evaluation set no arm's filtering touched. Prints Δ bits-per-byte against the
    reference arm with paired confidence intervals, the steps ranked by what they buy, and the
    data-efficiency multiplier; writes ablate.json and ablate.html. Running it again continues."""
    from tokenmill.decisions.ablate import run_ablate
    from tokenmill.report.ablate_page import terminal_tables, write_ablate_page

    result = _guard(lambda: run_ablate(config, progress=_progress), resume_hint=RERUN_REUSES)
    page = write_ablate_page(Path(result["dir"]), result)
    for table in terminal_tables(result):
        out.print(table)
    typer.echo(f"results: {Path(result['dir']) / 'ablate.json'}; page: {page}")


@app.command()
def synth(
    config: Path = typer.Argument(..., help="Synthesis config (YAML): the run to sample, sampling, prompts, figures."),
    set_: Optional[list[str]] = typer.Option(
        None, "--set", "-s", help="Override a key of the synthesis config: key=value, e.g. docs=50 (repeatable)."
    ),
) -> None:
    """Sample documents from a run's checkpoint (temperature, top-p, top-k; document i seeded by
    (seed, i)) and write <run>/synthetic/<name>/samples.jsonl, every record carrying its lineage
    (checkpoint and its SHA-256, sampling, seed, prompt, generation); print the samples' diversity
    and tail figures beside same-length windows of real text, and the model's held-out
    bits-per-byte on the real buckets. Curate the file as a source with `synthetic: true`;
    `mixture.synthetic` (max_share, max_generation) then limits it before training starts."""
    from rich.table import Table

    from tokenmill.synth.run import run_synth

    result = _guard(lambda: run_synth(config, list(set_ or [])))
    m = result["metrics"]
    table = Table(
        title=f"generation {result['lineage']['generation']} samples vs real text "
        f"({m['samples']['tokens']:,} tokens each; tail = rarest ids holding {m['tail']:.0%} of real tokens)"
    )
    for col in ("figure", "samples", "real", "samples / real"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for key, v in m["samples"].items():
        if key not in ("docs", "tokens"):
            real = m.get("real", {}).get(key)
            ratio = m.get("ratio", {}).get(key)
            table.add_row(key, f"{v:.4g}", "" if real is None else f"{real:.4g}", "" if ratio is None else f"{ratio:.3f}")
    for b, bpb in m.get("real_bpb", {}).items():
        table.add_row(f"held-out bpb, {b}", f"{bpb:.4f}", "", "")
    out.print(table)
    typer.echo(
        f"{result['docs']} documents ({result['empty']} empty left out, {result['new_tokens']:,} new tokens, "
        f"{result['seconds']:.1f} s): {result['samples']}"
    )


scaling_app = typer.Typer(help="Scaling laws: IsoFLOP sweeps with the real trainer, and the fitted laws.", no_args_is_help=True)
app.add_typer(scaling_app, name="scaling")


@scaling_app.command("sweep")
def scaling_sweep(
    sweep: Path = typer.Argument(..., help="Sweep config (YAML): base run config, budgets, shapes, held-out runs."),
    only: Optional[list[str]] = typer.Option(
        None, "--only", help="Train only this run (repeatable); finished runs are still collected."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the planned runs (steps, tokens, FLOPs) and train nothing."),
    no_holdout: bool = typer.Option(
        False,
        "--no-holdout",
        help="Train the sweep (and repeat) runs only: fit and "
        "`scaling fit --register` the held-out predictions before their runs exist.",
    ),
) -> None:
    """Train every run of an IsoFLOP sweep (each a normal run directory under <root>/<name>/runs/)
    and write <root>/<name>/results.json. Running it again continues: finished runs are skipped and
    an interrupted run resumes from its last checkpoint."""
    from rich.table import Table

    from tokenmill.scaling.sweep import run_sweep

    result = _guard(lambda: run_sweep(sweep, only=only, dry_run=dry_run, holdout=not no_holdout), resume_hint=RERUN_REUSES)
    if dry_run:
        table = Table(title=f"{len(result['runs'])} runs; {result['train_tokens']:,} training tokens in the store")
        for col in ("run", "role", "N (non-emb.)", "steps", "tokens", "FLOPs", "D/N", "lr"):
            table.add_column(col, justify="left" if col in ("run", "role") else "right", no_wrap=col == "run")
        for r in result["runs"]:
            table.add_row(
                r["name"],
                r["role"],
                f"{r['params']:,}",
                f"{r['steps']:,}",
                f"{r['tokens']:,}",
                f"{r['flops']:.2e}",
                f"{r['tokens'] / r['params']:.1f}",
                f"{r['lr']:.2e}",
            )
        out.print(table)
    for s in result["skipped"]:
        console.print(f"left out {s['name']}: {s['why']}", style="dim")
    if not dry_run:
        for f in result["failed"]:
            _say(f"diverged {f['name']}", "yellow", f["why"])
        typer.echo(f"{result['finished']}/{result['planned']} runs finished: {result['sweep']}/results.json")


@scaling_app.command("lr-transfer")
def scaling_lr_transfer(
    sweep: Path = typer.Argument(..., help="Learning-rate transfer config (YAML): base, widths, lrs, tokens."),
) -> None:
    """Train one learning-rate grid at several widths under μP and SP, and say how far the best
    learning rate moves as the model widens (μTransfer: it should not, under μP). Writes
    <root>/<name>/results.json; running it again continues where it stopped."""
    from rich.table import Table

    from tokenmill.scaling.lr_transfer import run_lr_transfer

    result = _guard(lambda: run_lr_transfer(sweep), resume_hint=RERUN_REUSES)
    table = Table(title="best learning rate by width")
    for col in ("parameterization", "width", "best lr (parabola)", "best grid lr", "loss", "shift (octaves)"):
        table.add_column(col, justify="right")
    for param, a in result["analysis"].items():
        for width, o in a["optima"].items():
            shift = "" if a["shift_octaves"] is None else f"{a['shift_octaves']:+.2f}"
            if o["lr"] is None:
                table.add_row(param, width, "every run diverged", "", "", shift)
                continue
            table.add_row(
                param,
                width,
                f"{o['lr']:.2e}" + (" (edge)" if o["edge"] else ""),
                f"{o['grid_lr']:.2e}",
                f"{o['loss']:.4f}",
                shift,
            )
    out.print(table)


@scaling_app.command("fit")
def scaling_fit(
    sweep_dir: Path = typer.Argument(..., help="A sweep directory (holds results.json), e.g. runs/mixed-sweep."),
    bootstrap: int = typer.Option(200, "--bootstrap", min=0, help="Bootstrap resamples for the intervals (0: none)."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole analysis as JSON."),
    register: bool = typer.Option(
        False,
        "--register",
        help="Write the predictions of held-out runs not finished yet to "
        "<sweep>/predictions.json (pre-registration; a registered prediction is never overwritten).",
    ),
) -> None:
    """Fit L(N, D) = E + A/N^α + B/D^β (Chinchilla approach 3, Huber on log loss), the IsoFLOP
    minima and Kaplan-style power laws to the sweep runs, with bootstrap intervals, and predict each
    held-out run. Writes <sweep>/fit.json and <sweep>/scaling.html."""
    import json

    from tokenmill.report.scaling import render_scaling
    from tokenmill.runs import atomic_write_text
    from tokenmill.scaling.analysis import analyze
    from tokenmill.scaling.fit import FitConfig
    from tokenmill.scaling.preregister import predict_pending, register as register_predictions, registered_checks
    from tokenmill.scaling.results import load_results

    def go() -> Any:
        a = analyze(load_results(sweep_dir / "results.json"), FitConfig(bootstrap_samples=bootstrap))
        new = register_predictions(sweep_dir, a) if register else []
        extra = {"pending": predict_pending(sweep_dir, a), "registered": registered_checks(sweep_dir, a)}
        atomic_write_text(sweep_dir / "fit.json", json.dumps({**a.to_dict(), **extra}, indent=1))
        atomic_write_text(sweep_dir / "scaling.html", render_scaling(a, f"scaling: {sweep_dir.name}", **extra))
        return a, new, extra

    a, new, extra = _guard(go)
    if as_json:
        typer.echo(json.dumps({**a.to_dict(), **extra}, indent=1))
        return
    f = a.chinchilla.fit
    console.print(
        f"L(N, D) = {f.E:.4g} + {f.A:.4g}/N^{f.alpha:.4g} + {f.B:.4g}/D^{f.beta:.4g}  "
        f"(a = {f.a:.3f}, b = {f.b:.3f}; {f.runs} runs)"
    )
    for h in a.holdout:
        iv = f" [{h.interval.low:.4f}, {h.interval.high:.4f}]" if h.interval else ""
        console.print(f"held-out {h.name}: predicted {h.predicted:.4f}{iv}, actual {h.actual:.4f}, error {h.relative_error:+.2%}")
    for p in extra["pending"]:
        iv = f" [{p['interval'][0]:.4f}, {p['interval'][1]:.4f}]" if p["interval"] else ""
        console.print(
            f"pending held-out {p['name']}: predicted {p['predicted']:.4f}{iv}"
            + (" (registered now)" if any(x["name"] == p["name"] for x in new) else "")
        )
    for p in extra["registered"]:
        if p["actual"] is not None:
            console.print(
                f"registered {p['registered_at']} for {p['name']}: predicted {p['predicted']:.4f}, "
                f"actual {p['actual']:.4f}, error {p['relative_error']:+.2%}"
            )
    if a.backtest is not None:
        b = a.backtest
        console.print(
            f"backtest: the law fitted without budget {b.budget:.3g} predicts its {len(b.names)} runs with "
            f"errors {', '.join(f'{e:+.2%}' for e in b.errors)} (max {b.max_abs_error:.2%})"
        )
    for n in a.noise:
        console.print(
            f"run-to-run noise at N {n.params:,}, D {n.tokens:,}: {len(n.losses)} seeds, std {n.std:.4f} "
            f"({n.relative_std:.2%} of the loss), range {n.relative_range:.2%}"
        )
    for n in a.notes:
        console.print(n, style="dim")
    typer.echo(str(sweep_dir / "scaling.html"))


def main() -> None:  # pragma: no cover - entry point
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    main()
