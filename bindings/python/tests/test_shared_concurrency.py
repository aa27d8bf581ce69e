"""Concurrency limits shared between processes, from Python:
``sluice.SharedConcurrency``, ``with c.hold(key):``.

The decisions of one process use injected times (now_ns); the blocking and
cross-process tests use real processes (multiprocessing, fork) with bounded
waits, generous for a loaded machine.  The reference for "never more than N
inside" is a counter of the processes' own, outside the library (a
multiprocessing.Value under its lock), checked against the region's count
too.
"""

import multiprocessing
import os
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import sluice  # noqa: E402

S = 1_000_000_000
MINUTE = 60.0
_ctx = multiprocessing.get_context("fork")


def _name(tag: str) -> str:
    return f"/sluice-pytest-{tag}-{os.getpid()}"


class _Region(unittest.TestCase):
    tag = "conc"

    def setUp(self):
        self.path = _name(self.tag)
        sluice.SharedConcurrency.unlink(self.path)

    def tearDown(self):
        sluice.SharedConcurrency.unlink(self.path)


class Arguments(_Region):
    tag = "args"

    def test_spec_and_open(self):
        with self.assertRaises(sluice.SpecError) as cm:
            sluice.SharedConcurrency(self.path, "concurrency 0", 4)
        self.assertIn('"0"', str(cm.exception))
        with self.assertRaises(sluice.SpecError):
            sluice.SharedConcurrency(self.path, "token-bucket 10/s", 4)
        with self.assertRaises(sluice.SluiceError) as cm:
            sluice.SharedConcurrency(self.path, "concurrency 70000", 4)
        self.assertIn("65536", str(cm.exception))
        with self.assertRaises(ValueError):
            sluice.SharedConcurrency("/a\0b", "concurrency 2", 4)
        with self.assertRaises(ValueError):
            sluice.SharedConcurrency(self.path, "concurrency 2", 0)
        with sluice.SharedConcurrency(self.path, "concurrency 2  lease=60000ms", 4) as c:
            self.assertEqual(c.spec, "concurrency 2 lease=min")
            self.assertEqual(c.limit, 2)
            self.assertEqual(repr(c), f"<sluice.SharedConcurrency {self.path!r} "
                                      "'concurrency 2 lease=min' max_keys=4>")
            # another spec on the same name: refused, naming both
            with self.assertRaises(sluice.SluiceError) as cm:
                sluice.SharedConcurrency(self.path, "concurrency 3 lease=1min", 4)
            self.assertIn("concurrency 3", str(cm.exception))
        self.assertTrue(sluice.SharedConcurrency.unlink(self.path))
        self.assertFalse(sluice.SharedConcurrency.unlink(self.path))

    def test_closed(self):
        c = sluice.SharedConcurrency(self.path, "concurrency 1", 4)
        pm = c.try_acquire("k")
        c.close()
        for call in (lambda: c.try_acquire("k"), lambda: c.acquire("k", timeout=0),
                     lambda: c.held("k"), lambda: c.waiting("k"), lambda: pm.release()):
            with self.assertRaises(sluice.ClosedError):
                call()
        self.assertEqual(repr(c), f"<sluice.SharedConcurrency {self.path!r} closed>")


class Decisions(_Region):
    tag = "dec"

    def test_acquire_release(self):
        with sluice.SharedConcurrency(self.path, "concurrency 2", 4) as c:
            a = c.try_acquire("k", now_ns=1)
            self.assertEqual(a.permits, 1)
            self.assertIsInstance(a, sluice.SharedPermit)
            with c.hold(b"k") as b:  # bytes and str name one key
                self.assertEqual(b.permits, 1)
                self.assertEqual(c.held("k"), 2)
                r, none = c.decide("k", 1, now_ns=2)
                self.assertIsNone(none)
                self.assertFalse(r.allowed)
                self.assertEqual(r.remaining, 0)
                self.assertEqual(r.retry_after_ns, 2**63 - 1)  # only a release helps
                self.assertIsNone(c.try_acquire("k"))
                self.assertEqual(c.held("other"), 0)  # keys are separate
                self.assertIsNotNone(c.try_acquire("other"))
            self.assertEqual(b.permits, 0)
            self.assertEqual(c.held("k"), 1)
            self.assertTrue(a.release())
            self.assertFalse(a.release())  # holds nothing any more
            self.assertEqual(c.held("k"), 0)
            r, _ = c.decide("k", 3)
            self.assertEqual(r.retry_after_ns, -1)  # above N: never
            with self.assertRaises(sluice.SluiceError):
                c.acquire("k", 3)  # above N: no wait can help
            with self.assertRaises(ValueError):
                c.acquire("k", 0)

    def test_timeout(self):
        with sluice.SharedConcurrency(self.path, "concurrency 1", 4) as c:
            pm = c.try_acquire("k")
            t0 = time.monotonic()
            self.assertIsNone(c.acquire("k", timeout=0.05))
            took = time.monotonic() - t0
            self.assertGreaterEqual(took, 0.05)
            self.assertLess(took, MINUTE)
            with self.assertRaises(sluice.RateLimited):
                with c.hold("k", timeout=0):
                    self.fail("entered")
            self.assertEqual(c.held("k"), 1)
            self.assertEqual(c.waiting("k"), 0)
            pm.release()

    def test_full_region(self):
        with sluice.SharedConcurrency(self.path, "concurrency 1", 1) as c:
            pm = c.try_acquire("a")
            r, none = c.decide("b")
            self.assertEqual(r.error, sluice.EFULL)
            self.assertIsNone(none)
            with self.assertRaises(sluice.SluiceError) as cm:
                c.acquire("b", timeout=MINUTE)  # not waited for
            self.assertIn("'b'", str(cm.exception))
            pm.release()


def _worker(path, rounds, inside, worst, total, over, start):
    """Hold a permit of "k" `rounds` times, counting who is inside."""
    c = sluice.SharedConcurrency(path, "concurrency 2", 8)
    start.wait(MINUTE)
    for _ in range(rounds):
        with c.hold("k", timeout=MINUTE):
            with inside.get_lock():
                inside.value += 1
                total.value += 1
                if inside.value > worst.value:
                    worst.value = inside.value
            if c.held("k") > 2:
                with over.get_lock():
                    over.value += 1
            time.sleep(0.001)  # hold it a moment: real contention, not logic time
            with inside.get_lock():
                inside.value -= 1
    c.close()


class Processes(_Region):
    tag = "proc"

    def test_never_more_than_n_inside(self):
        procs, rounds = 6, 20
        sluice.SharedConcurrency(self.path, "concurrency 2", 8).close()  # made once
        inside, worst, over = _ctx.Value("i", 0), _ctx.Value("i", 0), _ctx.Value("i", 0)
        total = _ctx.Value("i", 0, lock=False)  # written under inside's lock
        start = _ctx.Event()
        ps = [_ctx.Process(target=_worker, args=(self.path, rounds, inside, worst, total,
                                                 over, start))
              for _ in range(procs)]
        for p in ps:
            p.start()
        start.set()
        for p in ps:
            p.join(4 * MINUTE)
        for p in ps:
            if p.is_alive():
                p.kill()
                p.join()
            self.assertEqual(p.exitcode, 0)
        self.assertEqual(total.value, procs * rounds)
        self.assertEqual(worst.value, 2)  # never more than N inside (and N used at once)
        self.assertEqual(over.value, 0)       # nor in the region's count
        self.assertEqual(inside.value, 0)
        with sluice.SharedConcurrency(self.path, "concurrency 2", 8) as c:
            self.assertEqual(c.held("k"), 0)
            self.assertEqual(c.waiting("k"), 0)

    def test_blocked_until_another_process_releases(self):
        with sluice.SharedConcurrency(self.path, "concurrency 1", 4) as c:
            pm = c.try_acquire("k")
            got = _ctx.Value("i", 0)

            def waiter():
                d = sluice.SharedConcurrency(self.path, "concurrency 1", 4)
                with d.hold("k", timeout=MINUTE):
                    got.value = 1
                os._exit(0)

            p = _ctx.Process(target=waiter)
            p.start()
            deadline = time.monotonic() + MINUTE
            while c.waiting("k") < 1 and time.monotonic() < deadline:
                time.sleep(0.001)
            self.assertEqual(c.waiting("k"), 1)
            self.assertEqual(got.value, 0)
            pm.release()
            p.join(MINUTE)
            self.assertEqual(p.exitcode, 0)
            self.assertEqual(got.value, 1)
            self.assertEqual(c.held("k"), 0)

    def test_killed_holder_gives_back(self):
        with sluice.SharedConcurrency(self.path, "concurrency 1", 4) as c:
            ready = _ctx.Event()

            def holder():
                d = sluice.SharedConcurrency(self.path, "concurrency 1", 4)
                d.try_acquire("k")
                ready.set()
                time.sleep(10 * MINUTE)  # killed long before

            p = _ctx.Process(target=holder)
            p.start()
            self.assertTrue(ready.wait(MINUTE))
            self.assertEqual(c.held("k"), 1)
            os.kill(p.pid, signal.SIGKILL)
            t0 = time.monotonic()
            with c.hold("k", timeout=MINUTE):  # the dead holder's permit, swept
                took = time.monotonic() - t0
            p.join(MINUTE)
            self.assertLess(took, MINUTE)


if __name__ == "__main__":
    unittest.main()
