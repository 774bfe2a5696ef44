"""Local web pages for the tests that fetch: a server on 127.0.0.1 (the address a fetch grant
must name exactly to reach loopback) on a port of its own."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def http_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """A local web server on 127.0.0.1 with `handler`; yields its port."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


class Quiet(http.server.BaseHTTPRequestHandler):
    """A handler that keeps its request lines out of the test's output."""

    def log_message(self, *args: object) -> None:
        pass

    def send_page(self, body: bytes, content_type: str = "text/html") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def page_server(body: bytes, content_type: str = "text/html") -> Iterator[int]:
    """Serves `body` at every path; yields the port."""

    class Page(Quiet):
        def do_GET(self) -> None:
            self.send_page(body, content_type)

    with http_server(Page) as port:
        yield port
