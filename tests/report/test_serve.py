import json
import os
import threading
import time
import urllib.error
import urllib.request

import pytest

from tokenmill.config import load_config
from tokenmill.errors import UserError
from tokenmill.report.serve import change_token, inject_live_script, is_loopback, make_server
from tokenmill.runs import RunDir


def _run(tmp_path):
    return RunDir.create(load_config(None, [f"root={tmp_path}", "name=live"]))


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.headers.get("Content-Type"), resp.read().decode()


@pytest.fixture()
def served(tmp_path):
    run = _run(tmp_path)
    server = make_server(run, port=0, poll_s=0.25)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield run, server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def test_server_binds_loopback_and_serves_the_live_report(served):
    run, server = served
    assert server.server_address[0] == "127.0.0.1" and server.server_address[1] > 0
    status, ctype, page = _get(server.url)
    assert status == 200 and ctype.startswith("text/html")
    assert "<h2>Run</h2>" in page and "No training steps yet" in page
    assert 'fetch("/version"' in page and page.rstrip().endswith("</html>")  # script injected before </body>
    status, ctype, body = _get(server.url + "version")
    assert ctype == "application/json" and json.loads(body)["token"] == change_token(run)
    with pytest.raises(urllib.error.HTTPError) as err:
        _get(server.url + "elsewhere")
    assert err.value.code == 404


def test_an_appended_event_changes_the_version_and_the_page(served):
    run, server = served
    before = json.loads(_get(server.url + "version")[2])
    _get(server.url)
    assert json.loads(_get(server.url + "version")[2]) == before  # polling alone never re-renders
    for s in range(1, 4):
        run.events.write("train", "train_step", step=s, loss=4.0 - s / 8, lr=1e-3, grad_norm=1.0,
                         tokens_per_s=1234.0, mfu=0.1)
    after = json.loads(_get(server.url + "version")[2])
    assert after["token"] != before["token"] and after["renders"] == before["renders"] + 1
    page = _get(server.url)[2]
    assert "No training steps yet" not in page and "3.625" in page  # the final loss of step 3
    assert f'var token = "{after["token"]}"' in page


def test_change_token_follows_the_files_the_report_reads(tmp_path):
    run = _run(tmp_path)
    t0 = change_token(run)
    assert change_token(run) == t0
    (run.path / "eval").mkdir()
    (run.path / "eval" / "10.json").write_text("{}")
    t1 = change_token(run)
    assert t1 != t0
    (run.path / "checkpoints").mkdir()
    (run.path / "checkpoints" / "x").write_text("not read by the report")
    assert change_token(run) == t1
    os.utime(run.path / "eval" / "10.json", ns=(1, 1))
    assert change_token(run) != t1


def test_render_failure_serves_an_error_page_not_a_crash(tmp_path):
    run = _run(tmp_path)

    calls = []

    def broken(_run):
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("eval/10.json: half written")
        return "<html><body><h2>Fine now</h2></body></html>"

    server = make_server(run, port=0, render=broken)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        page = _get(server.url)[2]
        assert "cannot be built yet" in page and "half written" in page and "/version" in page
        # The files did not change, yet the next poll retries and the page moves on (reloads).
        token = json.loads(_get(server.url + "version")[2])["token"]
        assert token == change_token(run) and f'var token = "{token}-failed"' in page
        assert "Fine now" in _get(server.url)[2]
    finally:
        server.shutdown()
        server.server_close()


def test_busy_port_is_a_user_error(tmp_path):
    run = _run(tmp_path)
    first = make_server(run, port=0)
    try:
        with pytest.raises(UserError, match="--port 0"):
            make_server(run, port=first.server_address[1])
    finally:
        first.server_close()


def test_loopback_detection_and_injection():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.org")
    page = inject_live_script("<html><body><p>x</p></body></html>", "abc", 1.5)
    assert page.index("<p>x</p>") < page.index('var token = "abc"') < page.index("</body>")
    assert "1500" in page


def test_serve_report_prints_the_url_exports_tensorboard_live_and_stops_on_ctrl_c(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tokenmill.report.serve import ReportServer, serve_report

    run = _run(tmp_path)
    run.events.write("train", "train_step", step=1, loss=3.0, lr=1e-3, grad_norm=1.0)
    seen = {}

    def serve_until_exported(self, poll_interval=0.5):
        seen["url"] = self.url
        deadline = time.monotonic() + 20
        while not list((run.path / "tensorboard").glob("events.out.tfevents.*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen["page"] = _get(self.url)[2]  # it answers while "serving"
        raise KeyboardInterrupt

    def handle_in_thread(self):
        threading.Thread(target=self.handle_request, daemon=True).start()

    monkeypatch.setattr(ReportServer, "serve_forever", lambda self, poll_interval=0.5: (
        handle_in_thread(self), serve_until_exported(self)))
    lines = []
    serve_report(run, port=0, poll_s=0.1, tensorboard=True, out=lines.append)
    assert lines[0] == f"TensorBoard scalars: tensorboard --logdir {run.path / 'tensorboard'}"
    assert lines[1] == f"serving the report of {run.path} at {seen['url']} (Ctrl-C to stop)"
    assert seen["url"].startswith("http://127.0.0.1:") and "<h2>Run</h2>" in seen["page"]
    assert lines[-1] == "stopped"
    with pytest.raises(urllib.error.URLError):  # the socket is closed after Ctrl-C
        _get(seen["url"])
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run.path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(1, 3.0)]
