#!/usr/bin/env python3
"""hold_upstream.py -- a slow upstream for the nginx concurrency tests.

    hold_upstream.py PORT_FILE

Listens on 127.0.0.1 at a free port, written to PORT_FILE once it serves.
Every GET is held until the test releases it, then answered 200:

    GET /_count     the requests held now (not held itself)
    GET /_release   answers every request held now (not held itself)
    GET /_stop      ends the server
    GET /anything   held until the next /_release, or 60 s at most

So a test puts N requests in flight through nginx, waits (bounded) until
/_count says N, checks what nginx does with one more, and releases them.
"""

import http.server
import os
import sys
import threading

HOLD_MAX_S = 60.0


class State:
    lock = threading.Lock()
    held = 0
    gate = threading.Event()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path == "/_count":
            with State.lock:
                n = State.held
            self.answer(b"%d\n" % n)
            return
        if self.path == "/_release":
            with State.lock:
                gate, State.gate = State.gate, threading.Event()
            gate.set()
            self.answer(b"released\n")
            return
        if self.path == "/_stop":
            self.answer(b"bye\n")
            threading.Thread(target=self.server.shutdown, daemon=True).start()
            return
        with State.lock:
            State.held += 1
            gate = State.gate
        try:
            gate.wait(HOLD_MAX_S)
            self.answer(b"held " + self.path.encode() + b"\n")
        except OSError:
            pass  # nginx gave up on it (a client abort, a timeout)
        finally:
            with State.lock:
                State.held -= 1

    def log_message(self, *args) -> None:
        pass


def main() -> int:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    srv.serve_forever(poll_interval=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
