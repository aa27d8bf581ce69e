#!/usr/bin/env python3
"""load.py -- a small HTTP load generator for the nginx tests (stdlib only).

    load.py URL THREADS SECONDS [MAX_REQUESTS]

THREADS threads send GET URL over keep-alive connections (one each,
reconnecting when the server closes), one request at a time, until SECONDS
have passed or MAX_REQUESTS have been sent in all.  Every request has a 5 s
timeout, so the run ends within SECONDS + 5 s.  Prints one JSON object:
the count of each status ("200", "429", ...; "error" for a failed
connection or timeout), the first send and the last answer on
CLOCK_MONOTONIC (seconds), and the latency of the slowest request.
"""

import http.client
import json
import sys
import threading
import time
import urllib.parse


def main() -> int:
    url = urllib.parse.urlsplit(sys.argv[1])
    threads = int(sys.argv[2])
    seconds = float(sys.argv[3])
    budget = [int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 62]
    lock = threading.Lock()
    counts: dict = {}
    first = [None]
    last = [0.0]
    slowest = [0.0]
    start = time.monotonic()
    deadline = start + seconds
    path = url.path or "/"

    def worker() -> None:
        conn = None
        while time.monotonic() < deadline:
            with lock:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            t0 = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                key = str(resp.status)
                if resp.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                key = "error"
                if conn is not None:
                    conn.close()
                conn = None
            t1 = time.monotonic()
            with lock:
                counts[key] = counts.get(key, 0) + 1
                if first[0] is None or t0 < first[0]:
                    first[0] = t0
                last[0] = max(last[0], t1)
                slowest[0] = max(slowest[0], t1 - t0)
        if conn is not None:
            conn.close()

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(seconds + 30)
    print(json.dumps({"counts": counts, "first": first[0] or start, "last": last[0],
                      "slowest": slowest[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
