"""Bounded work per document: an HTML nesting-depth pre-scan, and a time limit that holds even
inside native code.

Depth. resiliparse's main-content walk is worse than quadratic in nesting depth (measured here:
2,000 levels 0.06 s, 10,000 levels 0.9 s, 40,000 levels 43 s) and trafilatura finds nothing
on such pages, so a page nested deeper than `curate.limits.max_html_depth` is quarantined before
any parser sees it. `html_depth` is one regex pass plus a numpy prefix sum: linear, no parse.

Time. Two timers per document, armed around a phase's per-document steps:
  soft  ITIMER_REAL -> SIGALRM -> a Python handler raises `DocTimeout` at the next bytecode:
        bounds Python-level work, and native calls that return (the document is quarantined
        with rule `timeout` right after). Main thread only (Python delivers signals there).
  hard  ITIMER_PROF (process CPU time, kill_factor x doc_seconds) -> faulthandler's C-level
        handler writes the stack after this task's marker line, then the signal's default
        action kills the worker. It needs no GIL and no return to the interpreter: it ends a
        parse stuck in C++. The marker line (chunk, document, step) is rewritten with one
        pwrite per step, so the retried task (the executors rerun a task whose worker died;
        tasks resume from their last finished chunk) reads which document to quarantine. A
        worker that dies for another reason (out of memory, a lost node) leaves no stack
        there, so only a timeout quarantines a document. Never armed in the driver process
        (a workers=1 run): killing it would end the run instead of a task.
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
import threading
import time
from itertools import groupby
from pathlib import Path
from types import FrameType
from typing import Any, Callable

import numpy as np

from tokenmill import json_limits
from tokenmill.data.config import DocLimitsConfig
from tokenmill.data.document import Rejection, format_value
from tokenmill.runs import atomic_write_text

TIMEOUT_RULE = "timeout"
DEPTH_RULE = "nesting_depth"
MARKER_FILE = "inflight"  # per task directory: the document being processed, then a killed worker's stack
KILLED_FILE = "timeouts.json"  # per task directory: documents whose worker was killed, kept across retries
HEADER_BYTES = 256  # the marker line's fixed size; faulthandler writes after it


# --------------------------------------------------------------------------- nesting depth
# Elements that never nest: void elements, and those whose end tag is optional (a sibling of the
# same kind closes them: <p><p> are siblings). Their start and end tags are not counted, so the
# count is a lower bound of the DOM depth within a small factor: a deep list still counts its
# <ul>s, a deep table its <table>s.
_FLAT = (
    "area base br col embed hr img input link meta param source track wbr basefont bgsound frame keygen "
    "image isindex nextid spacer p li dt dd option optgroup tr td th thead tbody tfoot colgroup caption "
    "rb rt rtc rp html head body"
).split()
# SVG / MathML leaves written self-closed (<path .../>) inside inline SVG: not counted. Any other
# "<name/>" opens an element, as an HTML parser reads it.
_FOREIGN_LEAVES = (
    "path rect circle ellipse line polyline polygon use stop animate animatetransform set mpath "
    "feblend fecolormatrix fecomposite feflood fegaussianblur feoffset femergenode fefunca fefuncr "
    "fefuncg fefuncb mi mo mn ms mspace mglyph malignmark"
).split()
# Raw text (and comments) holds no tags: a '<div>' inside a script string is not an element.
_RAW = ("script", "style", "textarea", "title", "xmp", "noscript", "iframe", "noembed", "noframes")
_END = r"(?=[\s/>])"


def _alternation(words: list[str]) -> str:
    """A regex alternation grouped by first letter: a failing tag name is rejected after one
    character instead of after trying every word (2x faster on real pages)."""
    alts = []
    for first, group in groupby(sorted(set(words)), key=lambda w: w[0]):
        rests = sorted((w[1:] for w in group), key=len, reverse=True)
        alts.append(first + "(?:" + "|".join(map(re.escape, rests)) + ")")
    return "(?:" + "|".join(alts) + ")"


_RAW_RE = re.compile(r"<(?:!--.*?(?:-->|\Z)|(%s)%s[^>]*>.*?(?:</\1\s*>|\Z))" % ("|".join(_RAW), _END), re.S | re.I)
# One match per counted tag; the group is '/' for an end tag, '' for a start tag.
# The cheap name check first: the self-closing check scans the whole tag (1.6x slower first).
_TAG_RE = re.compile(
    r"<(?:(/)(?!{flat}{end})|(?!{flat}{end})(?!{leaf}{end}[^>]*/>))[A-Za-z][^>]*>".format(
        flat=_alternation(_FLAT), leaf=_alternation(_FOREIGN_LEAVES), end=_END
    ),
    re.I,
)


def html_depth(html: str, limit: int | None = None) -> int:
    """How deep the page's elements nest, counted from its tags without parsing it. With a limit,
    0 when the page has too few tags to reach it (the scan is skipped: most pages)."""
    if limit is not None and html.count("<") - html.count("</") <= limit:
        return 0
    marks = _TAG_RE.findall(_RAW_RE.sub("", html))
    if not marks:
        return 0
    closes = np.fromiter(map(len, marks), dtype=np.int32, count=len(marks))  # 1 for '/', 0 for ''
    level = np.concatenate(([0], np.cumsum(1 - 2 * closes)))
    # A stray end tag closes nothing: depth is measured from the lowest level reached so far.
    return int((level - np.minimum.accumulate(level)).max())


def depth_rejection(html: str, limit: int | None) -> Rejection | None:
    """The `nesting_depth` rejection of a page nested deeper than `limit`, else None."""
    if limit is None:
        return None
    depth = html_depth(html, limit)
    if depth <= limit:
        return None
    return Rejection(
        "extract",
        DEPTH_RULE,
        format_value(depth),
        f"HTML nested {depth} elements deep > curate.limits.max_html_depth {limit}: not parsed "
        "(extraction time grows faster than quadratically with depth)",
    )


# --------------------------------------------------------------------------- time
class DocTimeout(BaseException):
    """Raised by the soft timer inside a step. A BaseException: a step's `except Exception`
    (an extractor's "parse failed means nothing found") must not swallow it."""


class DocClock:
    """One task's timers over its documents (see the module docstring). Use:

    clock = DocClock(cfg.limits, task_dir, hard=...)   # reads what an earlier attempt left
    with clock:                                         # per task: handlers installed
        clock.start(chunk, index)                       # per document
        clock.enter(step)  ... clock.leave()            # per step
        clock.stop()
    """

    def __init__(self, cfg: DocLimitsConfig, task_dir: Path, hard: bool):
        self.seconds = cfg.doc_seconds
        self.kill_seconds = cfg.kill_factor * cfg.doc_seconds if cfg.doc_seconds else None
        self.task_dir = task_dir
        self.soft = self.seconds is not None and threading.current_thread() is threading.main_thread()
        self.hard = hard and self.kill_seconds is not None
        self.killed = self._collect_killed() if self.seconds is not None else {}
        self.step: str | None = None  # the step running now (None: between steps)
        self.expired = False
        self._where = (0, 0)
        self._started = 0.0
        self._fd: int | None = None
        # what signal.signal returned: a handler, SIG_DFL / SIG_IGN (ints), or None
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    # ------------------------------------------------------------------ per task
    def _collect_killed(self) -> dict[tuple[int, int], tuple[str, float]]:
        """(chunk, index) -> (step, CPU seconds) of the documents whose worker the hard timer
        killed in an earlier attempt: the marker holds a stack only after such a kill."""
        killed_file, marker = self.task_dir / KILLED_FILE, self.task_dir / MARKER_FILE
        killed = json_limits.load_file(killed_file) if killed_file.exists() else []
        if marker.exists():
            data = marker.read_bytes()
            if len(data) > HEADER_BYTES and data[HEADER_BYTES:].strip():
                head = json.loads(data[:HEADER_BYTES].decode("utf-8", "replace").strip())
                if head not in killed:
                    killed.append(head)
                    atomic_write_text(killed_file, json.dumps(killed))
            marker.unlink()
        return {(k["chunk"], k["index"]): (k["step"], k["seconds"]) for k in killed}

    def __enter__(self) -> "DocClock":
        if self.soft:
            self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        if self.hard:
            self.task_dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.task_dir / MARKER_FILE, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.lseek(self._fd, HEADER_BYTES, os.SEEK_SET)  # faulthandler writes here; pwrite leaves it
            # chain=True: after writing the stack, the default action of SIGPROF ends the process.
            faulthandler.register(signal.SIGPROF, file=self._fd, all_threads=True, chain=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self.soft:
            # None: the previous handler was not set from Python; the default is what it was.
            signal.signal(signal.SIGALRM, signal.SIG_DFL if self._previous is None else self._previous)
        if self._fd is not None:
            faulthandler.unregister(signal.SIGPROF)
            os.close(self._fd)
            self._fd = None
            (self.task_dir / MARKER_FILE).unlink(missing_ok=True)  # the task finished: no document to blame

    # ------------------------------------------------------------------ per document
    def start(self, chunk: int, index: int) -> None:
        self._where = (chunk, index)
        self.step, self.expired = None, False
        self._started = time.perf_counter()
        # soft implies seconds, and an open marker (hard) implies kill_seconds: the checks only narrow
        if self.soft and self.seconds is not None:
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        if self._fd is not None and self.kill_seconds is not None:
            signal.setitimer(signal.ITIMER_PROF, self.kill_seconds)

    def stop(self) -> None:
        if self.soft:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if self._fd is not None:
            signal.setitimer(signal.ITIMER_PROF, 0)
        self.step = None

    def killed_in(self, step: str) -> Rejection | None:
        """The `timeout` rejection when an earlier attempt's worker was killed on this document
        in this step: the step is not run again."""
        hit = self.killed.get(self._where)
        if hit is None or hit[0] != step:
            return None
        return Rejection(
            step,
            TIMEOUT_RULE,
            format_value(hit[1]),
            f"worker killed after {hit[1]:g} s of CPU in step '{step}' (stuck in native code; "
            f"curate.limits.doc_seconds={self.seconds:g})",
        )

    def enter(self, step: str) -> None:
        if self._fd is not None:
            chunk, index = self._where
            head = json.dumps({"chunk": chunk, "index": index, "step": step, "seconds": self.kill_seconds})
            os.pwrite(self._fd, head.encode().ljust(HEADER_BYTES - 1) + b"\n", 0)
        self.step = step
        if self.expired:  # the time ran out between two steps
            raise DocTimeout

    def leave(self) -> None:
        self.step = None

    def rejection(self, step: str) -> Rejection:
        """The `timeout` rejection of the document whose soft timer fired in `step`."""
        elapsed = time.perf_counter() - self._started
        return Rejection(
            step,
            TIMEOUT_RULE,
            format_value(round(elapsed, 3)),
            f"{elapsed:.3g} s in the per-document steps > curate.limits.doc_seconds={self.seconds:g}",
        )

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        self.expired = True
        if self.step is not None:  # outside a step, the next `enter` raises
            raise DocTimeout
