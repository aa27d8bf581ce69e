"""A real Flask-Limiter app on sluice:// under 4 gunicorn workers
(issue 22, item 6).

The test starts gunicorn (4 sync workers, on a loopback socket it made on
a free port and passes as fd://), with Flask-Limiter storing in
``sluice:///NAME`` -- shared memory, no Redis -- and a route limited to
"50 per hour".  Once every worker has answered, 8 client threads send 200
requests, a new connection each (so the workers share them), and count the
200s and 429s from the client side.

One exact limit per key across the workers: the moving window (sluice
sliding-log) admits exactly 50 of the 200, whatever the load.  The fixed
window (sluice fixed-window, aligned on the epoch) admits exactly
min(50, requests) in each window: the responses carry the window's end
(X-RateLimit-Reset), so a run that spans the top of the hour is checked
window by window.  Workers are 4 processes, each with its own storage
object: with a limit per process, up to 4 x 50 would pass.  gunicorn is
stopped by the test (SIGTERM, then SIGKILL).
"""

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
sys.path.insert(0, PKG)
import sluice  # noqa: E402

APP = r'''
import os
import sluice.limits_storage  # registers sluice://
from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

app = Flask(__name__)
limiter = Limiter(get_remote_address, app=app, storage_uri=os.environ["SLUICE_TEST_URI"],
                  strategy=os.environ["SLUICE_TEST_STRATEGY"], headers_enabled=True)


@app.route("/limited")
@limiter.limit("50 per hour")
def limited():
    return "ok"


@app.route("/pid")
@limiter.exempt
def pid():
    return str(os.getpid())


@app.after_request
def tag(resp):
    resp.headers["X-Worker"] = str(os.getpid())
    return resp
'''

WORKERS = 4
REQUESTS = 200
LIMIT = 50


def _missing():
    for mod in ("flask", "flask_limiter", "limits", "gunicorn"):
        if subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True).returncode:
            return mod
    return None


def _get(port, path, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path, headers={"Connection": "close"})
        r = c.getresponse()
        r.read()
        return r.status, dict(r.getheaders())
    finally:
        c.close()


class FlaskLimiterUnderGunicorn(unittest.TestCase):
    def setUp(self):
        miss = _missing()
        if miss:
            self.skipTest(f"{sys.executable}: no module {miss} (tests/run.sh installs the "
                          "Debian packages)")
        self.tmp = tempfile.mkdtemp(prefix="sluice-flask-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        with open(os.path.join(self.tmp, "app.py"), "w") as f:
            f.write(APP)

    def serve(self, strategy):
        """Start gunicorn on a fresh name; return its port once all the
        workers answer."""
        name = f"/sluice-py-flask-{os.getpid()}-{strategy}"

        def unlink():
            prefix = name[1:] + "."
            for n in os.listdir("/dev/shm"):
                if n.startswith(prefix):
                    sluice.SharedTable.unlink("/" + n)
        unlink()
        self.addCleanup(unlink)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        env = dict(os.environ, SLUICE_TEST_URI=f"sluice://{name}?max_keys=1000",
                   SLUICE_TEST_STRATEGY=strategy,
                   PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
        log = open(os.path.join(self.tmp, f"gunicorn-{strategy}.log"), "w")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-w", str(WORKERS), "-b", f"fd://{sock.fileno()}",
             "--chdir", self.tmp, "--graceful-timeout", "5", "app:app"],
            env=env, pass_fds=(sock.fileno(),), stdout=log, stderr=subprocess.STDOUT)
        sock.close()

        def stop():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(30)
        self.addCleanup(stop)

        # Until every worker has answered (bounded in count and time).
        pids = set()
        deadline = time.monotonic() + 120
        for _ in range(5000):
            if len(pids) == WORKERS or time.monotonic() > deadline or proc.poll() is not None:
                break
            try:
                status, _ = _get(port, "/pid", timeout=10)
                if status == 200:
                    pids.add(_["X-Worker"])
            except OSError:
                time.sleep(0.05)  # not listening yet: poll, bounded
        if len(pids) < 2:
            with open(log.name) as f:
                self.fail(f"gunicorn: {len(pids)} worker(s) answered:\n{f.read()[-4000:]}")
        return port

    def hammer(self, port):
        """REQUESTS requests from 8 threads; (status, headers) of each."""
        results = []
        lock = threading.Lock()
        per = REQUESTS // 8

        def client():
            for _ in range(per):
                got = _get(port, "/limited")
                with lock:
                    results.append(got)

        ts = [threading.Thread(target=client) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)
        self.assertEqual(len(results), REQUESTS)
        return results

    def check_common(self, results):
        statuses = sorted({s for s, _ in results})
        self.assertEqual(statuses, [200, 429])
        workers = {h["X-Worker"] for _, h in results}
        self.assertGreaterEqual(len(workers), 2)  # more than one process decided
        refused = [h for s, h in results if s == 429]
        self.assertTrue(all(int(h["Retry-After"]) > 0 for h in refused))

    def test_moving_window_exact(self):
        results = self.hammer(self.serve("moving-window"))
        self.check_common(results)
        ok = sum(1 for s, _ in results if s == 200)
        self.assertEqual(ok, LIMIT)
        self.assertEqual(REQUESTS - ok, REQUESTS - LIMIT)

    def test_fixed_window_exact(self):
        results = self.hammer(self.serve("fixed-window"))
        self.check_common(results)
        windows = {}
        for s, h in results:
            w = windows.setdefault(int(h["X-RateLimit-Reset"]), [0, 0])
            w[0] += 1
            w[1] += s == 200
        for end, (n, ok) in windows.items():
            # aligned: the top of an hour (Flask-Limiter's reset_at adds 1 s)
            self.assertEqual((end - 1) % 3600, 0)
            self.assertEqual(ok, min(LIMIT, n), f"window ending {end}: {n} requests")
        if len(windows) == 1:
            self.assertEqual(sum(ok for _, ok in windows.values()), LIMIT)


if __name__ == "__main__":
    unittest.main()
