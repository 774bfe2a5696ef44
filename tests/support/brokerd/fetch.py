"""A local HTTP server for fetch's tests: a path answered by a handler, every request counted."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable

PAGE = b"""<html><head><title>Hello page</title><style>body{color:red}</style>
<script>var secret = "SCRIPT-TEXT";</script></head>
<body><h1>Heading</h1><p>First   paragraph with <a href="https://example.org/x">a link</a>.</p>
<ul><li>one</li><li>two</li></ul><noscript>NOSCRIPT-TEXT</noscript></body></html>"""


class Server:
    """http.server on a thread; `routes` maps a path to a handler body; `hits` records requests."""

    def __init__(self, family: int = socket.AF_INET, host: str = "127.0.0.1") -> None:
        self.hits: list[tuple[str, str]] = []
        self.routes: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = {}
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits.append((self.path, self.headers.get("Host", "")))
                route = outer.routes.get(self.path.split("?")[0])
                if route is None:
                    self.send_error(404)
                else:
                    route(self)

            def log_message(self, *args: object) -> None:
                pass

        class Srv(http.server.ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        self.httpd = Srv((host, 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def body(data: bytes, ctype: str = "text/html; charset=utf-8") -> Callable[..., None]:
    def handle(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    return handle
