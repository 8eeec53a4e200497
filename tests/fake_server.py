"""A small HTTP server that misbehaves on purpose, for fault-injection tests of the adapters only.

``FakeServer(fault)`` serves ``/v1/completions``, ``/generate``, ``/v1/models`` and ``/health`` on a
free loopback port from a thread. ``fault`` picks the misbehaviour of the generation routes:
``ok`` (a well-formed answer), ``reset`` (close the connection without answering), ``timeout``
(answer after ``delay_s``), ``http500``, ``busy`` (503 with Retry-After for the first
``busy_times`` requests, then ok), ``busy_forever``, ``missing`` (no ``token_ids``/``output_ids``),
``shape`` (``choices`` is an object, ``output_ids`` a string), ``html`` (200 with a non-JSON body).
Transport faults: ``reset_mid_body`` / ``close_mid_body`` (headers and part of the body, then a
reset or a clean close), ``never`` (read the request, never answer), ``drip`` / ``drip_headers``
(one byte every ``drip_s``, in the body or in the headers), ``busy_bare`` (503 without
Retry-After), ``malformed`` (truncated JSON), ``deep`` (JSON nested 100,000 deep), ``truncated_sse``
(an event stream cut off mid-chunk), ``busy_then_never`` (``busy_times`` 503s, then no answer).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("ok", "reset", "timeout", "http500", "busy", "busy_forever", "missing", "shape", "html",
          "reset_mid_body", "close_mid_body", "never", "drip", "drip_headers", "busy_bare", "malformed",
          "deep", "truncated_sse", "busy_then_never")  # fmt: skip


_TRANSPORT = ("reset_mid_body", "close_mid_body", "never", "drip", "drip_headers", "busy_bare", "malformed",
              "deep", "truncated_sse")  # fmt: skip


class FakeServer:
    def __init__(self, fault: str = "ok", delay_s: float = 5.0, busy_times: int = 1, drip_s: float = 0.2) -> None:
        if fault not in FAULTS:
            raise ValueError(fault)
        self.fault, self.delay_s, self.busy_times, self.drip_s = fault, delay_s, busy_times, drip_s
        self.requests = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body, headers: dict | None = None, ctype: str = "application/json"):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/health":
                    self._send(200, b"", ctype="text/plain")
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": "fake"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                with server._lock:
                    server.requests += 1
                    n = server.requests
                f = server.fault
                if f == "reset":
                    return self._reset()
                if f in _TRANSPORT:
                    return getattr(self, "_" + f)()
                if f == "timeout":
                    server._stop.wait(server.delay_s)
                if f == "http500":
                    return self._send(500, {"error": {"message": "internal error: boom"}})
                if f == "busy_then_never" and n > server.busy_times:
                    return self._never()
                if f == "busy_forever" or (f in ("busy", "busy_then_never") and n <= server.busy_times):
                    return self._send(
                        503,
                        {"error": {"message": "overloaded"}},
                        {"Retry-After": "0", "retry-after-ms": "20"},
                    )
                if f == "html":
                    return self._send(200, b"<html>proxy error</html>", ctype="text/html")
                if self.path == "/generate":
                    return self._send(200, self._generate(body, f))
                self._send(200, self._completion(body, f))

            def _reset(self):
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                self.connection.close()

            def _part(self, ctype: str = "application/json", length: int = 1000) -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                self.wfile.write(b'{"choices": [{"text": "abc", ')
                self.wfile.flush()

            def _reset_mid_body(self):
                self._part()
                self._reset()

            def _close_mid_body(self):
                self._part()
                self.close_connection = True

            def _never(self):
                server._stop.wait(3600)

            def _drip_bytes(self, data: bytes) -> None:
                for i in range(len(data)):
                    if server._stop.wait(server.drip_s):
                        return
                    try:
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                    except OSError:
                        return

            def _drip(self):
                body = json.dumps({"choices": [{"text": "x" * 200}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.flush()
                self._drip_bytes(body)

            def _drip_headers(self):
                self._drip_bytes(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + b"X-Pad: " + b"a" * 200)

            def _busy_bare(self):
                self._send(503, {"error": {"message": "overloaded"}})

            def _malformed(self):
                self._send(200, b'{"choices": [{"text": "abc", "token_ids": [7, 8')

            def _deep(self):
                self._send(200, b"[" * 100_000 + b"]" * 100_000)

            def _truncated_sse(self):
                self.protocol_version = "HTTP/1.1"  # chunked framing is HTTP/1.1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                event = b'data: {"choices": [{"text": "a", "token_ids": [7]}]}\n\n'
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.write(b"%x\r\n%s" % (len(event), event[:10]))  # cut off mid-chunk
                self.wfile.flush()
                self.close_connection = True

            @staticmethod
            def _completion(body, f):
                prompts = (
                    body["prompt"]
                    if isinstance(body["prompt"], list)
                    and body["prompt"]
                    and not isinstance(body["prompt"][0], int)
                    else [body["prompt"]]
                )
                ids = [7, 8, 9][: body.get("max_tokens", 3)]
                choices = []
                for i, _ in enumerate(prompts):
                    ch = {
                        "index": i,
                        "text": "abc"[: len(ids)],
                        "finish_reason": "length",
                        "token_ids": ids,
                        "prompt_token_ids": [1, 2],
                    }
                    if body.get("logprobs") is not None:
                        ch["logprobs"] = {
                            "tokens": [f"token_id:{t}" for t in ids],
                            "token_logprobs": [-0.5] * len(ids),
                            "top_logprobs": [{f"token_id:{t}": -0.5, "token_id:3": -1.0} for t in ids],
                            "text_offset": [0] * len(ids),
                        }
                    if f == "missing":
                        del ch["token_ids"]
                    choices.append(ch)
                return {
                    "choices": {"0": choices[0]} if f == "shape" else choices,
                    "usage": {"prompt_tokens": 2},
                }

            @staticmethod
            def _generate(body, f):
                item = {
                    "text": "abc",
                    "output_ids": "789" if f == "shape" else [7, 8, 9],
                    "meta_info": {"finish_reason": {"type": "length"}},
                }
                if f == "missing":
                    del item["output_ids"]
                return item

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def closed_port_url() -> str:
    """A loopback URL nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    time.sleep(0.01)
    return f"http://127.0.0.1:{port}"
