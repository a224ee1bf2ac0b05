"""`tokenmill report RUN --serve`: the report of a running run, served locally and kept current.

A stdlib HTTP server: `GET /` is the report (the same `build.render` as `report.html`, plus a small
script that polls `GET /version` and reloads the page, keeping its scroll position, when the run's
files change). The page is re-rendered only when one of the files it is built from changed (their
sizes and mtimes form the change token), so an open tab costs a few `stat` calls per poll.

It binds 127.0.0.1 by default: the report shows paths, config and text samples of the corpus, so
serving it to the network is something to ask for (`--host 0.0.0.0`), never a default. Binding
loopback is not enough: a web page whose own name resolves to 127.0.0.1 (DNS rebinding) could read
the report, so a request is answered only when its `Host` is a loopback name, the bound address or
a name in `report.allowed_hosts`; any other gets 421 and nothing of the report.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import json
import socket
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterable, cast

from tokenmill.errors import UserError
from tokenmill.runs import RunDir

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# What build.render reads: a change to any of these can change the page.
WATCHED_FILES = ("events.jsonl", "config.yaml", "curated/_funnel.json", "tokenizer/audit.json", "tokens/_meta.json")
WATCHED_DIRS = ("eval", ".stages")

# Polls /version; on a new token remembers the scroll position, reloads, and scrolls back.
LIVE_SCRIPT = """<script>
(function () {
  var token = %(token)s, key = "tokenmill-scroll:" + location.pathname;
  var saved = sessionStorage.getItem(key);
  if (saved !== null) { sessionStorage.removeItem(key); window.scrollTo(0, parseInt(saved, 10) || 0); }
  function poll() {
    fetch("/version", {cache: "no-store"}).then(function (r) { return r.json(); }).then(function (v) {
      if (v.token !== token) { sessionStorage.setItem(key, String(window.scrollY)); location.reload(); }
      else { setTimeout(poll, %(poll_ms)d); }
    }).catch(function () { setTimeout(poll, %(poll_ms)d); });  // server restarting: keep trying
  }
  setTimeout(poll, %(poll_ms)d);
})();
</script>"""
LIVE_BANNER = (
    "<p class=muted id=tokenmill-live>Live: this page reloads when the run writes new events (checked every %(poll_s)gs).</p>"
)


def change_token(run: RunDir) -> str:
    """A short hash of the size and mtime of every file the report is built from."""
    parts: list[str] = []
    paths = [run.sub(*name.split("/")) for name in WATCHED_FILES]
    for d in WATCHED_DIRS:
        folder = run.sub(d)
        if folder.is_dir():
            paths += sorted(folder.iterdir())
    for p in paths:
        try:
            st = p.stat()
        except FileNotFoundError:  # not written yet, or replaced between listing and stat
            continue
        parts.append(f"{p.relative_to(run.path)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def inject_live_script(page: str, token: str, poll_s: float) -> str:
    """The served page: the report with the live banner and the polling script before </body>."""
    extra = LIVE_BANNER % {"poll_s": poll_s} + LIVE_SCRIPT % {"token": json.dumps(token), "poll_ms": int(poll_s * 1000)}
    cut = page.rfind("</body>")
    return page[:cut] + extra + page[cut:] if cut >= 0 else page + extra


def _error_page(run: RunDir, exc: BaseException) -> str:
    """Shown while the report cannot be built (e.g. a file of the run is being replaced)."""
    detail = "".join(traceback.format_exception_only(type(exc), exc))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>tokenmill report</title></head><body>"
        f"<h1>The report of {html.escape(str(run.path))} cannot be built yet</h1>"
        f"<pre>{html.escape(detail)}</pre></body></html>"
    )


class ReportCache:
    """The rendered page for the current change token; re-rendered only when the token moves."""

    def __init__(self, run: RunDir, render: Callable[[RunDir], str]):
        self.run, self.render = run, render
        self.token: str | None = None
        self.page = ""
        self.renders = 0
        self._lock = threading.Lock()

    def current(self) -> tuple[str, str]:
        """(token, page), rendering first when the run's files changed since the last render."""
        with self._lock:
            token = change_token(self.run)
            if token != self.token:
                try:
                    self.page = self.render(self.run)
                except Exception as exc:  # a half-written run must not take the server down
                    self.page = _error_page(self.run, exc)
                    token += "-failed"  # never equal to a file token: the next poll renders again
                self.token = token
                self.renders += 1
            return self.token, self.page


class ReportServer(ThreadingHTTPServer):
    # Ctrl-C waits for the requests in flight (a render inside matplotlib must not be cut off at
    # interpreter exit); the handlers' socket timeout bounds that wait for a client that stalls.
    daemon_threads = False
    block_on_close = True

    def __init__(self, cache: ReportCache, host: str, port: int, poll_s: float, hosts: Iterable[str] = ()):
        self.cache, self.poll_s = cache, poll_s
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), _Handler)
        self.allowed_hosts = allowed_hosts(host, self.server_address[1], hosts)  # the port bound, 0 resolved

    @property
    def url(self) -> str:
        host, port = cast("tuple[str, int]", self.server_address[:2])  # a TCP server's address: (host, port, ...)
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


class _Handler(BaseHTTPRequestHandler):
    server: ReportServer
    timeout = 10  # seconds a client may stall mid-request (HTTP/1.0: one request per connection)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        path = self.path.split("?", 1)[0]
        host = (self.headers.get("Host") or "").strip().lower()
        if not host:
            self._send(400, "text/plain; charset=utf-8", "a Host header is required")
        elif host not in self.server.allowed_hosts:  # DNS rebinding, or a name nobody configured
            self._send(
                421,
                "text/plain; charset=utf-8",
                f"this server does not answer to Host {host!r}; add it to report.allowed_hosts to allow it",
            )
        elif path in ("/", "/index.html"):
            token, page = self.server.cache.current()
            self._send(200, "text/html; charset=utf-8", inject_live_script(page, token, self.server.poll_s))
        elif path == "/version":
            token, _ = self.server.cache.current()
            self._send(200, "application/json", json.dumps({"token": token, "renders": self.server.cache.renders}))
        elif path == "/favicon.ico":  # browsers ask for it; a 404 would be a console error
            self.send_response(204)
            self.end_headers()
        else:
            self._send(404, "text/plain; charset=utf-8", f"not found: {path} (the report is at /)")

    def end_headers(self) -> None:
        # every answer, the stdlib's own errors (501, 400) included: a browser must not guess a type
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def _send(self, status: int, content_type: str, body: str) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the tab reloaded or closed mid-answer
            pass

    def log_message(self, format: str, *args: object) -> None:  # one line per page poll would drown the console
        pass


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The `Host` headers the server answers, lower-cased, each bare and with the port: the loopback
    names, the bound address unless it is a wildcard (0.0.0.0, ::), and the configured names."""
    names = set(LOOPBACK_NAMES) | {n.strip().lower() for n in extra if n.strip()}
    if host not in ("", "0.0.0.0", "::"):
        names.add(f"[{host.lower()}]" if ":" in host else host.lower())
    return frozenset(names | {f"{n}:{port}" for n in names})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: only "localhost" is known to stay on this machine
        return False


def make_server(
    run: RunDir,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    poll_s: float = 2.0,
    render: Callable[[RunDir], str] | None = None,
) -> ReportServer:
    """A bound, not yet serving, report server (port 0 picks a free port; see `.url`) answering the
    loopback names, the bound address and the run's report.allowed_hosts."""
    if render is None:
        from tokenmill.report.build import render as build_render

        render = build_render
    try:
        return ReportServer(ReportCache(run, render), host, port, poll_s, run.config.report.allowed_hosts)
    except OSError as exc:
        raise UserError(
            f"cannot serve the report on {host}:{port}: {exc.strerror or exc} "
            f"(another server on that port? --port 0 picks a free one)"
        ) from exc


def serve_report(
    run: RunDir,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    poll_s: float = 2.0,
    tensorboard: bool = False,
    out: Callable[[str], None] = print,
) -> None:
    """Serve the report of `run` until Ctrl-C. With `tensorboard`, the run's scalars are also written
    to `<run>/tensorboard` every `poll_s` seconds (when TensorBoard is installed)."""
    if not is_loopback(host):
        print(
            f"warning: serving on {host}: anyone who can reach this machine can read the report "
            f"(paths, config, text samples). Leave out --host to serve on {DEFAULT_HOST} only. Requests "
            f"naming another Host than {host} or report.allowed_hosts are refused.",
            file=sys.stderr,
        )
    server = make_server(run, host, port, poll_s)
    stop = threading.Event()
    tb_thread = _start_tensorboard_tail(run, poll_s, stop, out) if tensorboard else None
    out(f"serving the report of {run.path} at {server.url} (Ctrl-C to stop)")
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        out("stopped")
    finally:
        stop.set()
        server.server_close()
        if tb_thread is not None:
            tb_thread.join(timeout=5)


def _start_tensorboard_tail(
    run: RunDir, poll_s: float, stop: threading.Event, out: Callable[[str], None]
) -> threading.Thread | None:
    from tokenmill.report.tensorboard import INSTALL_HINT, TensorBoardTail, tensorboard_available

    if not tensorboard_available():
        out(INSTALL_HINT)
        return None
    tail = TensorBoardTail(run)
    out(f"TensorBoard scalars: tensorboard --logdir {tail.logdir}")

    def loop() -> None:
        try:
            while True:
                tail.update()
                if stop.wait(poll_s):
                    break
        finally:
            tail.close()

    thread = threading.Thread(target=loop, name="tensorboard-tail", daemon=True)
    thread.start()
    return thread


def serve_command(
    run_path: Path,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    poll_s: float = 2.0,
    tensorboard: bool = False,
    run: RunDir | None = None,
) -> None:
    """The CLI's entry: `run` when the caller already opened it, else the run directory at `run_path`."""
    if run is None:
        from tokenmill.config import load_config

        config = Path(run_path) / "config.yaml"
        if not config.is_file():
            raise UserError(f"{config}: no such file (is {run_path} a run directory?)")
        run = RunDir(config=load_config(config, []), path=Path(run_path))
    serve_report(run, host=host, port=port, poll_s=poll_s, tensorboard=tensorboard)
