"""`tokenmill report --serve` answers only the Host names it serves under: a DNS-rebinding page
(its own name resolving to 127.0.0.1) gets 421 and nothing of the report; every answer says
`X-Content-Type-Options: nosniff`. Raw http.client requests, so the Host header is exactly ours."""

from __future__ import annotations

import http.client
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tokenmill.config import load_config
from tokenmill.report.serve import make_server
from tokenmill.runs import RunDir


def _request(port: int, host: str | None, path: str = "/", method: str = "GET") -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


@pytest.fixture()
def served(tmp_path: Path):
    run = RunDir.create(load_config(None, [f"root={tmp_path}", "name=live",
                                           "report.allowed_hosts=[Report.Example]"]))
    server = make_server(run, port=0, poll_s=0.25)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_a_foreign_host_gets_421_and_nothing_of_the_report(served):
    port = served
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "localhost.:1",
                 f"localhost:{port + 1}"):
        for path in ("/", "/version", "/index.html"):
            status, headers, body = _request(port, host, path)
            assert status == 421, (host, path, status)
            assert headers["x-content-type-options"] == "nosniff"
            assert "<h2>Run</h2>" not in body and "token" not in body and "live" not in body, body
    status, headers, body = _request(port, None)  # no Host at all (HTTP/1.0 style)
    assert status == 400 and headers["x-content-type-options"] == "nosniff" and "<h2>" not in body


def test_the_loopback_names_and_the_configured_one_get_the_report(served):
    port = served
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", "LOCALHOST:%d" % port,
                 "report.example", f"Report.Example:{port}"):
        status, headers, body = _request(port, host)
        assert status == 200, (host, status, body[:200])
        assert headers["x-content-type-options"] == "nosniff" and headers["content-type"].startswith("text/html")
        assert "<h2>Run</h2>" in body
    status, headers, _ = _request(port, f"localhost:{port}", "/version")
    assert status == 200 and headers["x-content-type-options"] == "nosniff"


def test_every_other_answer_says_nosniff_too(served):
    port = served
    status, headers, _ = _request(port, f"127.0.0.1:{port}", "/elsewhere")
    assert status == 404 and headers["x-content-type-options"] == "nosniff"
    status, headers, _ = _request(port, f"127.0.0.1:{port}", "/favicon.ico")
    assert status == 204 and headers["x-content-type-options"] == "nosniff"
    status, headers, _ = _request(port, f"127.0.0.1:{port}", "/", method="POST")  # the stdlib's own 501
    assert status == 501 and headers["x-content-type-options"] == "nosniff"


def test_the_cli_server_checks_host(tmp_path: Path):
    """The real command: `tokenmill report CONFIG --serve --port 0` in its own process."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"name: live\nroot: {tmp_path / 'runs'}\n")
    proc = subprocess.Popen([sys.executable, "-m", "tokenmill", "report", str(cfg), "--serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        deadline, port = time.monotonic() + 60, None
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            m = re.search(r"at http://127\.0\.0\.1:(\d+)/", line)
            port = int(m.group(1)) if m else None
        assert port is not None, proc.stderr.read() if proc.poll() is not None else "no URL printed"
        assert _request(port, "evil.example")[0] == 421
        assert _request(port, f"evil.example:{port}", "/version")[0] == 421
        status, headers, _ = _request(port, f"localhost:{port}", "/favicon.ico")  # answered, no render needed
        assert status == 204 and headers["x-content-type-options"] == "nosniff"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in proc.stderr.read()
