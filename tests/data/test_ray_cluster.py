"""Curation on a real two-node Ray cluster of this machine (tests/data/ray_cluster.py): the
second node SIGKILLed mid-run, the driver SIGKILLed mid-run and started again; every time the
output is exactly that of an undisturbed local run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Iterator

import pytest

from tests.data.ray_cluster import Node, RayCluster, RayStartError, ray_cluster
from tests.data.test_curate import config, rows, write_corpus
from tokenmill.config import CurateConfig, SourceConfig
from tokenmill.data import curate as curate_mod
from tokenmill.data.curate import curate
from tokenmill.data.executor import RayExecutor

pytestmark = pytest.mark.slow
SHARDS = 4  # one source per file, one shard per source: work for both nodes
ChunkStats = dict[str, tuple[int, int]]


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    pytest.importorskip("ray")
    with ExitStack() as stack:
        try:
            found = stack.enter_context(ray_cluster())
        except RayStartError as exc:
            pytest.skip(f"ray cannot start a cluster on this machine: {exc}")
        yield found
        # Every driver ran in a process of its own (ray_cluster.py says why): nothing of the
        # cluster's temp dir, about to be removed, may be open here.
        assert not found.held_files(), "this process became a driver of the test cluster"


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> list[Path]:
    """The curate tests' corpus, its lines cut into SHARDS files in order."""
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    lines = (root / "topics.jsonl").read_text().splitlines()
    per = -(-len(lines) // SHARDS)
    out = []
    for k in range(SHARDS):
        path = root / f"part-{k}.jsonl"
        path.write_text("\n".join(lines[k * per:(k + 1) * per]) + "\n")
        out.append(path)
    return out


def cluster_config(parts: list[Path], **over) -> CurateConfig:
    # One document per chunk: many chunk marks, so a kill lands between finished chunks.
    return config(parts[0].parent, sources=[SourceConfig(path=str(p), bucket="reference") for p in parts],
                  chunk_docs=1, **over)


@pytest.fixture(scope="module")
def reference(parts, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "out"
    curate(cluster_config(parts), out, progress=False)
    return out


def assert_same_output(a: Path, b: Path) -> None:
    """Every file, kept row, rejected row, the funnel and the contamination report."""
    assert sorted(p.relative_to(a) for p in a.rglob("*")) == sorted(p.relative_to(b) for p in b.rglob("*"))
    ra, rb = rows(a), rows(b)
    assert ra.keys() == rb.keys() and {"reference", "_rejected"} <= ra.keys()
    for bucket in ra:
        assert ra[bucket] == rb[bucket], bucket
    for name in ("_funnel.json", "_decontamination.json"):
        assert json.loads((a / name).read_text()) == json.loads((b / name).read_text()), name


def done_chunks(work: Path) -> ChunkStats:
    """(inode, mtime) of every finished map chunk: a chunk written again gets a new inode."""
    out = {}
    for mark in work.glob("map/*/chunk-*.done"):
        path = mark.with_suffix(".parquet")
        st = path.stat()
        out[str(path)] = (st.st_ino, st.st_mtime_ns)
    return out


class ChunkWatch(threading.Thread):
    """Samples `done_chunks` until stopped: proof that a finished chunk is never written again."""

    def __init__(self, work: Path, before: ChunkStats):
        super().__init__(daemon=True)
        self.work, self.before = work, before
        self.changed: set[str] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                now = done_chunks(self.work)
            except FileNotFoundError:
                now = {}  # a chunk mark seen while the work dir was being removed
            self.changed |= {p for p, st in self.before.items() if p in now and now[p] != st}
            time.sleep(0.02)


class NodeKiller(threading.Thread):
    """SIGKILLs `node` as soon as it runs a map task and some map chunk is finished."""

    def __init__(self, node: Node, work: Path):
        super().__init__(daemon=True)
        self.node, self.work = node, work
        self.killed: list[int] = []
        self.before: ChunkStats = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            if any(self.work.glob("map/*/chunk-*.done")) and self.node.running("map_shard"):
                self.before = done_chunks(self.work)
                self.killed = self.node.kill()
                return
            time.sleep(0.005)


def test_tasks_spread_over_both_nodes_and_the_cluster_outlives_the_driver(cluster):
    cluster.restart_worker()
    got = cluster.run_driver(_spread_and_reconnect)
    assert [x for x, _ in got["out"]] == [i * i for i in range(8)]
    assert len({node for _, node in got["out"]}) == 2  # SPREAD: the tasks ran on both nodes
    assert got["disconnected"]  # the executor disconnected ...
    assert cluster.head.alive() and cluster.worker.alive()  # ... and left the cluster running
    assert got["again"] == 9


def _spread_and_reconnect() -> dict:
    """The driver of the test above (RAY_ADDRESS is the cluster)."""
    import ray

    with RayExecutor(1) as ex:
        out = ex.map(_node_of, [(i,) for i in range(8)])
    disconnected = not ray.is_initialized()
    with RayExecutor(1) as ex:
        again = ex.map(_node_of, [(3,)])[0][0]
    return {"out": out, "disconnected": disconnected, "again": again}


def _node_of(i: int) -> tuple[int, str]:
    import ray

    time.sleep(0.2)  # long enough that one node cannot take every task
    return i * i, ray.get_runtime_context().get_node_id()


def test_killed_driver_resumes_against_the_cluster(cluster, parts, reference, tmp_path):
    """`tokenmill curate --executor ray` SIGKILLed mid-run, then the same command again."""
    cluster.restart_worker()
    cfg_file = tmp_path / "run.yaml"  # JSON is YAML
    cfg_file.write_text(json.dumps({"curate": cluster_config(parts).model_dump(mode="json", exclude={"sources"})}))
    out, work = tmp_path / "out", tmp_path / ".out.work"
    cmd = [sys.executable, "-m", "tokenmill", "curate", *map(str, parts), "-o", str(out), "--bucket", "reference",
           "--executor", "ray", "--config", str(cfg_file)]
    env = {**cluster.env, "RAY_ADDRESS": cluster.address}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while proc.poll() is None and time.time() < deadline and len(list(work.glob("map/*/chunk-*.done"))) < 3:
        time.sleep(0.005)
    if proc.poll() is not None:
        pytest.fail(f"the run ended (exit {proc.returncode}) before it could be killed")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "_funnel.json").exists()
    time.sleep(1)  # the cluster ends the dead driver's tasks; a late one may still finish a chunk
    watch = ChunkWatch(work, done_chunks(work))
    watch.start()
    try:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    finally:
        watch.stopping.set()
        watch.join()
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert len(watch.before) >= 3 and not watch.changed
    assert not work.exists()
    assert_same_output(reference, out)


# The node-loss test comes last: its SIGKILLed node is restarted by the next test that needs two
# nodes (restart_worker), and none does after it, so the module starts the second node only once.
def test_curation_survives_the_loss_of_a_node(cluster, parts, reference, tmp_path):
    """The second node dies mid-map (every one of its processes SIGKILLed): its tasks run again
    on the head, the chunks it had finished are not redone, the output is the undisturbed one."""
    cluster.restart_worker()
    out, work = tmp_path / "out", tmp_path / ".out.work"
    killer = NodeKiller(cluster.worker, work)
    killer.start()
    try:
        at_publish = cluster.run_driver(_curate_on_the_cluster, [str(p) for p in parts], str(out), str(work))
    finally:
        killer.stopping.set()
        killer.join()
    assert killer.killed, "the second node never ran a map task after a chunk was done: nothing was lost"
    assert not cluster.worker.alive()
    assert_same_output(reference, out)
    assert killer.before and {p: tuple(at_publish[p]) for p in killer.before} == killer.before


def _curate_on_the_cluster(parts: list[str], out: str, work: str) -> ChunkStats:
    """The driver of the test above: `curate` with the Ray executor; the finished map chunks as
    they were when the output was published."""
    at_publish: ChunkStats = {}
    real_publish = curate_mod._publish

    def publish(final, output, *rest):
        at_publish.update(done_chunks(Path(work)))
        return real_publish(final, output, *rest)

    curate_mod._publish = publish
    curate(cluster_config([Path(p) for p in parts], executor="ray", workers=2), Path(out), progress=False)
    return at_publish
