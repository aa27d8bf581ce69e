"""Errors and lifetimes of the binding (issue 22, items 2-4).

- Every method of a closed Limiter, Table or SharedTable raises
  ClosedError, never touches freed memory: a keys() iterator closed under
  it included (it read freed memory before; ASan: heap-use-after-free).
- SharedTable refuses a bad spec with SpecError, as Table does; a NUL byte
  in a spec raises SpecError and in a path ValueError, never cuts it short;
  paths may be str, bytes or os.PathLike.
- A key the library refuses raises from every call, never reads as a
  refusal (try_acquire returned False for a key too long).
"""

import os
import pathlib
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import sluice  # noqa: E402

S = 1_000_000_000


def _table_calls(t):
    """Every public method of a table, each called once."""
    return {
        "decide": lambda: t.decide("k", 1, S),
        "try_acquire": lambda: t.try_acquire("k", 1, S),
        "acquire": lambda: t.acquire("k", 1, timeout=0),
        "peek": lambda: t.peek("k", 0, S),
        "remove": lambda: t.remove("k"),
        "reset": lambda: t.reset("k"),
        "keys": lambda: list(t.keys()),
        "stats": lambda: t.stats(),
        "limit": lambda: t.limit("k")(lambda: 1)(),
    }


class UseAfterClose(unittest.TestCase):
    def test_limiter_methods_raise(self):
        lim = sluice.Limiter("token-bucket 10/s")
        self.assertTrue(lim.try_acquire(1, 0))
        lim.close()
        self.assertTrue(lim.closed)
        calls = {
            "decide": lambda: lim.decide(1, S),
            "try_acquire": lambda: lim.try_acquire(1, S),
            "acquire": lambda: lim.acquire(1, timeout=0),
            "stats": lambda: lim.stats(),
            "spec": lambda: lim.spec,
            "reconfigure": lambda: lim.reconfigure("token-bucket 5/s", S),
            "set_limit": lambda: lim.set_limit(5, S, S),
            "set_burst": lambda: lim.set_burst(5, S),
            "limit": lambda: lim.limit()(lambda: 1)(),
        }
        for name, call in calls.items():
            with self.subTest(method=name):
                with self.assertRaises(sluice.ClosedError) as cm:
                    call()
                self.assertIn("Limiter is closed", str(cm.exception))
                self.assertIsInstance(cm.exception, sluice.SluiceError)
                self.assertIsInstance(cm.exception, ValueError)
        self.assertEqual(repr(lim), "<sluice.Limiter closed>")
        lim.close()  # idempotent

    def test_table_methods_raise(self):
        t = sluice.Table("token-bucket 10/s", 100)
        t.try_acquire("k", 1, 0)
        t.close()
        for name, call in _table_calls(t).items():
            with self.subTest(method=name):
                with self.assertRaises(sluice.ClosedError):
                    call()
        self.assertIn("closed", repr(t))

    def test_shared_table_methods_raise(self):
        path = f"/sluice-py-closed-{os.getpid()}"
        sluice.SharedTable.unlink(path)
        try:
            t = sluice.SharedTable(path, "token-bucket 10/s", 16)
            t.try_acquire("k", 1, 0)
            t.close()
            for name, call in _table_calls(t).items():
                with self.subTest(method=name):
                    with self.assertRaises(sluice.ClosedError):
                        call()
        finally:
            sluice.SharedTable.unlink(path)

    def test_keys_iterator_closed_under_it(self):
        """The regression: an iterator that outlives close().  Its next
        step raises ClosedError; before, it scanned the freed table."""
        t = sluice.Table("token-bucket 1/s", 10_000)
        for i in range(1000):
            t.try_acquire(f"key-{i}", 1, 0)
        it = t.keys(count=16)
        first = next(it)
        self.assertTrue(first[0].startswith(b"key-"))
        t.close()
        with self.assertRaises(sluice.ClosedError):
            for _ in range(1000):  # the rest of a batch may come, then it raises
                next(it)

    def test_keys_after_close_raises_at_once(self):
        t = sluice.Table("token-bucket 1/s", 10)
        t.close()
        with self.assertRaises(sluice.ClosedError):
            t.keys()

    def test_close_while_another_thread_waits(self):
        """close() from one thread while another blocks in acquire(): the
        waiter finishes on a live object, the object is freed after it,
        and later calls raise."""
        import time
        lim = sluice.Limiter("token-bucket 5/s burst=1")
        self.assertTrue(lim.try_acquire())
        got = []

        def wait():
            got.append(lim.acquire(1, timeout=30.0))  # granted within ~200 ms

        th = threading.Thread(target=wait)
        th.start()
        # until the waiter is counted in (the call holds the handle from
        # then on); bounded in time
        end = time.monotonic() + 30
        while not lim._calls and th.is_alive() and time.monotonic() < end:
            time.sleep(0.001)
        lim.close()
        th.join(30)
        self.assertFalse(th.is_alive())
        self.assertEqual(len(got), 1)  # a bool, not a crash
        with self.assertRaises(sluice.ClosedError):
            lim.try_acquire()


    def test_close_under_a_storm_of_calls(self):
        """close() while 4 threads decide as fast as they can on the
        object (the in-flight count takes no lock): every thread ends on
        ClosedError, nothing crashes (ASan: no use after free), and the
        handle is freed once the last call is out."""
        import time
        for make in (lambda: sluice.Limiter("token-bucket 1000000/s"),
                     lambda: sluice.Table("token-bucket 1000000/s", 64)):
            obj = make()
            keyed = isinstance(obj, sluice.Table)
            ends, started = [], threading.Barrier(5)

            def storm(i):
                started.wait(30)
                key = b"k%d" % i if i % 2 else "k%d" % i
                try:
                    for n in range(2_000_000):  # bounded; close() ends it far sooner
                        if keyed:
                            obj.try_acquire(key, 1, S + n) if n % 3 else obj.decide(key, 1, S + n)
                        else:
                            obj.try_acquire(1, S + n) if n % 3 else obj.decide(1, S + n)
                    ends.append("not closed")
                except sluice.ClosedError:
                    ends.append("closed")

            ths = [threading.Thread(target=storm, args=(i,)) for i in range(4)]
            for th in ths:
                th.start()
            started.wait(30)
            time.sleep(0.05)  # let the calls run (not a time bound: any wait works)
            obj.close()
            for th in ths:
                th.join(120)
            self.assertFalse(any(th.is_alive() for th in ths))
            self.assertEqual(ends, ["closed"] * 4)
            self.assertEqual(obj._calls, [])
            self.assertIsNone(obj._h)  # freed, by close() or by the last call out

    def test_a_refusal_for_a_full_table_leaves_no_error_behind(self):
        """The result structs are reused: an EFULL refusal's error does not
        show in the next decision."""
        t = sluice.Table("token-bucket 1/s", 1)
        self.assertTrue(t.try_acquire(b"a", 1, S))
        self.assertFalse(t.try_acquire(b"b", 1, S))
        self.assertEqual(t.decide(b"b", 1, S).error, sluice.EFULL)
        self.assertEqual(t.decide(b"a", 1, 3 * S).error, 0)
        self.assertFalse(t.try_acquire(b"b", 1, 3 * S))
        lim = sluice.Limiter("token-bucket 1/s")
        self.assertEqual(lim.decide(1, S).error, 0)
        self.assertEqual(lim.decide(1, S).error, 0)

    def test_a_decision_is_a_plain_result(self):
        """decide() builds its Result without __init__: it must be the
        same value as one built with it (fields, equality, hash, repr,
        frozen)."""
        import dataclasses
        r = sluice.Limiter("token-bucket 2/s burst=2").decide(1, S)
        want = sluice.Result(True, 0, 1, 0, 0)
        self.assertEqual(r, want)
        self.assertEqual(hash(r), hash(want))
        self.assertEqual(repr(r), repr(want))
        self.assertEqual(dataclasses.asdict(r), dataclasses.asdict(want))
        self.assertIs(type(r.allowed), bool)
        with self.assertRaises(dataclasses.FrozenInstanceError):
            r.allowed = False


class SharedTableArguments(unittest.TestCase):
    def setUp(self):
        self.path = f"/sluice-py-args-{os.getpid()}"
        sluice.SharedTable.unlink(self.path)

    def tearDown(self):
        sluice.SharedTable.unlink(self.path)

    def test_bad_spec_is_spec_error_as_table(self):
        for spec, token in [("token-bucket 10/s burts=5", "burts=5"),
                            ("leaky-buckt 1/s", "leaky-buckt")]:
            with self.subTest(spec=spec):
                with self.assertRaises(sluice.SpecError) as a:
                    sluice.Table(spec, 10)
                with self.assertRaises(sluice.SpecError) as b:
                    sluice.SharedTable(self.path, spec, 10)
                self.assertIn(token, str(b.exception))
                self.assertEqual(a.exception.code, b.exception.code)
        self.assertFalse(sluice.SharedTable.unlink(self.path))  # nothing was made

    def test_nul_in_spec_is_refused(self):
        """"token-bucket 10/s\\0burst=1" used to run as "token-bucket 10/s"."""
        for make in (lambda sp: sluice.Limiter(sp), lambda sp: sluice.Table(sp, 10),
                     lambda sp: sluice.SharedTable(self.path, sp, 10),
                     lambda sp: sluice.check_spec(sp)):
            with self.assertRaises(sluice.SpecError) as cm:
                make("token-bucket 10/s\0burst=1")
            self.assertIn("NUL byte at offset 17", str(cm.exception))
        with sluice.Limiter("token-bucket 10/s") as lim:
            with self.assertRaises(sluice.SpecError):
                lim.reconfigure("token-bucket 5/s\0")
            self.assertEqual(lim.spec, "token-bucket 10/s")
        self.assertFalse(sluice.SharedTable.unlink(self.path))

    def test_nul_in_path_is_refused(self):
        """"/name\\0junk" used to open "/name"."""
        for path in (self.path + "\0junk", (self.path + "\0junk").encode()):
            with self.assertRaises(ValueError) as cm:
                sluice.SharedTable(path, "token-bucket 10/s", 10)
            self.assertIn("NUL byte", str(cm.exception))
            with self.assertRaises(ValueError):
                sluice.SharedTable.unlink(path)
        self.assertFalse(sluice.SharedTable.unlink(self.path))

    def test_bytes_and_pathlike_paths(self):
        """str, bytes and os.PathLike name the same table."""
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "limits.tbl")
            with sluice.SharedTable(f, "fixed-window 3/1h", 8) as a, \
                    sluice.SharedTable(f.encode(), "fixed-window 3/1h", 8) as b, \
                    sluice.SharedTable(pathlib.Path(f), "fixed-window 3/1h", 8) as c:
                self.assertTrue(a.try_acquire("k", 1, S))
                self.assertTrue(b.try_acquire("k", 1, S))
                self.assertTrue(c.try_acquire("k", 1, S))
                self.assertFalse(a.try_acquire("k", 1, S))  # one limit of 3
                self.assertEqual(c.path, f)
            self.assertTrue(sluice.SharedTable.unlink(pathlib.Path(f)))
        with self.assertRaises(TypeError):
            sluice.SharedTable(17, "fixed-window 3/1h", 8)

    def test_other_spec_is_not_a_spec_error(self):
        with sluice.SharedTable(self.path, "token-bucket 5/s", 8):
            with self.assertRaises(sluice.SluiceError) as cm:
                sluice.SharedTable(self.path, "token-bucket 6/s", 8)
            self.assertNotIsInstance(cm.exception, sluice.SpecError)


class KeyErrorsRaise(unittest.TestCase):
    """A request the library does not decide raises; a first request for a
    fresh key is allowed.  So a long key either raises (the library refuses
    keys that long) or is admitted (a library that stores long keys by
    digest): never False."""

    def check_long_key(self, t, key):
        for call in (lambda: t.try_acquire(key, 1, S), lambda: t.decide(key, 1, S)):
            try:
                got = call()
            except sluice.SluiceError as e:
                self.assertEqual(e.code, sluice.EINVAL)
                self.assertIn(f"({len(key)} bytes) refused", str(e))
                self.assertIn("longer than the table's limit", str(e))
            else:
                self.assertTrue(got)  # fresh key, limit 10: admitted

    def test_table_long_key(self):
        with sluice.Table("token-bucket 10/s", 10) as t:
            self.check_long_key(t, b"x" * 65537)
            self.assertTrue(t.try_acquire(b"x" * 65536, 1, S))

    def test_shared_table_long_key(self):
        path = f"/sluice-py-long-{os.getpid()}"
        sluice.SharedTable.unlink(path)
        try:
            with sluice.SharedTable(path, "token-bucket 10/s", 8, max_key_bytes=4) as t:
                self.check_long_key(t, b"12345")
                self.assertTrue(t.try_acquire(b"1234", 1, S))
        finally:
            sluice.SharedTable.unlink(path)

    def test_full_table_is_a_refusal(self):
        """EFULL is the table's documented policy: a refusal, with the
        reason in Result.error; not an exception."""
        with sluice.Table("token-bucket 1/s", 1) as t:
            self.assertTrue(t.try_acquire("a", 1, 0))
            self.assertFalse(t.try_acquire("b", 1, 0))
            self.assertEqual(t.decide("b", 1, 0).error, sluice.EFULL)


if __name__ == "__main__":
    unittest.main()
