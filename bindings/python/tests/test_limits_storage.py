"""sluice.limits_storage: the ``sluice://`` storage of the limits package
(issue 22, item 6), through limits' own strategies.

References: the moving window against limits' own MemoryStorage (another
implementation of the same rule) on the same hits; the fixed window against
a count per aligned window written here.  Real time (limits' storages read
the clock themselves), on windows of an hour or a day, so a run never
spans a window's end unless it starts within seconds of one: then the
fixed-window test skips rather than guess.
"""

import multiprocessing
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import sluice  # noqa: E402

try:
    import limits
    import limits.strategies
    from limits.errors import ConfigurationError
    from limits.storage import MemoryStorage, storage_from_string
    import sluice.limits_storage  # noqa: F401  (registers sluice://)
except ImportError as e:  # limits is optional (Debian: python3-limits)
    limits = None
    MISSING = str(e)


def _unlink_all(name):
    prefix = name[1:] + "."
    for n in os.listdir("/dev/shm"):
        if n.startswith(prefix):
            sluice.SharedTable.unlink("/" + n)


def _hits(uri, spec, n, out):
    """One process: its own storage from the URI, n hits on one key."""
    st = storage_from_string(uri)
    lim = limits.strategies.MovingWindowRateLimiter(st)
    item = limits.parse(spec)
    out.put(sum(lim.hit(item, "client") for _ in range(n)))


@unittest.skipIf(limits is None, "limits not installed" if limits is None else "")
class LimitsStorage(unittest.TestCase):
    def setUp(self):
        self.name = f"/sluice-py-limits-{os.getpid()}"
        _unlink_all(self.name)
        self.addCleanup(_unlink_all, self.name)

    def test_registered_by_scheme(self):
        st = storage_from_string(f"sluice://{self.name}?max_keys=50&max_key_bytes=64&evict=lru")
        self.assertIsInstance(st, sluice.limits_storage.SluiceStorage)
        self.assertEqual((st.name, st.max_keys, st.max_key_bytes, st.evict_lru),
                         (self.name, 50, 64, True))
        self.assertTrue(st.check())
        self.assertIsNone(storage_from_string("sluice://").name)  # this process only

    def test_bad_uris(self):
        for uri, words in [("sluice://host/x", "names a host"),
                           (f"sluice://{self.name}?max_keys=0", "max_keys='0'"),
                           (f"sluice://{self.name}?max_keys=ten", "max_keys='ten'"),
                           (f"sluice://{self.name}?max_key_bytes=8", "max_key_bytes='8'"),
                           (f"sluice://{self.name}?evict=fifo", "evict='fifo'"),
                           (f"sluice://{self.name}?maxkeys=5", "unknown option 'maxkeys'")]:
            with self.subTest(uri=uri):
                with self.assertRaises(ConfigurationError) as cm:
                    storage_from_string(uri)
                self.assertIn(words, str(cm.exception))

    def _fixed(self, uri):
        st = storage_from_string(uri)
        fw = limits.strategies.FixedWindowRateLimiter(st)
        item = limits.parse("5 per day")
        day = 86400
        before = int(time.time()) // day
        costs = [1, 2, 1, 3, 1, 1, 0]
        got = [fw.hit(item, "k", cost=c) for c in costs]
        after = int(time.time()) // day
        if before != after:
            self.skipTest("the run spanned the end of a UTC day")
        # reference: one aligned window, a hit allowed iff count + cost <= 5,
        # a refused hit charges nothing
        count, want = 0, []
        for c in costs:
            ok = count + c <= 5
            count += c if ok else 0
            want.append(ok)
        self.assertEqual(got, want)  # [T, T, T, F, T, F, T]
        self.assertEqual(st.get(item.key_for("k")), count)
        reset, remaining = fw.get_window_stats(item, "k")
        self.assertEqual(remaining, 5 - count)
        self.assertEqual(reset, (before + 1) * day)  # the window's end, on the epoch
        self.assertFalse(fw.test(item, "k"))
        self.assertTrue(fw.hit(item, "other"))  # another key, another limit
        fw.clear(item, "k")
        self.assertEqual(st.get(item.key_for("k")), 0)
        self.assertTrue(fw.hit(item, "k", cost=5))
        self.assertEqual(st.reset(), 2)  # "k" and "other"
        self.assertTrue(fw.hit(item, "k", cost=5))

    def test_fixed_window_in_process(self):
        self._fixed("sluice://")

    def test_fixed_window_shared(self):
        self._fixed(f"sluice://{self.name}")

    def test_moving_window_as_memory_storage(self):
        """The same hits through limits' MemoryStorage and through sluice:
        the same decisions, counts and remaining."""
        ours = storage_from_string(f"sluice://{self.name}")
        ref = MemoryStorage()
        a = limits.strategies.MovingWindowRateLimiter(ours)
        b = limits.strategies.MovingWindowRateLimiter(ref)
        item = limits.parse("10 per hour")
        t0 = int(time.time())
        for cost in [1, 3, 2, 5, 4, 1, 1, 2, 11, 1, 0]:
            with self.subTest(cost=cost):
                self.assertEqual(a.hit(item, "k", cost=cost), b.hit(item, "k", cost=cost))
                self.assertEqual(a.test(item, "k"), b.test(item, "k"))
                ra, rem_a = a.get_window_stats(item, "k")
                rb, rem_b = b.get_window_stats(item, "k")
                self.assertEqual(rem_a, rem_b)
        start, count = ours.get_moving_window(item.key_for("k"), 10, 3600)
        self.assertEqual(count, 10)
        self.assertLessEqual(t0, start)  # the oldest hit's second
        self.assertLessEqual(start, int(time.time()))
        self.assertEqual(ours.get_moving_window(item.key_for("new"), 10, 3600)[1], 0)
        ref.timer.cancel()

    def test_four_processes_one_limit(self):
        """4 processes, each its own storage of one URI, 40 hits each on a
        "50 per hour" moving window: exactly 50 allowed in all."""
        uri = f"sluice://{self.name}?max_keys=64"
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        procs = [ctx.Process(target=_hits, args=(uri, "50 per hour", 40, out)) for _ in range(4)]
        for p in procs:
            p.start()
        got = sum(out.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(60)
            self.assertEqual(p.exitcode, 0)
        self.assertEqual(got, 50)

    def test_long_keys_are_digested(self):
        st = storage_from_string(f"sluice://{self.name}?max_key_bytes=40")
        mw = limits.strategies.MovingWindowRateLimiter(st)
        item = limits.parse("1 per hour")
        a, b = "a" * 300, "a" * 299 + "b"
        self.assertTrue(mw.hit(item, a))
        self.assertFalse(mw.hit(item, a))
        self.assertTrue(mw.hit(item, b))  # a different long key: its own limit

    def test_refused_uses(self):
        st = storage_from_string("sluice://")
        with self.assertRaises(NotImplementedError):
            limits.strategies.FixedWindowElasticExpiryRateLimiter(st).hit(limits.parse("1/hour"))
        with self.assertRaises(ValueError) as cm:
            st.incr("not-a-limits-key", 60)
        self.assertIn("not a limits key", str(cm.exception))
        with self.assertRaises(ValueError):
            st.incr("x/5/1/minute", 3600)  # the key says 60 s

    def test_full_table_fails_closed(self):
        st = storage_from_string("sluice://?max_keys=1")
        mw = limits.strategies.MovingWindowRateLimiter(st)
        item = limits.parse("5 per hour")
        self.assertTrue(mw.hit(item, "a"))
        self.assertFalse(mw.hit(item, "b"))  # no room for a second key in use


if __name__ == "__main__":
    unittest.main()
