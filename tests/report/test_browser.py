"""The report in a real browser: Debian's headless Chromium, driven over the DevTools protocol.

A small run goes through every stage (curate → tokenizer → tokenize → train with in-training
evaluation → eval with tasks, probes and memorization → report), its report.html is opened from
disk and from `tokenmill report --serve`, and the page must show every section the HTML has, with
no console error or JavaScript exception, and a screenshot that is not blank. .ci/run installs
Chromium when it is missing; in CI a missing Chromium fails this test, locally it skips it.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tokenmill.cli import demo_config_path
from tokenmill.config import load_config
from tokenmill.pipeline import run_stage
from tokenmill.runs import RunDir

WIDTH, HEIGHT = 1280, 900
# Sections every finished run's report has, by the start of their heading (the test also checks
# that every <h2> the HTML holds is in the DOM); the evaluation heading carries the step.
REQUIRED_SECTIONS = ("Model: evaluation at step ", "Stages", "Data", "Mixture and curriculum", "Run", "When to stop",
                     "Scaling", "Config")

def demo_config_scaled_down() -> dict[str, Any]:
    """The demo's config (its sources, curation rules, curriculum, tasks and probes) with every
    size cut down so the whole pipeline runs in seconds: the report shows every section the
    demo's does."""
    cfg = yaml.safe_load(demo_config_path().read_text())
    cfg["name"], cfg["seed"] = "browser", 7
    for src in cfg["curate"]["sources"]:
        src["max_bytes"] = 150_000
    cfg["curate"]["workers"] = 1
    cfg["tokenizer"] = {"vocab_size": 512}
    cfg["tokenize"] = {"val_fraction": 0.1, "min_val_docs": 2}
    cfg["mixture"]["phases"][0]["seq_len"] = 32
    cfg["model"] = {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64}
    cfg["train"] = {"seq_len": 64, "micro_batch": 4, "grad_accum": 1, "max_steps": 20, "warmup_steps": 2,
                    "ckpt_every": 10, "eval_every": 10, "eval_docs": 2, "device": "cpu", "threads": 1,
                    "metrics_every": 5}
    cfg["eval"].update(max_docs=4, num_samples=2, sample_tokens=8, memorization_docs=2)
    for task in cfg["eval"]["tasks"]:
        task["limit"] = 6
        task["shots"] = min(task.get("shots", 0), 1)
    return cfg


def chromium_path() -> str:
    """The system Chromium; in CI its absence is a failure (.ci/run installs it), locally a skip."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = ("Debian's `chromium` is not installed (apt-get install chromium; .ci/run installs it "
                   "when apt-get runs as root)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    pytest.importorskip("websocket", reason="websocket-client is in the test extra: pip install -e '.[test]'")
    return path


class Chromium:
    """Headless Chromium with one page, spoken to over the DevTools protocol (CDP)."""

    def __init__(self, executable: str, profile: Path):
        import websocket

        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = self._devtools_port(profile / "DevToolsActivePort")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            page = next(t for t in json.load(resp) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)

    def _devtools_port(self, active_port_file: Path, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode} before opening DevTools")
            lines = active_port_file.read_text().split("\n") if active_port_file.exists() else []
            if lines and lines[0].strip().isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise TimeoutError("chromium did not write DevToolsActivePort")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def _recv_until(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or None when none comes before `deadline`."""
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        self.ws.settimeout(left)
        try:
            return json.loads(self.ws.recv())
        except websocket_timeout():
            return None
        finally:
            self.ws.settimeout(30)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        """The next event `method` (already received or still to come)."""
        for i, msg in enumerate(self.events):
            if msg["method"] == method:
                return self.events.pop(i)
        deadline = time.monotonic() + timeout
        while (msg := self._recv_until(deadline)) is not None:
            if msg.get("method") == method:
                return msg
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(f"no {method} within {timeout}s")

    def settle(self, seconds: float) -> None:
        """Take in the events of the next `seconds` (late console errors, timers)."""
        deadline = time.monotonic() + seconds
        while (msg := self._recv_until(deadline)) is not None:
            if "method" in msg:
                self.events.append(msg)

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser-side errors (failed loads, CSP) so far."""
        out = []
        for msg in self.events:
            p = msg.get("params", {})
            if msg["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('exception', {}).get('description') or p['exceptionDetails']['text']}")
            elif msg["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
            elif msg["method"] == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}")
        return out

    def screenshot(self, height: int = HEIGHT) -> bytes:
        clip = {"x": 0, "y": 0, "width": WIDTH, "height": height, "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True)["data"]
        return base64.b64decode(data)

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def websocket_timeout() -> type[Exception]:
    import websocket

    return websocket.WebSocketTimeoutException


def page_headings(page: str, level: str = "h2") -> list[str]:
    """The text of every <h2> in the HTML source, as the DOM's textContent gives it."""
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", h)).split())
            for h in re.findall(rf"<{level}[^>]*>(.*?)</{level}>", page, flags=re.S)]


DOM_SUMMARY = """JSON.stringify({
  h2: [...document.querySelectorAll('h2')].map(h => [h.textContent.split(/\\s+/).filter(Boolean).join(' '),
                                                   h.getBoundingClientRect().height]),
  svgs: [...document.querySelectorAll('svg')].map(s => { const r = s.getBoundingClientRect(); return [r.width, r.height]; }),
  tables: [...document.querySelectorAll('table')].map(t => t.rows.length),
  height: document.documentElement.scrollHeight,
})"""


def blankness(png: bytes) -> dict[str, float]:
    """Share of non-white pixels, share of coloured (chart) pixels and the grey-level spread."""
    import numpy as np
    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int16)
    grey = rgb.mean(axis=2)
    colour = (rgb.max(axis=2) - rgb.min(axis=2)) > 40
    return {"non_white": float((grey < 245).mean()), "coloured": float(colour.mean()), "std": float(grey.std()),
            "width": rgb.shape[1], "height": rgb.shape[0]}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> RunDir:
    root = tmp_path_factory.mktemp("browser")
    (root / "run.yaml").write_text(yaml.safe_dump(demo_config_scaled_down()))
    run = RunDir.create(load_config(root / "run.yaml", [f"root={root}"]))
    for stage in ("curate", "tokenizer", "tokenize", "train", "eval", "report"):
        run_stage(run, stage)
    return run


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    chrome = Chromium(chromium_path(), tmp_path_factory.mktemp("chromium-profile"))
    yield chrome
    chrome.close()


def test_report_renders_every_section_without_errors(browser, finished_run):
    page = finished_run.sub("report.html").read_text()
    expected = page_headings(page)
    for section in REQUIRED_SECTIONS:
        assert any(h.startswith(section) for h in expected), f"report.html has no section {section!r}"
    browser.open(finished_run.sub("report.html").resolve().as_uri())
    browser.settle(0.5)
    assert browser.errors() == []
    dom = json.loads(browser.evaluate(DOM_SUMMARY))
    assert [h for h, _ in dom["h2"]] == expected  # every section the HTML has, in order, parsed as such
    assert all(height > 10 for _, height in dom["h2"])  # and laid out, not collapsed or hidden
    assert len(dom["svgs"]) == page.count("<svg") >= 4
    assert all(w > 100 and h > 50 for w, h in dom["svgs"]), dom["svgs"]  # every chart has a size
    assert dom["tables"] and all(rows >= 2 for rows in dom["tables"])  # a header and at least one row

    shot = blankness(browser.screenshot(min(dom["height"], 3 * HEIGHT)))
    assert shot["width"] == WIDTH
    assert shot["non_white"] > 0.02 and shot["std"] > 10, shot  # text and charts, not a blank page
    assert shot["coloured"] > 0.001, shot  # the charts' coloured lines were painted


@pytest.mark.slow
def test_served_report_reloads_when_the_run_writes_and_keeps_the_scroll_position(browser, finished_run):
    from tokenmill.report.serve import make_server

    server = make_server(finished_run, port=0, poll_s=0.2)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        browser.open(server.url)
        browser.settle(0.8)  # several /version polls
        assert browser.errors() == []
        assert [h for h, _ in json.loads(browser.evaluate(DOM_SUMMARY))["h2"]] == page_headings(
            finished_run.sub("report.html").read_text())
        browser.evaluate("window.scrollTo(0, 1200)")
        assert browser.evaluate("window.scrollY") == 1200
        browser.events.clear()
        finished_run.events.write("train", "train_step", step=21, loss=0.123456, lr=1e-4, grad_norm=0.5,
                                  tokens_per_s=1000.0, mfu=0.01)
        browser.wait_for("Page.loadEventFired", timeout=120)  # the page reloaded itself (a re-render takes seconds on a busy machine)
        browser.settle(0.3)
        assert browser.errors() == []
        with urllib.request.urlopen(server.url + "version", timeout=10) as resp:
            token = json.load(resp)["token"]
        assert browser.evaluate(f"document.documentElement.outerHTML.includes('var token = \"{token}\"')")
        assert browser.evaluate("window.scrollY") == 1200
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def save_screenshot(report: Path, out: Path, height: int = 2600) -> int:
    """The README's picture of a report: its first `height` pixels at 1280 wide; returns bytes written."""
    import tempfile

    with tempfile.TemporaryDirectory() as profile:
        chrome = Chromium(shutil.which("chromium") or "chromium", Path(profile))
        try:
            chrome.open(report.resolve().as_uri())
            page_height = json.loads(chrome.evaluate(DOM_SUMMARY))["height"]
            out.write_bytes(chrome.screenshot(min(page_height, height)))
        finally:
            chrome.close()
    return out.stat().st_size


if __name__ == "__main__":  # python tests/report/test_browser.py runs/demo/report.html docs/report.png
    import sys

    print(save_screenshot(Path(sys.argv[1]), Path(sys.argv[2])), "bytes")
