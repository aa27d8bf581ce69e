"""sluice as a storage backend of the ``limits`` package (2.8), and so of
Flask-Limiter and SlowAPI: ``sluice://`` URIs.

    import sluice.limits_storage          # registers the "sluice" scheme
    limiter = flask_limiter.Limiter(get_remote_address, app=app,
        storage_uri="sluice:///sluice-flask?max_keys=100000",
        strategy="moving-window")          # or "fixed-window"

``limits`` registers a storage class by its STORAGE_SCHEME when the class is
defined, so the import above must run before the URI is used.

URI: ``sluice:///NAME[?OPTIONS]``.  NAME is where the tables live, shared by
every process that uses the same URI (the workers of gunicorn, uWSGI, a
multiprocessing pool): ``/name`` (one component) is a POSIX shared memory
object, a longer path a file.  ``sluice://`` with no NAME keeps the tables
in this process only.  OPTIONS: ``max_keys`` (keys held per limit, default
10000), ``max_key_bytes`` (default 128: a longer key is stored as its
SHA-256), ``evict=lru`` (a full table drops its least recently used key
instead of refusing new keys).  Every process must give the same URI.

How limits maps onto sluice -- each RateLimitItem (amount L per W seconds)
gets its own table, ``NAME.fixed-window-L-Ws`` or ``NAME.sliding-log-L-Ws``,
one limiter per key; time is the wall clock (``time.time_ns()``), as limits'
own storages use, so windows are on the Unix epoch:

  strategy "fixed-window"  ->  sluice ``fixed-window L/Ws``.  incr() is a
      decision: admitted, it returns the window's count; refused, the count
      plus the amount asked (more than L, so limits refuses), and charges
      nothing.  Windows are aligned: [kW, (k+1)W) from the epoch ("50 per
      hour" restarts at the top of each UTC hour), where limits' memory and
      Redis storages start a key's window at its first hit.  L is read from
      the key (limits builds it as ".../L/MULTIPLES/GRANULARITY"), which
      incr() does not otherwise get; a key not of that form is refused
      (ValueError).  get() is the window's count, get_expiry() its end.
  strategy "moving-window" ->  sluice ``sliding-log L/Ws``, exact: a hit is
      admitted iff the hits admitted in (t - W, t], plus its cost, are at
      most L (limits' memory storage counts [t - W, t]: the two differ only
      for a hit exactly W after another, to the nanosecond).
      get_moving_window() gives the oldest admitted hit in the window (from
      the wait the next hit would need) and the count.
  strategy "fixed-window-elastic-expiry" -> refused (NotImplementedError):
      a window that every hit extends is no sluice algorithm.

A full table (max_keys keys, none at rest) refuses hits for new keys (fail
closed) unless ``evict=lru``.  clear(key) resets the key in the tables of
its limit; reset() removes every key of every table of this NAME, and
returns how many.  Costs: a sliding-log key holds L timestamps, reserved for
every key of its table: L * 8 * max_keys bytes per limit.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import urllib.parse
from typing import Dict, Optional, Tuple

from limits.errors import ConfigurationError
from limits.limits import TIME_TYPES
from limits.storage import MovingWindowSupport, Storage

import sluice

__all__ = ["SluiceStorage"]

_FIXED = "fixed-window"
_MOVING = "sliding-log"


def _parse_limit_key(key: str) -> Tuple[int, int]:
    """(amount, period in seconds) from a key limits built with key_for():
    ".../AMOUNT/MULTIPLES/GRANULARITY"."""
    parts = key.rsplit("/", 3)
    if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit() and parts[3] in TIME_TYPES:
        return int(parts[1]), int(parts[2]) * TIME_TYPES[parts[3]].seconds
    raise ValueError(f"sluice storage: key {key[:80]!r} is not a limits key "
                     "(.../AMOUNT/MULTIPLES/GRANULARITY): its limit is unknown")


class SluiceStorage(Storage, MovingWindowSupport):
    """limits storage on sluice tables (the module's doc says what maps)."""

    STORAGE_SCHEME = ["sluice"]

    def __init__(self, uri: Optional[str] = None, **options) -> None:
        u = urllib.parse.urlsplit(uri or "sluice://")
        if u.scheme != "sluice":
            raise ConfigurationError(f"sluice storage: scheme {u.scheme!r}, not 'sluice'")
        if u.netloc:
            raise ConfigurationError(f"sluice storage: {uri!r} names a host {u.netloc!r}: "
                                     "write sluice:///NAME (three slashes)")
        self.name = urllib.parse.unquote(u.path) or None
        if self.name is not None and (self.name == "/" or "\0" in self.name):
            raise ConfigurationError(f"sluice storage: bad name {self.name!r} in {uri!r}")
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True, strict_parsing=False))
        q.update({k: str(v) for k, v in options.items()})
        self.max_keys = self._int_option(q, "max_keys", 10000, 1)
        self.max_key_bytes = self._int_option(q, "max_key_bytes", 128, 40)
        evict = q.pop("evict", "none")
        if evict not in ("none", "lru"):
            raise ConfigurationError(f"sluice storage: evict={evict!r}: want none or lru")
        self.evict_lru = evict == "lru"
        if q:
            raise ConfigurationError(f"sluice storage: unknown option {sorted(q)[0]!r} in {uri!r} "
                                     "(want max_keys, max_key_bytes, evict)")
        self._tables: Dict[Tuple[str, int, int], sluice.Table] = {}
        self._tables_lock = threading.Lock()
        super().__init__(uri, **options)

    @staticmethod
    def _int_option(q, name, default, lo):
        v = q.pop(name, None)
        if v is None:
            return default
        if not v.isdigit() or int(v) < lo:
            raise ConfigurationError(f"sluice storage: {name}={v!r}: want an integer >= {lo}")
        return int(v)

    def __repr__(self) -> str:
        return (f"<sluice.limits_storage.SluiceStorage {self.name or '(this process)'} "
                f"max_keys={self.max_keys} tables={len(self._tables)}>")

    # -- tables --

    def _table_path(self, kind: str, amount: int, seconds: int) -> str:
        return f"{self.name}.{kind}-{amount}-{seconds}s"

    def _table(self, kind: str, amount: int, seconds: int) -> sluice.Table:
        k = (kind, amount, seconds)
        t = self._tables.get(k)
        if t is not None:
            return t
        with self._tables_lock:
            t = self._tables.get(k)
            if t is None:
                spec = f"{kind} {amount}/{seconds}s"
                if self.name is None:
                    t = sluice.Table(spec, self.max_keys, evict_lru=self.evict_lru)
                else:
                    t = sluice.SharedTable(self._table_path(kind, amount, seconds), spec,
                                           self.max_keys, max_key_bytes=self.max_key_bytes,
                                           evict_lru=self.evict_lru)
                self._tables[k] = t
            return t

    def _existing_tables(self):
        """The tables of this NAME: those this process opened, and for a
        shared NAME those another process made (found by their names)."""
        found = set(self._tables)
        if self.name is not None:
            if self.name.count("/") == 1:
                d, prefix = "/dev/shm", self.name[1:] + "."
            else:
                d, prefix = os.path.dirname(self.name), os.path.basename(self.name) + "."
            try:
                names = os.listdir(d)
            except OSError:
                names = []
            for n in names:
                if not n.startswith(prefix) or not n.endswith("s"):
                    continue
                kind, _, rest = n[len(prefix):].rpartition("-")
                kind, _, amount = kind.rpartition("-")
                if kind in (_FIXED, _MOVING) and amount.isdigit() and rest[:-1].isdigit():
                    found.add((kind, int(amount), int(rest[:-1])))
        return sorted(found)

    def _key(self, key: str) -> bytes:
        b = key.encode("utf-8")
        if len(b) > self.max_key_bytes:
            b = b"\0sha256:" + hashlib.sha256(b).digest()  # 40 bytes
        return b

    @staticmethod
    def _now() -> int:
        return time.time_ns()

    # -- fixed window --

    def incr(self, key: str, expiry: int, elastic_expiry: bool = False, amount: int = 1) -> int:
        if elastic_expiry:
            raise NotImplementedError("sluice storage: the fixed-window-elastic-expiry strategy "
                                      "has no exact sluice algorithm; use fixed-window or "
                                      "moving-window")
        limit, seconds = _parse_limit_key(key)
        if seconds != int(expiry):
            raise ValueError(f"sluice storage: key {key[:80]!r} says {seconds} s, expiry {expiry}")
        if limit == 0:
            return amount
        r = self._table(_FIXED, limit, seconds).decide(self._key(key), amount, self._now())
        count = limit - r.remaining  # admitted in the window, this hit included if allowed
        return count if r.allowed else count + amount

    def get(self, key: str) -> int:
        limit, seconds = _parse_limit_key(key)
        if limit == 0:
            return 0
        r, _ = self._table(_FIXED, limit, seconds).peek(self._key(key), 0, self._now())
        return limit - r.remaining

    def get_expiry(self, key: str) -> int:
        """The end of the key's current window, in seconds since the epoch."""
        _, seconds = _parse_limit_key(key)
        w = seconds * 1_000_000_000
        return (self._now() // w + 1) * w // 1_000_000_000

    # -- moving window --

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if limit == 0:
            return amount == 0
        t = self._table(_MOVING, int(limit), int(expiry))
        return t.decide(self._key(key), amount, self._now()).allowed

    def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[int, int]:
        now = self._now()
        if limit == 0:
            return now // 1_000_000_000, 0
        t = self._table(_MOVING, int(limit), int(expiry))
        k = self._key(key)
        r, _ = t.peek(k, 0, now)
        count = limit - r.remaining
        if count == 0:
            return now // 1_000_000_000, 0
        # One permit more than remain must wait for the oldest admitted hit
        # to leave the window, at oldest + W.
        r, _ = t.peek(k, r.remaining + 1, now)
        oldest = now + max(r.retry_after_ns, 0) - int(expiry) * 1_000_000_000
        return oldest // 1_000_000_000, count

    # -- the rest --

    @property
    def base_exceptions(self):
        """What a failing call raises (limits 3 asks every storage)."""
        return sluice.SluiceError

    def check(self) -> bool:
        """Healthy: every table this process has open answers."""
        try:
            for t in list(self._tables.values()):
                t.stats()
            return True
        except sluice.SluiceError:
            return False

    def clear(self, key: str) -> None:
        limit, seconds = _parse_limit_key(key)
        for kind, a, s in self._existing_tables():
            if (a, s) == (limit, seconds):
                self._table(kind, a, s).reset(self._key(key))

    def reset(self) -> Optional[int]:
        """Remove every key of every table of this NAME; how many."""
        n = 0
        for kind, a, s in self._existing_tables():
            t = self._table(kind, a, s)
            for k, _ in list(t.keys()):
                n += t.remove(k)
        return n

    def close(self) -> None:
        """Close this process's handles (the shared tables stay)."""
        with self._tables_lock:
            tables, self._tables = list(self._tables.values()), {}
        for t in tables:
            t.close()
