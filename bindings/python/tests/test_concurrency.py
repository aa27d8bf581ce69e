"""Concurrency limits from Python: ``sluice.Concurrency``, ``with lim.hold():``.

Decisions use injected times (now_ns); the blocking tests use real threads
with bounded waits, generous for a loaded machine.
"""

import os
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import sluice  # noqa: E402

S = 1_000_000_000


class Spec(unittest.TestCase):
    def test_canonical(self):
        with sluice.Concurrency("concurrency 3  lease=60000ms") as c:
            self.assertEqual(c.spec, "concurrency 3 lease=min")
            self.assertEqual(c.limit, 3)
            self.assertEqual(repr(c), "<sluice.Concurrency 'concurrency 3 lease=min'>")

    def test_bad(self):
        for spec, token in [("concurrency 0", '"0"'), ("concurrency 5 lease=0", "lease=0"),
                            ("concurrency 5 lease=5", "lease=5"), ("concurrency", "missing N"),
                            ("concurrency 5 burst=2", "burst=2")]:
            with self.assertRaises(sluice.SpecError) as cm:
                sluice.Concurrency(spec)
            self.assertIn(token, str(cm.exception), spec)
        with self.assertRaises(sluice.SpecError) as cm:
            sluice.Limiter("concurrency 5")
        self.assertIn("sluice_concurrency_new", str(cm.exception))


class Decisions(unittest.TestCase):
    def test_acquire_release(self):
        with sluice.Concurrency("concurrency 2") as c:
            a = c.try_acquire(1, now_ns=0)
            b = c.try_acquire(1, now_ns=0)
            self.assertIsNotNone(a)
            self.assertIsNotNone(b)
            self.assertIsNone(c.try_acquire(1, now_ns=0))
            r, pm = c.decide(1, now_ns=0)
            self.assertFalse(r.allowed)
            self.assertIsNone(pm)
            self.assertEqual(r.retry_after_ns, 2**63 - 1)  # no lease: not known
            r, _ = c.decide(3, now_ns=0)
            self.assertEqual(r.retry_after_ns, -1)  # never
            self.assertEqual(c.held(0), 2)
            self.assertTrue(a.release(0))
            self.assertFalse(a.release(0))  # twice
            self.assertEqual(a.permits, 0)
            self.assertEqual(c.held(0), 1)
            with c.try_acquire(1, now_ns=0) as d:
                self.assertEqual(d.permits, 1)
                self.assertEqual(c.held(0), 2)
            self.assertEqual(c.held(0), 1)  # released by the with block
            b.release(0)
            self.assertEqual(c.held(0), 0)
        with self.assertRaises(sluice.ClosedError):
            b.release(0)

    def test_lease(self):
        with sluice.Concurrency("concurrency 1 lease=10s") as c:
            a = c.try_acquire(1, now_ns=100 * S)
            r, _ = c.decide(1, now_ns=104 * S)
            self.assertFalse(r.allowed)
            self.assertEqual(r.retry_after_ns, 6 * S)
            self.assertIsNone(c.try_acquire(1, now_ns=110 * S - 1))
            b = c.try_acquire(1, now_ns=110 * S)  # a's lease ended
            self.assertIsNotNone(b)
            self.assertFalse(a.release(110 * S))  # late: changes nothing
            self.assertEqual(c.held(110 * S), 1)
            self.assertTrue(b.release(111 * S))


class Blocking(unittest.TestCase):
    def test_hold_threads(self):
        """Six threads, two permits: never more than two inside."""
        c = sluice.Concurrency("concurrency 2")
        inside, most, lock = [0], [0], threading.Lock()

        def work():
            for _ in range(50):
                with c.hold(timeout=60):
                    with lock:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    with lock:
                        inside[0] -= 1

        ts = [threading.Thread(target=work) for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
            self.assertFalse(t.is_alive())
        self.assertLessEqual(most[0], 2)
        self.assertGreaterEqual(most[0], 1)
        self.assertEqual(c.held(), 0)
        c.close()

    def test_hold_timeout(self):
        with sluice.Concurrency("concurrency 1") as c:
            pm = c.try_acquire()
            with self.assertRaises(sluice.RateLimited):
                with c.hold(timeout=0.01):
                    pass
            self.assertIsNone(c.acquire(timeout=0))
            pm.release()
            with c.hold(timeout=1) as h:
                self.assertEqual(h.permits, 1)
            with self.assertRaises(sluice.SluiceError):
                c.acquire(2)  # more than N: never


if __name__ == "__main__":
    unittest.main()
