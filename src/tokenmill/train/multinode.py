"""Training on more than one machine: `tokenmill train --nnodes N --node-rank R --rdzv HOST:PORT`.

Each node runs one torchrun agent; the agents meet in an elastic c10d rendezvous at HOST:PORT
(node rank 0 hosts its store, so HOST must be node 0's address) under a rendezvous id derived
from the run directory, so two runs started against the same HOST:PORT never join each other.

What happens when a node dies (its agent and ranks SIGKILLed, the machine gone): the survivors'
collectives fail (the peer's sockets close), their agents count a failure and, while
--restarts allows, go back to the rendezvous and wait (up to --rdzv-timeout) for the missing node.
Started again with the same command, it joins the next round, and every rank resumes from the
newest checkpoint: a rank that asked for no resume follows the others (`agree_on_resume`), and a
job whose ranks all start fresh still refuses a run that holds checkpoints. torchrun counts
restarts per agent (the node started again counts from 0): `job_attempt` takes the highest. The
node hosting the rendezvous (node rank 0) cannot be lost this way: without its store the job ends,
and is started again with the same commands plus --resume.

torch shares the rendezvous store with the ranks by default, and caches its address on the
surviving agent: a node that joins a later round waits, until it times out, for an address nobody publishes.
The agents here run with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, so every round's rank 0 publishes a
fresh store. Checkpoints, events and the token store live in the run directory, which every node
must see (a shared filesystem): `check_shared_run_dir` refuses to start otherwise.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tokenmill.errors import UserError
from tokenmill.train.errors import TrainError

MARKER = ".shared_fs_check"  # written by rank 0 at each start, read by every other rank
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$")


class MultinodeError(UserError, ValueError):
    """--nnodes / --node-rank / --rdzv cannot describe a job; the message names the option."""


def parse_rdzv(text: str) -> tuple[str, int]:
    """(host, port) of a `--rdzv HOST:PORT`; MultinodeError naming the option otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not _HOST.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise MultinodeError(f"--rdzv {text!r}: expected HOST:PORT (node 0's address and a free port, e.g. node-a:29500)")
    return host, int(port)


def check_nodes(nnodes: int, node_rank: int, rdzv: str | None) -> tuple[str, int] | None:
    """The rendezvous (host, port) of a multi-node launch, None for one node; refuses bad options."""
    if nnodes < 1:
        raise MultinodeError(f"--nnodes {nnodes}: must be at least 1")
    if not 0 <= node_rank < nnodes:
        raise MultinodeError(f"--node-rank {node_rank}: must be in 0..{nnodes - 1} for --nnodes {nnodes}")
    if nnodes == 1:
        if rdzv is not None:
            raise MultinodeError("--rdzv is for --nnodes > 1; one node needs no rendezvous")
        return None
    if rdzv is None:
        raise MultinodeError(f"--nnodes {nnodes} needs --rdzv HOST:PORT (node 0's address) so the nodes can meet")
    return parse_rdzv(rdzv)


def rdzv_id(run_path: Path) -> str:
    """The rendezvous id of a run: the same on every node (the run directory is shared), different
    for another run, so two jobs pointed at one HOST:PORT never form one group."""
    return "tokenmill-" + hashlib.sha256(str(Path(run_path).resolve()).encode()).hexdigest()[:16]


def torchrun_node_args(nnodes: int, node_rank: int, endpoint: tuple[str, int], run_path: Path, rdzv_timeout_s: int) -> list[str]:
    """torchrun's options for one node of an elastic c10d job (replacing --standalone)."""
    host, port = endpoint
    conf = [
        f"is_host={1 if node_rank == 0 else 0}",  # node 0 hosts the rendezvous store, whatever HOST resolves to
        f"join_timeout={rdzv_timeout_s}",  # how long survivors wait for a restarted node
        "keep_alive_interval=1",
        "keep_alive_max_attempt=5",  # a dead node leaves the rendezvous in ~5 s, not 15
        f"read_timeout={min(rdzv_timeout_s, 60)}",  # torch's store connect/read: 60 s unless --rdzv-timeout is shorter
    ]
    return [
        f"--nnodes={nnodes}",
        f"--node-rank={node_rank}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={host}:{port}",
        f"--rdzv-id={rdzv_id(run_path)}",
        f"--rdzv-conf={','.join(conf)}",
    ]


def _resolve(host: str, port: int, timeout_s: float) -> str | None:
    """None when `host` resolves within timeout_s, else why not. getaddrinfo has no timeout of its
    own (a resolver that never answers blocks it for minutes), so it runs in a daemon thread."""
    found: list[OSError | None] = []

    def look() -> None:
        try:
            socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
            found.append(None)
        except OSError as exc:
            found.append(exc)

    threading.Thread(target=look, daemon=True, name="rdzv-resolve").start()
    deadline = time.monotonic() + timeout_s
    while not found and time.monotonic() < deadline:
        time.sleep(0.01)
    if not found:
        return f"no answer from the resolver within --rdzv-timeout {timeout_s:g} s"
    exc = found[0]
    return None if exc is None else f"it does not resolve ({exc.strerror or exc})"


def check_rendezvous(endpoint: tuple[str, int], node_rank: int, timeout_s: float) -> None:
    """Refuse, in one line and within timeout_s, a rendezvous torch would retry for minutes (with a
    C++ stack): a HOST that does not resolve; on a node other than 0, a HOST:PORT where nothing
    accepts a connection (node 0 hosts the rendezvous, so it may start a little later: this waits
    for it up to timeout_s)."""
    host, port = endpoint
    deadline = time.monotonic() + timeout_s
    why = _resolve(host, port, timeout_s)
    if why is not None:
        raise MultinodeError(
            f"--rdzv {host}:{port}: the host {host!r} is not usable: {why}; give node 0's hostname or IP address"
        )
    if node_rank == 0:
        return
    last: OSError | None = None
    while (left := deadline - time.monotonic()) > 0:
        try:
            with socket.create_connection((host.strip("[]"), port), timeout=min(left, 2.0)):
                return
        except OSError as exc:
            last = exc
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
    raise MultinodeError(
        f"--rdzv {host}:{port}: nothing accepted a connection there within --rdzv-timeout {timeout_s:g} s "
        f"({(last.strerror or last) if last else 'timed out'}); node 0 hosts the rendezvous: start it first "
        "with the same command and --node-rank 0, on the machine HOST names"
    )


# what a multi-node torchrun agent needs in its environment (see the module docstring)
AGENT_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def node_count() -> int:
    """How many torchrun agents (nodes) this rank's job has; 1 outside torchrun."""
    return int(os.environ.get("GROUP_WORLD_SIZE", "1") or 1)


def agree_on_resume(ctx: Any, resume: bool) -> bool:
    """Every rank resumes when any does: a node started again after a failure joins ranks that
    were restarted by their agents (which resume), whatever its own command line said."""
    return ctx.any(resume) if ctx.distributed else resume


def job_attempt(ctx: Any, attempt: int) -> int:
    """The job's restart count: the highest of its ranks' (torchrun counts per agent, and a node
    started again counts from 0 while its peers' agents count their restarts)."""
    if not ctx.distributed or node_count() <= 1:
        return attempt
    import torch
    import torch.distributed as dist

    t = torch.tensor([attempt], dtype=torch.int64, device=ctx.device if ctx.device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def check_shared_run_dir(run_path: Path, ctx: Any) -> None:
    """Refuse (on every rank, in one line) a multi-node job whose run directory is not one shared
    directory: rank 0 writes a fresh token to it, every rank must read it back. Without this,
    each node would write its own checkpoints and a restarted node would resume from another."""
    if not ctx.distributed or node_count() <= 1:
        return
    import torch.distributed as dist

    marker = Path(run_path) / MARKER
    token = ctx.broadcast(uuid.uuid4().hex if ctx.rank == 0 else None)
    if ctx.rank == 0:
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(token)
        os.replace(tmp, marker)
    ctx.barrier()
    try:
        seen = marker.read_text() == token
    except OSError:
        seen = False
    blind: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(blind, None if seen else f"rank {ctx.rank} on {socket.gethostname()}")
    missing = [b for b in blind if b]
    if missing:
        raise TrainError(
            f"{run_path} is not shared by every node: {', '.join(missing)} cannot read the {MARKER} rank 0 wrote there; "
            "checkpoints, events and tokens must be on a filesystem all nodes mount at the same path (NFS, Lustre, ...)"
        )
