"""A real two-node Ray cluster on this machine, started the way a user starts one.

`ray start --head` plus a second `ray start --address=...`, each with `--block`, so that every
process of a node (raylet, agents, task workers) descends from one `ray start` process that
this module owns. Losing a node is SIGKILLing that tree; teardown ends only those trees. Never
`ray stop`: it ends every Ray process of the user on the machine, other people's clusters too.

    with ray_cluster() as cluster:
        result = cluster.run_driver(some_module_level_function, arg, ...)
        cluster.worker.kill()

The process that owns the cluster is never a driver of it: every driver (`run_driver`, the
`tokenmill` CLI, the node check) is a process of its own that exits before the cluster's temp dir
goes. `ray.shutdown()` does not end all of a driver: the process keeps its core-driver log open in
the cluster's session dir until it exits, and once it has connected twice, metrics exporter threads
go on writing to that log every few seconds, long after the cluster and its temp dir are gone. Ray's
C++ log sink is only torn down at interpreter exit; in CI pytest then died of SIGSEGV ("Failed
writing to file .../python-core-driver-...log: Bad file descriptor") after every test had passed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import tokenmill

RAY = Path(sys.executable).with_name("ray")
STARTED = "Ray runtime started."
REPO = Path(__file__).resolve().parents[2]
# Small: the cluster shares a 2-core machine with other work; tasks pass little data.
OBJECT_STORE_BYTES = 100 * 1024 * 1024


class RayStartError(RuntimeError):
    """`ray start` did not bring a node up (the message ends with its log)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, for every process on the machine (from /proc)."""
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # it exited while we looked
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in (...) may hold spaces
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    tree = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _kill(pids: list[int], sig: int) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


@dataclass
class Node:
    name: str
    proc: subprocess.Popen  # `ray start --block`
    log: Path

    def pids(self) -> list[int]:
        return process_tree(self.proc.pid) if self.proc.poll() is None else []

    def alive(self) -> bool:
        return self.proc.poll() is None

    def running(self, function: str) -> bool:
        """Whether a worker of this node runs a task of `function` now (Ray titles a busy
        worker process `ray::<function>`)."""
        return any(cmdline(p).startswith(f"ray::{function}") for p in self.pids())

    def kill(self) -> list[int]:
        """SIGKILL every process of the node at once, as when its machine dies."""
        pids = self.pids()
        _kill(pids, signal.SIGKILL)
        self.proc.wait()
        return pids

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM (`ray start --block` then ends its node's processes), SIGKILL what is left."""
        pids = self.pids()  # now: once the parent exits, its children are no longer found under it
        if self.proc.poll() is None:
            self.proc.terminate()
        deadline = time.time() + grace_s
        while any(_alive(p) for p in pids) and time.time() < deadline:
            time.sleep(0.1)
        _kill([p for p in pids if _alive(p)], signal.SIGKILL)
        self.proc.wait()


@dataclass
class RayCluster:
    address: str
    temp_dir: Path
    env: dict[str, str]
    head: Node
    worker: Node

    def restart_worker(self) -> None:
        """A fresh second node, once the old one is lost."""
        if not self.worker.alive():
            self.worker = _start_worker(self.address, self.temp_dir, self.env)
            _wait_for_nodes(self.address, 2, self.env, timeout_s=60)

    def run_driver(self, fn: Callable[..., Any], *args: Any, timeout_s: float = 300) -> Any:
        """`fn(*args)` in a fresh Python with RAY_ADDRESS set to this cluster; what it returns.
        `fn` is a module-level function; arguments and result travel as JSON."""
        out = self.temp_dir / f"driver-{time.time_ns()}.json"
        res = subprocess.run([sys.executable, "-c", _DRIVER, fn.__module__, fn.__name__, json.dumps(args), str(out)],
                             env={**self.env, "RAY_ADDRESS": self.address}, capture_output=True, text=True,
                             timeout=timeout_s)
        if res.returncode or not out.exists():
            raise AssertionError(f"the driver {fn.__name__} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
        return json.loads(out.read_text())

    def held_files(self) -> list[str]:
        """Files under the cluster's temp dir that this process holds open (none, if it was never a driver)."""
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue  # the fd of the listing itself, already closed
            if target.startswith(f"{self.temp_dir}/"):
                out.append(target)
        return out


# The body of `run_driver`'s process: module, function, JSON arguments, result file.
_DRIVER = """import importlib, json, sys
module, name, args, out = sys.argv[1:]
result = getattr(importlib.import_module(module), name)(*json.loads(args))
with open(out, "w") as fh:
    json.dump(result, fh)
"""

# `_wait_for_nodes`' process: address, node count, timeout; exit 1 with a message when they are not up.
_WAIT = """import sys, time, ray
address, n, timeout_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ray.init(address=address, log_to_driver=False)
deadline = time.time() + timeout_s
while sum(node["Alive"] for node in ray.nodes()) < n:
    if time.time() > deadline:
        sys.exit(f"the cluster at {address} has not {n} live nodes after {timeout_s}s")
    time.sleep(0.2)
ray.shutdown()
"""


def _agent_ports() -> list[str]:
    # Ray's fixed defaults (52365 for the agent, worker ports 10002-19999) would collide between
    # two nodes of one machine, and with any other Ray on it: free ports, and workers on port 0.
    return [f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
            "--min-worker-port=0", "--max-worker-port=0"]


def _common() -> list[str]:
    return ["--num-cpus=1", "--node-ip-address=127.0.0.1", f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--disable-usage-stats", "--include-log-monitor=false", *_agent_ports()]


def _start(name: str, args: list[str], temp_dir: Path, env: dict[str, str], timeout_s: float) -> Node:
    log = temp_dir / f"{name}-{time.time_ns()}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(RAY), "start", "--block", *args], stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # a Ctrl-C at the terminal goes to pytest, not the node
    node = Node(name, proc, log)
    deadline = time.time() + timeout_s
    while STARTED not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.time() > deadline:
            node.stop()
            tail = log.read_text(errors="replace")[-3000:]
            raise RayStartError(f"`ray start` of the {name} node failed (exit {proc.returncode}):\n{tail}")
        time.sleep(0.2)
    return node


def _start_worker(address: str, temp_dir: Path, env: dict[str, str], timeout_s: float = 90) -> Node:
    return _start("worker", [f"--address={address}", '--resources={"worker_node": 1}', *_common()], temp_dir, env,
                  timeout_s)


def _wait_for_nodes(address: str, n: int, env: dict[str, str], timeout_s: float) -> None:
    """Until the cluster has `n` live nodes, asked by a driver process of its own (see the module doc)."""
    try:
        res = subprocess.run([sys.executable, "-c", _WAIT, address, str(n), str(timeout_s)], env=env,
                             capture_output=True, text=True, timeout=timeout_s + 60)
    except subprocess.TimeoutExpired as exc:
        raise RayStartError(f"no answer from the cluster at {address} after {timeout_s + 60}s") from exc
    if res.returncode:
        raise RayStartError(f"the cluster at {address} is not up (exit {res.returncode}):\n{res.stderr[-3000:]}")


@contextmanager
def ray_cluster(timeout_s: float = 90) -> Iterator[RayCluster]:
    """Head (resource `head`) and a worker node (resource `worker_node`), one CPU each."""
    # Short: Ray's socket paths under the temp dir must fit in 107 bytes.
    temp_dir = Path(tempfile.mkdtemp(prefix="tmray-", dir="/tmp"))
    # Task workers import this tokenmill and these tests, wherever the driver found them.
    path = [str(Path(tokenmill.__file__).resolve().parents[1]), str(REPO), os.environ.get("PYTHONPATH", "")]
    # Token auth off, whatever the machine holds: `ray start --head` turns it on when
    # ~/.ray/auth_token exists (any local ray.init writes one), `ray start --address` does not.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes: list[Node] = []
    cluster = None
    try:
        nodes.append(_start("head", ["--head", f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false",
                                     f"--ray-client-server-port={free_port()}", f"--dashboard-port={free_port()}",
                                     '--resources={"head": 1}', *_common()], temp_dir, env, timeout_s))
        cluster = RayCluster(address, temp_dir, env, nodes[0], _start_worker(address, temp_dir, env, timeout_s))
        _wait_for_nodes(address, 2, env, timeout_s)
        yield cluster
    finally:
        for node in ([cluster.worker, cluster.head] if cluster else nodes[::-1]):
            node.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
