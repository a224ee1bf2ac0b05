"""torchrun for `tokenmill train --nproc K`, with output a person can read when ranks fail.

`python -m tokenmill.train.launch_agent ARGS` takes torchrun's own arguments and runs its elastic
agent (torch.distributed.run's `run`) the same way. What differs is what follows a rank's failure:
torchrun prints the ranks' exit codes as a ChildFailedError traceback and box (about 40 lines),
under which the rank's one-line tokenmill error is buried, and exits 1 whatever the ranks' codes.
Here the failed ranks and their exit codes go to `failures.json` in the launch folder
($TOKENMILL_LAUNCH_DIR, made by `tokenmill train --nproc`, which words them in one line), nothing
else is printed, and the agent exits with the first failed rank's code (1 user error, 2 config
error, 3 crash, ...: the codes `tokenmill train` documents), so the shell sees what a one-process
run would give. Any other exception (a rendezvous timeout, a bad argument) keeps torchrun's output.

In the ranks, `first_in_job` lets one rank say a line that every rank would say (the same user
error, read from the same config and run directory): the first to claim it prints it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

LAUNCH_DIR_ENV = "TOKENMILL_LAUNCH_DIR"
FAILURES_FILE = "failures.json"
MODULE = "tokenmill.train.launch_agent"  # what runs in torchrun's place (`--print-launch` still shows torchrun)

# what each exit code of `tokenmill train` means (cli.train's help), for the one line that names it
EXIT_MEANINGS = {1: "a user error", 2: "a config error", 3: "a crash", 4: "a hung rank", 75: "preempted", 130: "Ctrl-C"}


def first_in_job(line: str) -> bool:
    """True when this process should print `line`: always, except in a rank of a `tokenmill train
    --nproc` launch where another rank of this node (in this restart of the group) already printed
    the same line. The claim is a file created with O_EXCL in the launch folder, named by the
    line's hash: atomic across ranks."""
    where = os.environ.get(LAUNCH_DIR_ENV)
    if not where or "LOCAL_RANK" not in os.environ:
        return True
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # a group torchrun restarted says its lines again
    name = Path(where) / ("said-" + hashlib.sha256(f"{attempt}\0{line}".encode()).hexdigest()[:32])
    try:
        os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    except OSError:  # the folder went away: saying it twice beats not saying it
        return True
    return True


def read_failures(launch_dir: Path) -> dict[int, int]:
    """{global rank: exit code} of the ranks that failed, as the agent recorded them ({} when none
    did or the agent ended some other way)."""
    path = launch_dir / FAILURES_FILE
    try:
        data = json.loads(path.read_text())
        return {int(rank): int(code) for rank, code in data["ranks"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def failure_line(failures: dict[int, int]) -> str:
    """`rank 0 and rank 1 exited with code 1 (a user error)`; different codes are listed per rank.
    Ranks that ended on SIGTERM while another rank exited on its own were stopped by torchrun
    (it ends the group when one rank fails): they are named as such, after the cause."""
    own = {r: c for r, c in failures.items() if c >= 0}
    stopped = [r for r, c in sorted(failures.items()) if c == -signal.SIGTERM] if own else []
    by_code: dict[int, list[int]] = {}
    for rank, code in sorted(failures.items()):
        if rank not in stopped:
            by_code.setdefault(code, []).append(rank)
    parts = []
    for code, ranks in by_code.items():
        verb = "was" if len(ranks) == 1 else "were"
        if code < 0:
            parts.append(f"{_ranks(ranks)} {verb} killed by {_signal_name(-code)}")
        else:
            meaning = EXIT_MEANINGS.get(code)
            parts.append(f"{_ranks(ranks)} exited with code {code}" + (f" ({meaning})" if meaning else ""))
    if stopped:
        parts.append(f"torchrun then stopped {_ranks(stopped)}")
    return "; ".join(parts)


def _ranks(ranks: list[int]) -> str:
    return " and ".join(", ".join(f"rank {r}" for r in ranks).rsplit(", ", 1))


def shell_code(exitcode: int) -> int:
    """A rank's exit code as the shell reports it (killed by signal k: 128 + k)."""
    return 128 - exitcode if exitcode < 0 else exitcode


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _QuietFailureLines(logging.Filter):
    """Drops the agent's per-rank `failed (exitcode: 1) local_rank: 0 ... of binary`, `Sending
    process N closing signal SIGTERM` and `Received 15 death signal` lines: the failure is worded
    once by the launcher, and a stop by the ranks themselves (`SIGTERM (preemption): ...`)."""

    QUIET = ("failed (exitcode", "Sending process", "Received %s death signal")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.QUIET)


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    for name in ("torch.distributed.elastic.multiprocessing.api", "torch.distributed.elastic.agent.server.api"):
        logging.getLogger(name).addFilter(_QuietFailureLines())
    try:
        run(parse_args(argv))
    except SignalException as exc:  # Ctrl-C or SIGTERM, passed on to the ranks, which checkpoint and say so
        return 128 + int(exc.sigval)
    except ChildFailedError as exc:
        ranks = {rank: failure.exitcode for rank, failure in exc.failures.items()}
        where = os.environ.get(LAUNCH_DIR_ENV)
        if where:
            (Path(where) / FAILURES_FILE).write_text(json.dumps({"ranks": ranks}))
        else:  # run by hand: say it here, still without the traceback
            print(f"training failed: {failure_line(ranks)}", file=sys.stderr)
        _, first = exc.get_first_failure()
        return shell_code(first.exitcode) or 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
