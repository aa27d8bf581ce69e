"""Tests of the Python binding (python3 -m unittest).

The decisions are checked against references that do not come from the
library: the contract's worked examples in tests/golden (each trace names
its spec; the .expected file holds the decisions, computed from the written
rules), and small cases worked out by hand in the comments.  Time is
injected through now_ns, never slept, except in the one test of the
blocking acquire.
"""

import os
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import sluice  # noqa: E402

GOLDEN = os.path.normpath(os.path.join(HERE, "..", "..", "..", "tests", "golden"))
S = 1_000_000_000


def golden_cases():
    for name in sorted(os.listdir(GOLDEN)):
        if not name.endswith(".trace"):
            continue
        with open(os.path.join(GOLDEN, name), encoding="utf-8") as f:
            lines = f.read().splitlines()
        spec = lines[0].split("# spec:", 1)[1].strip()
        with open(os.path.join(GOLDEN, name[:-6] + ".expected"), encoding="utf-8") as f:
            expected = f.read().splitlines()[1:]
        yield name, spec, lines, expected


class Golden(unittest.TestCase):
    def test_golden_traces(self):
        """Every worked example of the contract, through a Table (each key
        its own limiter, as `sluice replay` does)."""
        seen = 0
        for name, spec, lines, expected in golden_cases():
            seen += 1
            with self.subTest(trace=name), sluice.Table(spec, 1 << 16, reclaim_when_full=True) as t:
                got = []
                for line in lines:
                    if not line or line.startswith("#") or line[0].isalpha():
                        continue
                    parts = line.split(",")
                    now = int(parts[0])
                    key = parts[1] if len(parts) > 1 else ""
                    permits = int(parts[2]) if len(parts) > 2 and parts[2] != "" else 1
                    r = t.decide(key, permits, now)
                    got.append(f"{now},{key},{permits},{int(r.allowed)},{r.wait_ns},"
                               f"{r.remaining},{r.retry_after_ns}")
                self.assertEqual([e.split(",")[:7] for e in expected],
                                 [g.split(",") for g in got])
        self.assertGreaterEqual(seen, 6)


class LimiterTest(unittest.TestCase):
    def test_token_bucket_by_hand(self):
        # token-bucket 10/s burst=5: 5 tokens at t=0, one back every 100 ms.
        with sluice.Limiter("token-bucket 10/s burst=5") as lim:
            for i in range(5):
                r = lim.decide(1, 0)
                self.assertTrue(r.allowed)
                self.assertEqual(r.remaining, 4 - i)
            r = lim.decide(1, 0)
            self.assertFalse(r.allowed)
            self.assertEqual(r.retry_after_ns, 100_000_000)
            self.assertFalse(lim.try_acquire(1, 99_999_999))
            self.assertTrue(lim.try_acquire(1, 100_000_000))
            # more than the burst can never be granted
            self.assertEqual(lim.decide(6, 10 * S).retry_after_ns, -1)
            st = lim.stats()
            self.assertEqual((st.requests_allowed, st.requests_denied), (6, 3))
            self.assertEqual((st.permits_allowed, st.permits_denied), (6, 8))

    def test_probe_changes_nothing(self):
        with sluice.Limiter("fixed-window 3/s") as lim:
            self.assertTrue(lim.try_acquire(2, 0))
            p = lim.decide(0, 500_000_000)
            self.assertTrue(p.allowed)
            self.assertEqual(p.remaining, 1)
            self.assertEqual(lim.stats().probes, 1)
            self.assertTrue(lim.try_acquire(1, 600_000_000))
            self.assertFalse(lim.try_acquire(1, 700_000_000))
            # the next window starts at 1 s
            self.assertTrue(lim.try_acquire(3, S))

    def test_spec_and_reconfigure(self):
        with sluice.Limiter("token-bucket 10/s burst=10") as lim:
            self.assertEqual(lim.spec, "token-bucket 10/s")
            for _ in range(10):
                self.assertTrue(lim.try_acquire(1, 0))
            # At 1 s the bucket holds 10 again; the new spec caps it at its
            # burst of 4 and refills at 2/s.
            lim.reconfigure("token-bucket 2/s burst=4", S)
            self.assertEqual(lim.spec, "token-bucket 2/s burst=4")
            self.assertTrue(lim.try_acquire(4, S))
            r = lim.decide(1, S)
            self.assertFalse(r.allowed)
            self.assertEqual(r.retry_after_ns, 500_000_000)
            lim.set_limit(4, S, S)
            self.assertEqual(lim.decide(1, S).retry_after_ns, 250_000_000)
            lim.set_burst(8, S)
            self.assertEqual(lim.spec, "token-bucket 4/s burst=8")

    def test_bad_specs_name_the_token(self):
        for spec, token in [("token-bucket 10/s burts=5", "burts=5"),
                            ("leaky-buckt 1/s", "leaky-buckt"),
                            ("fixed-window 0/s", "0")]:
            with self.subTest(spec=spec):
                with self.assertRaises(sluice.SpecError) as cm:
                    sluice.Limiter(spec)
                self.assertIn(token, str(cm.exception))
                self.assertIsInstance(cm.exception, ValueError)
                self.assertLess(cm.exception.code, 0)
        with self.assertRaises(TypeError):
            sluice.Limiter(b"token-bucket 1/s")

    def test_bad_reconfigure_changes_nothing(self):
        with sluice.Limiter("token-bucket 10/s") as lim:
            with self.assertRaises(sluice.SpecError) as cm:
                lim.reconfigure("fixed-window 10/s", 0)
            self.assertIn("fixed-window", str(cm.exception))
            self.assertEqual(lim.spec, "token-bucket 10/s")
        with sluice.Limiter("fixed-window 1/s") as fw:
            with self.assertRaises(sluice.SluiceError):
                fw.set_burst(5, 0)  # no burst to set on a window
            self.assertEqual(fw.spec, "fixed-window 1/s")

    def test_bad_arguments(self):
        lim = sluice.Limiter("fixed-window 1/s")
        with self.assertRaises(ValueError):
            lim.decide(-1, 0)
        with self.assertRaises(TypeError):
            lim.decide(1.5, 0)
        with self.assertRaises(ValueError):
            lim.decide(1, 1 << 64)
        lim.close()
        lim.close()  # idempotent
        with self.assertRaises(sluice.SluiceError):
            lim.try_acquire(1, 0)

    def test_threads_admit_exactly_the_limit(self):
        # 4 threads, 1000 requests each, all at t=1 s: exactly 500 admitted.
        with sluice.Limiter("sliding-log 500/s") as lim:
            counts = []

            def run():
                counts.append(sum(lim.try_acquire(1, S) for _ in range(1000)))

            ts = [threading.Thread(target=run) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            self.assertEqual(sum(counts), 500)
            self.assertEqual(lim.stats().requests_denied, 3500)

    def test_blocking_acquire(self):
        with sluice.Limiter("token-bucket 1000/s burst=1") as lim:
            self.assertTrue(lim.acquire(1, timeout=1.0))
            # 10 more permits than the burst can hold: never
            self.assertFalse(lim.acquire(2, timeout=0.001))

    def test_calendar_quota_reads_the_realtime_clock(self):
        # a calendar quota (tz=) without now_ns decides at CLOCK_REALTIME:
        # the refusal's retry is the time to the next UTC midnight (within
        # a few seconds of a loaded machine), not to a boot-time day's end
        import time
        day = 86400 * 10**9
        for obj in (sluice.Limiter("fixed-window 1/d tz=UTC"),
                    sluice.Table("fixed-window 1/d tz=UTC", 4)):
            with obj as o:
                args = () if isinstance(o, sluice.Limiter) else ("k",)
                o.decide(*args)
                r = o.decide(*args)
                now = time.time_ns()
                self.assertFalse(r.allowed)
                want = (now // day + 1) * day - now
                self.assertLess(abs(r.retry_after_ns - want), 5 * 10**9)
        self.assertEqual(sluice.parse_spec("fixed-window 1/d tz=UTC").clock, "realtime")


class TableTest(unittest.TestCase):
    def test_keys_are_separate(self):
        with sluice.Table("fixed-window 2/s", 100) as t:
            self.assertTrue(t.try_acquire("a", 2, 0))
            self.assertFalse(t.try_acquire("a", 1, 0))
            self.assertTrue(t.try_acquire(b"b", 1, 0))
            self.assertTrue(t.try_acquire("\u00e9", 1, 0))
            self.assertFalse(t.try_acquire("\u00e9".encode(), 2, 0))  # same key, UTF-8
            st = t.stats()
            self.assertEqual(st.keys, 3)
            self.assertEqual(st.decisions.requests_denied, 2)

    def test_key_operations(self):
        with sluice.Table("token-bucket 1/s burst=2", 100) as t:
            self.assertTrue(t.try_acquire("k", 2, 0))
            r, st = t.peek("k", 1, 0)
            self.assertFalse(r.allowed)
            self.assertEqual(r.retry_after_ns, S)
            self.assertEqual(st.last_ns, 0)
            self.assertEqual(st.rest_ns, 2 * S)
            r, st = t.peek("other", 1, 0)
            self.assertTrue(r.allowed)
            self.assertIsNone(st)
            self.assertEqual(t.stats().keys, 1)  # peek made nothing
            self.assertEqual(sorted(k for k, _ in t.keys()), [b"k"])
            self.assertTrue(t.remove("k"))
            self.assertFalse(t.remove("k"))
            t.reset("k")
            self.assertTrue(t.try_acquire("k", 2, 0))

    def test_scan_sees_every_key(self):
        with sluice.Table("token-bucket 1/s", 10_000) as t:
            want = {f"key-{i}".encode() for i in range(3000)}
            for k in want:
                self.assertTrue(t.try_acquire(k, 1, 0))
            got = [k for k, _ in t.keys(count=100)]
            self.assertEqual(set(got), want)
            self.assertEqual(len(got), len(want))

    def test_full_table_and_long_key(self):
        with sluice.Table("token-bucket 1/s", 1) as t:
            self.assertTrue(t.try_acquire("a", 1, 0))
            r = t.decide("b", 1, 0)
            self.assertFalse(r.allowed)
            self.assertEqual(r.error, sluice.EFULL)
            r = t.decide(b"x" * 65537, 1, 0)  # a key as any (its digest): no room
            self.assertEqual(r.error, sluice.EFULL)
            self.assertEqual(t.stats().refused, 2)
        with self.assertRaises(ValueError):
            sluice.Table("token-bucket 1/s", 0)
        with self.assertRaises(TypeError):
            sluice.Table("token-bucket 1/s", 10).decide(17)


def _shared_worker(path, spec, tries, out):
    """One process of SharedTableTest: opens the table by name, asks
    `tries` times at one instant, reports what it was granted."""
    with sluice.SharedTable(path, spec, 16) as t:
        out.put(sum(t.try_acquire("k", 1, now_ns=7 * S) for _ in range(tries)))


class SharedTableTest(unittest.TestCase):
    def setUp(self):
        self.path = f"/sluice-py-{os.getpid()}"
        sluice.SharedTable.unlink(self.path)

    def tearDown(self):
        sluice.SharedTable.unlink(self.path)

    def test_four_processes_share_one_limit(self):
        """4 processes from multiprocessing, 300 requests each at one
        instant, on one key of a 1000/h window: exactly 1000 granted in all
        (one limit, not four)."""
        import multiprocessing
        spec = "fixed-window 1000/1h"
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        procs = [ctx.Process(target=_shared_worker, args=(self.path, spec, 300, out))
                 for _ in range(4)]
        for p in procs:
            p.start()
        got = sum(out.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(60)
            self.assertEqual(p.exitcode, 0)
        self.assertEqual(got, 1000)
        with sluice.SharedTable(self.path, spec, 16) as t:
            self.assertEqual(t.stats().decisions.requests_allowed, 1000)
            self.assertEqual(t.stats().decisions.requests_denied, 200)

    def test_reserve_across_processes(self):
        """A reservation here, admissions on its key in another process,
        the settle here: the window gives back what went unused (docs/
        decisions.md 3.10), and every process sees it."""
        import multiprocessing
        spec = "fixed-window 10/1h"
        ctx = multiprocessing.get_context("fork")
        with sluice.SharedTable(self.path, spec, 16) as t:
            rv = t.reserve("k", 4, now_ns=7 * S)
            self.assertTrue(rv.granted)
            out = ctx.Queue()
            p = ctx.Process(target=_shared_worker, args=(self.path, spec, 3, out))
            p.start()
            self.assertEqual(out.get(timeout=60), 3)
            p.join(60)
            self.assertEqual(p.exitcode, 0)
            rv.settle(1, now_ns=7 * S)  # 3 back
            self.assertEqual(t.decide("k", 0, now_ns=7 * S).remaining, 6)

    def test_refusals(self):
        """Another spec is refused naming both; a key longer than
        max_key_bytes is held by its digest: limited, not refused."""
        with sluice.SharedTable(self.path, "token-bucket 5/s", 8, max_key_bytes=4) as t:
            with self.assertRaises(sluice.SluiceError) as cm:
                sluice.SharedTable(self.path, "token-bucket 6/s", 8, max_key_bytes=4)
            self.assertIn("token-bucket 5/s", cm.exception.message)
            self.assertIn("token-bucket 6/s", cm.exception.message)
            self.assertTrue(t.try_acquire("12345", 5, now_ns=S))
            self.assertFalse(t.try_acquire("12345", 1, now_ns=S))
            self.assertTrue(t.try_acquire("1234", 5, now_ns=S))
            self.assertFalse(t.try_acquire("1234", 1, now_ns=S))
        self.assertTrue(sluice.SharedTable.unlink(self.path))
        self.assertFalse(sluice.SharedTable.unlink(self.path))


class FunctionsTest(unittest.TestCase):
    def test_check_and_parse(self):
        self.assertEqual(sluice.check_spec("token-bucket 60/1m"), "token-bucket 60/min")
        info = sluice.parse_spec("leaky-bucket 10/s capacity=5 nodelay")
        self.assertEqual((info.algorithm, info.limit, info.period_ns, info.capacity, info.nodelay),
                         ("leaky-bucket", 10, S, 5, True))
        with self.assertRaises(sluice.SpecError) as cm:
            sluice.check_spec("token-bucket 10/parsec")
        self.assertIn("parsec", str(cm.exception))

    def test_clock_and_version(self):
        a = sluice.now_ns()
        b = sluice.now_ns()
        self.assertLessEqual(a, b)
        self.assertRegex(sluice.version(), r"^\d+\.\d+\.\d+")
        self.assertTrue(os.path.exists(sluice.library_path()))

    def test_calls_without_now_read_the_librarys_clock(self):
        """A decision without now_ns reads CLOCK_MONOTONIC on the library's
        axis (the binding reads it through time.monotonic_ns where that is
        the same clock): each reading lies between two of the library's."""
        for _ in range(200):
            a = sluice.now_ns()
            b = sluice._clock()
            c = sluice.now_ns()
            self.assertLessEqual(a, b)
            self.assertLessEqual(b, c)
        # and a decision made without now_ns is made at such a time: a
        # window that opens 1 s from now is still shut for a call now
        lim = sluice.Limiter("fixed-window 1/s")
        t0 = sluice.now_ns()
        self.assertTrue(lim.try_acquire(1, t0))
        self.assertFalse(lim.try_acquire())
        self.assertTrue(lim.try_acquire(1, (t0 // S + 1) * S))


class Settle(unittest.TestCase):
    """Reservations settled at their real cost (docs/decisions.md 3.10);
    the numbers worked out by hand from the written rules."""

    def test_below_and_above(self):
        lim = sluice.Limiter("token-bucket 10/s burst=10")
        rv = lim.reserve(10, now_ns=0)
        self.assertTrue(rv.granted)
        self.assertEqual((rv.permits, rv.wait_ns, rv.at_ns), (10, 0, 0))
        rv.settle(4, now_ns=0)  # untouched since: the 6 go back
        self.assertTrue(rv.done)
        self.assertTrue(lim.try_acquire(6, now_ns=0))
        self.assertFalse(lim.try_acquire(1, now_ns=0))
        # above: 25 for an estimate of 2 at 2 s (bucket full again): a debt
        # of 15 tokens at 10/s, paid before anything passes: 1.6 s
        rv = lim.reserve(2, now_ns=2 * S)
        rv.settle(25, now_ns=2 * S)
        r = lim.decide(1, now_ns=2 * S)
        self.assertFalse(r.allowed)
        self.assertEqual(r.retry_after_ns, 1_600_000_000)
        self.assertTrue(lim.try_acquire(1, now_ns=2 * S + 1_600_000_000))

    def test_windows(self):
        lim = sluice.Limiter("fixed-window 10/s")
        rv = lim.reserve(8, now_ns=S // 10)
        rv.settle(3, now_ns=S // 5)  # same window: 5 back
        self.assertEqual(lim.decide(0, now_ns=S // 5).remaining, 7)
        rv = lim.reserve(1, now_ns=S // 2)
        with self.assertRaises(sluice.SluiceError) as cm:
            rv.cancel(now_ns=S // 2)  # a window cannot give back
        self.assertEqual(cm.exception.code, sluice.EINVAL)
        self.assertFalse(rv.done)
        rv.settle(20, now_ns=S // 2)  # past the limit: nothing more here
        r = lim.decide(1, now_ns=S // 2)
        self.assertFalse(r.allowed)
        self.assertEqual(r.retry_after_ns, S // 2)

    def test_once(self):
        lim = sluice.Limiter("token-bucket 10/s")
        rv = lim.reserve(3, now_ns=0)
        rv.settle(3, now_ns=0)
        for again in (lambda: rv.settle(1, now_ns=0), lambda: rv.cancel(now_ns=0)):
            with self.assertRaises(sluice.SluiceError) as cm:
                again()
            self.assertEqual(cm.exception.code, sluice.ENOENT)
        self.assertEqual(lim.decide(0, now_ns=0).remaining, 7)  # nothing changed
        # a settle after a cancel (booked ahead, given back before its time)
        lim.try_acquire(7, now_ns=0)
        rv = lim.reserve(5, max_wait=None, now_ns=0)
        self.assertEqual(rv.at_ns, S // 2)
        self.assertTrue(rv.cancel(now_ns=0))
        with self.assertRaises(sluice.SluiceError) as cm:
            rv.settle(0, now_ns=0)
        self.assertEqual(cm.exception.code, sluice.ENOENT)
        # a refused one
        rv = lim.reserve(1, now_ns=0)
        self.assertFalse(rv.granted)
        self.assertTrue(rv.done)
        with self.assertRaises(sluice.SluiceError) as cm:
            rv.settle(1, now_ns=0)
        self.assertEqual(cm.exception.code, sluice.ENOENT)

    def test_bad_input(self):
        lim = sluice.Limiter("token-bucket 10/s")
        rv = lim.reserve(3, now_ns=0)
        for bad, exc in ((-1, ValueError), (1 << 64, ValueError), ("2", TypeError),
                         (True, TypeError), (1.5, TypeError)):
            with self.assertRaises(exc):
                rv.settle(bad, now_ns=0)
        self.assertFalse(rv.done)  # refused input changes nothing
        with self.assertRaises(TypeError):
            lim.reserve(1, max_wait="1")
        rv.settle(3, now_ns=0)

    def test_table_keys(self):
        # Table.reserve(key, n).settle(actual), on the key's own limiter
        t = sluice.Table("fixed-window 10/s", 16)
        rv = t.reserve("a", 8, now_ns=S // 10)
        self.assertIsInstance(rv, sluice.TableReservation)
        rv.settle(3, now_ns=S // 5)  # same window: 5 back
        self.assertEqual(t.decide("a", 0, now_ns=S // 5).remaining, 7)
        self.assertEqual(t.decide("b", 0, now_ns=S // 5).remaining, 10)
        with self.assertRaises(sluice.SluiceError) as cm:
            rv.settle(1, now_ns=S // 5)
        self.assertEqual(cm.exception.code, sluice.ENOENT)
        # a key reset since: nothing settles on its new entry
        rv = t.reserve("a", 4, now_ns=S // 5)
        t.reset("a")
        self.assertTrue(t.try_acquire("a", 10, now_ns=S // 5))
        with self.assertRaises(sluice.SluiceError) as cm:
            rv.settle(0, now_ns=S // 5)
        self.assertEqual(cm.exception.code, sluice.ENOENT)
        self.assertFalse(t.try_acquire("a", 1, now_ns=S // 5))
        # the C reservation holds the table: settled after its close
        b = sluice.Table("token-bucket 10/s", 16)
        rv = b.reserve(b"k", 10, now_ns=0)
        b.close()
        rv.settle(4, now_ns=0)
        self.assertTrue(rv.done)
        # collected open: let go of the table
        b = sluice.Table("token-bucket 10/s", 16)
        b.reserve("k", 2, now_ns=0)
        b.close()
        t.close()

    def test_context_manager(self):
        # on the live clock (as __exit__ settles): at 10/h the refill in
        # the test's few microseconds stays far below one permit
        lim = sluice.Limiter("token-bucket 10/h")
        with lim.reserve(4) as rv:
            pass  # no settle: the estimate stays charged
        self.assertTrue(rv.done)
        self.assertEqual(lim.decide(0).remaining, 6)
        with self.assertRaises(RuntimeError):
            with lim.reserve(4) as rv:
                raise RuntimeError("the work failed")
        self.assertEqual(lim.decide(0).remaining, 6)  # settled at 0: back
        with lim.reserve(2) as rv:
            rv.settle(9)
        r = lim.decide(1)
        self.assertFalse(r.allowed)
        # 6 - 9 = -3 tokens: 4 to refill at 10/h, 1440 s
        self.assertTrue(1430 * S < r.retry_after_ns <= 1440 * S, r.retry_after_ns)

    def test_keeps_its_limiter(self):
        lim = sluice.Limiter("token-bucket 10/s")
        rv = lim.reserve(3, now_ns=0)
        lim.close()
        with self.assertRaises(sluice.ClosedError):
            rv.settle(1, now_ns=0)


if __name__ == "__main__":
    unittest.main()
