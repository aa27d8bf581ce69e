"""What Python users expect (issue 22, item 5): repr, the decorator for
functions and coroutine functions, acquire_async that leaves the event
loop running, Table.acquire with a timeout.

These test waiting, so they wait: on limits fast enough that each wait is
tens of milliseconds.  Lower bounds on a wait are exact (the limiter says
how long); upper bounds are generous, for a loaded machine.
"""

import asyncio
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import sluice  # noqa: E402

S = 1_000_000_000
SLACK = 20.0  # seconds: the most a short wait may take on a loaded machine


class Repr(unittest.TestCase):
    def test_repr(self):
        with sluice.Limiter("token-bucket 10/s burst=5") as lim:
            self.assertEqual(repr(lim), "<sluice.Limiter 'token-bucket 10/s burst=5'>")
        with sluice.Table("fixed-window 60/1m", 100) as t:
            t.try_acquire("a", 1, 0)
            self.assertEqual(repr(t), "<sluice.Table 'fixed-window 60/min' max_keys=100 keys=1>")
        path = f"/sluice-py-repr-{os.getpid()}"
        sluice.SharedTable.unlink(path)
        try:
            with sluice.SharedTable(path, "token-bucket 1/s", 8) as st:
                self.assertEqual(repr(st), f"<sluice.SharedTable '{path}' 'token-bucket 1/s' "
                                           f"max_keys=8 max_key_bytes=64 keys=0>")
            self.assertEqual(repr(st), f"<sluice.SharedTable '{path}' closed>")
        finally:
            sluice.SharedTable.unlink(path)


class Decorator(unittest.TestCase):
    def test_raising_decorator(self):
        lim = sluice.Limiter("fixed-window 3/1h")
        calls = []

        @lim.limit(block=False)
        def work(x):
            """doc"""
            calls.append(x)
            return x * 2

        self.assertEqual(work.__name__, "work")
        self.assertEqual(work.__doc__, "doc")
        self.assertEqual([work(i) for i in range(3)], [0, 2, 4])
        with self.assertRaises(sluice.RateLimited) as cm:
            work(3)
        self.assertEqual(calls, [0, 1, 2])  # the refused call did not run
        self.assertGreater(cm.exception.retry_after, 0)
        self.assertLessEqual(cm.exception.retry_after, 3600)
        self.assertIn("work", str(cm.exception))
        # more than the capacity: never
        big = sluice.limit(sluice.Limiter("fixed-window 3/1h"), 4, block=False)(work)
        with self.assertRaises(sluice.RateLimited) as cm:
            big(9)
        self.assertIsNone(cm.exception.retry_after)

    def test_blocking_decorator(self):
        lim = sluice.Limiter("token-bucket 20/s burst=1")  # one every 50 ms

        @sluice.limit(lim)
        def work():
            return time.monotonic()

        t0 = time.monotonic()
        stamps = [work() for _ in range(4)]
        self.assertGreaterEqual(stamps[-1] - t0, 3 * 0.05 - 0.005)
        self.assertLess(stamps[-1] - t0, SLACK)
        self.assertEqual(lim.stats().requests_allowed, 4)

        @lim.limit(timeout=0.001)
        def hurried():
            return 1

        lim.try_acquire()  # the bucket is empty for 50 ms
        with self.assertRaises(sluice.RateLimited):
            hurried()

    def test_table_decorator_per_key(self):
        t = sluice.Table("fixed-window 2/1h", 100)

        @t.limit(key=lambda user, **_: user, block=False)
        def handle(user, n=0):
            return user

        self.assertEqual(handle("a"), "a")
        self.assertEqual(handle("a", n=1), "a")
        with self.assertRaises(sluice.RateLimited):
            handle("a")
        self.assertEqual(handle("b"), "b")  # another key, another limit
        with self.assertRaises(TypeError):
            sluice.limit(t)  # a table needs key=

    def test_async_decorator(self):
        lim = sluice.Limiter("fixed-window 2/1h")

        @lim.limit(block=False)
        async def handler(x):
            await asyncio.sleep(0)
            return x

        async def main():
            got = [await handler(1), await handler(2)]
            with self.assertRaises(sluice.RateLimited):
                await handler(3)
            return got

        self.assertTrue(asyncio.iscoroutinefunction(handler))
        self.assertEqual(asyncio.run(main()), [1, 2])

    def test_async_blocking_decorator(self):
        lim = sluice.Limiter("token-bucket 20/s burst=1")

        @lim.limit()
        async def handler():
            return time.monotonic()

        async def main():
            t0 = time.monotonic()
            return t0, [await handler() for _ in range(3)]

        t0, stamps = asyncio.run(main())
        self.assertGreaterEqual(stamps[-1] - t0, 2 * 0.05 - 0.005)


class AsyncAcquire(unittest.TestCase):
    def test_waits_without_blocking_the_loop(self):
        """While acquire_async waits ~200 ms for a token, another task
        keeps running (a blocking wait would starve it)."""
        lim = sluice.Limiter("token-bucket 5/s burst=1")
        self.assertTrue(lim.try_acquire())

        async def main():
            ticks = 0
            done = False

            async def ticker():
                nonlocal ticks
                while not done:
                    ticks += 1
                    await asyncio.sleep(0.005)

            task = asyncio.create_task(ticker())
            t0 = time.monotonic()
            ok = await lim.acquire_async(1, timeout=SLACK)
            waited = time.monotonic() - t0
            done = True
            await task
            return ok, waited, ticks

        ok, waited, ticks = asyncio.run(main())
        self.assertTrue(ok)
        self.assertGreaterEqual(waited, 0.2 - 0.01)  # the token's time
        self.assertGreaterEqual(ticks, 5)  # the loop ran meanwhile
        self.assertEqual(lim.stats().requests_allowed, 2)

    def test_gives_up_at_once(self):
        lim = sluice.Limiter("token-bucket 1/1h burst=1")
        self.assertTrue(lim.try_acquire())

        async def main():
            t0 = time.monotonic()
            a = await lim.acquire_async(1, timeout=0.5)   # an hour away
            b = await lim.acquire_async(2, timeout=None)  # never
            return a, b, time.monotonic() - t0

        a, b, took = asyncio.run(main())
        self.assertEqual((a, b), (False, False))
        self.assertLess(took, 0.5)  # did not sleep the timeout out
        self.assertEqual(lim.stats().requests_allowed, 1)  # took nothing

    def test_table_acquire_async(self):
        t = sluice.Table("token-bucket 10/s burst=1", 10)
        self.assertTrue(t.try_acquire("k"))

        async def main():
            return await t.acquire_async("k", 1, timeout=SLACK)

        t0 = time.monotonic()
        self.assertTrue(asyncio.run(main()))
        self.assertGreaterEqual(time.monotonic() - t0, 0.1 - 0.01)


class TableAcquire(unittest.TestCase):
    def test_blocks_until_granted(self):
        t = sluice.Table("token-bucket 10/s burst=1", 10)
        self.assertTrue(t.try_acquire("k"))
        t0 = time.monotonic()
        self.assertTrue(t.acquire("k", timeout=SLACK))
        waited = time.monotonic() - t0
        self.assertGreaterEqual(waited, 0.1 - 0.01)
        self.assertLess(waited, SLACK)
        self.assertTrue(t.acquire("other", timeout=0))  # a fresh key: at once

    def test_timeout_returns_false_taking_nothing(self):
        t = sluice.Table("token-bucket 1/1h burst=1", 10)
        self.assertTrue(t.try_acquire("k"))
        t0 = time.monotonic()
        self.assertFalse(t.acquire("k", timeout=1.0))  # the next token is an hour away
        self.assertLess(time.monotonic() - t0, 1.0 + SLACK)
        self.assertFalse(t.acquire("k", 2, timeout=None))  # never: more than the limit
        st = t.stats().decisions
        self.assertEqual(st.requests_allowed, 1)
        self.assertEqual(st.permits_allowed, 1)

    def test_bad_timeout(self):
        t = sluice.Table("fixed-window 1/1h", 10)
        with self.assertRaises(TypeError):
            t.acquire("k", timeout="1s")
        with self.assertRaises(TypeError):
            sluice.Limiter("fixed-window 1/1h").acquire(timeout="1s")


if __name__ == "__main__":
    unittest.main()
