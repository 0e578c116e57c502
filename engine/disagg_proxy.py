"""An HTTP proxy in front of prefill and decode servers: disaggregated serving.

Each POST to /v1/completions or /v1/chat/completions goes first to a prefill server (`serve
--kv_transfer_config='{"kv_role": "kv_producer", ...}'`) as a one-token, unstreamed,
single-sample request, which computes the prompt and stores its KV (engine/kv_transfer.py);
then, unchanged, to a decode server (kv_consumer on the same store), which loads that KV,
computes the last prompt token and decodes; its answer (whole, or streamed as server-sent
events) is relayed to the client as it comes. vLLM's disaggregated-prefill proxy example
does the same. Requests go round robin over each list of servers; other paths go to a
decode server. An error of the prefill server (a bad request: HTTP 400 naming the field,
as the decode server would answer) is the client's answer, and the request goes no further;
a server that cannot be reached gives 502. Standard library only.
"""

from __future__ import annotations

import http.client
import http.server
import itertools
import json
import threading
import urllib.parse

from engine.server import MAX_BODY_BYTES

GENERATE_PATHS = ("/v1/completions", "/v1/chat/completions")
_TIMEOUT_S = 3600.0  # a long prompt's prefill, or a long answer
_HOP_HEADERS = {"connection", "transfer-encoding", "keep-alive", "content-length"}


def prefill_body(body: dict) -> dict:
    """The request the prefill server gets: the same prompt and settings, one token, one
    sample, not streamed (only its KV matters)."""
    out = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "min_tokens")}
    out.update(max_tokens=1, n=1)
    if "max_completion_tokens" in out:
        out["max_completion_tokens"] = 1
    return out


class _Upstream:
    """A server's host and port, from its base URL ("http://host:port")."""

    def __init__(self, url: str):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"server url={url!r}: expected http://host:port")
        self.url, self.host, self.port = url, parts.hostname, parts.port or 80

    def request(self, method: str, path: str, body: bytes | None, content_type: str | None):
        """Send a request; returns (connection, response) with the body still to read."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=_TIMEOUT_S)
        headers = {} if content_type is None else {"Content-Type": content_type}
        try:
            conn.request(method, path, body=body, headers=headers)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise


class DisaggProxy(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, prefill_urls: list[str], decode_urls: list[str]):
        for name, urls in (("prefill_urls", prefill_urls), ("decode_urls", decode_urls)):
            if not urls:
                raise ValueError(f"{name}: needs at least one server")
        prefill = [_Upstream(u) for u in prefill_urls]
        decode = [_Upstream(u) for u in decode_urls]
        self._lock = threading.Lock()
        self._prefill, self._decode = itertools.cycle(prefill), itertools.cycle(decode)
        self.num_requests = 0  # generate requests answered by a decode server
        super().__init__(address, _ProxyHandler)

    def next_servers(self) -> tuple[_Upstream, _Upstream]:
        with self._lock:
            return next(self._prefill), next(self._decode)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: DisaggProxy

    def log_message(self, format, *args):  # noqa: A002 (the base class's signature)
        pass

    def do_GET(self):
        self._relay(self.server.next_servers()[1], "GET", None)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= MAX_BODY_BYTES:
            return self._error(413, f"Content-Length={length}: must be <= {MAX_BODY_BYTES}")
        data = self.rfile.read(length)
        prefill, decode = self.server.next_servers()
        path = urllib.parse.urlsplit(self.path).path
        if path in GENERATE_PATHS:
            try:
                body = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError):
                body = None  # the decode server answers it (400)
            if isinstance(body, dict):
                sent = json.dumps(prefill_body(body)).encode()
                try:
                    conn, resp = prefill.request("POST", self.path, sent, "application/json")
                except OSError as e:
                    return self._error(502, f"prefill server {prefill.url}: {e}")
                try:
                    answer = resp.read()
                finally:
                    conn.close()
                if resp.status != 200:  # its error is the client's answer
                    return self._send(resp.status, answer, resp.getheader("Content-Type"))
        self._relay(decode, "POST", data)
        if path in GENERATE_PATHS:
            with self.server._lock:
                self.server.num_requests += 1

    def _relay(self, upstream: _Upstream, method: str, data: bytes | None) -> None:
        """Forward the request and copy the answer back as it arrives (streams included)."""
        try:
            conn, resp = upstream.request(method, self.path, data, self.headers.get("Content-Type"))
        except OSError as e:
            return self._error(502, f"decode server {upstream.url}: {e}")
        try:
            self.send_response(resp.status)
            for name, value in resp.getheaders():
                if name.lower() not in _HOP_HEADERS:
                    self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            while chunk := resp.read1(1 << 16):
                self.wfile.write(chunk)
                self.wfile.flush()
        finally:
            conn.close()

    def _send(self, status: int, data: bytes, content_type: str | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type or "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        error = {"error": {"message": message, "type": "proxy_error", "code": status}}
        self._send(status, json.dumps(error).encode(), "application/json")
