"""sluice -- exact in-process rate limiting, from Python.

A thin, stdlib-only binding (ctypes) over ``libsluice.so``: the decisions
are made by the C library, in nanoseconds, exactly as its contract says
(README.md of the sluice repository, "The algorithms").

    >>> import sluice
    >>> lim = sluice.Limiter("token-bucket 10/s burst=5")
    >>> lim.try_acquire()
    True
    >>> per_client = sluice.Table("sliding-window 100/1m", max_keys=100_000)
    >>> per_client.decide("10.0.0.7").allowed
    True

Finding the library: the environment variable ``SLUICE_LIBRARY`` (a path
to ``libsluice.so``), else the build tree this package sits in
(``build/libsluice.so`` two levels up), else the system's library path
(``ctypes.util.find_library("sluice")``).

Time: every call that decides takes an optional ``now_ns``, nanoseconds on
the caller's monotonic axis (the C library's ``_at`` functions).  Without
it the library reads CLOCK_MONOTONIC itself (:func:`now_ns`).

Errors: a call the library refuses raises :class:`SluiceError` (a bad spec
raises :class:`SpecError`, which is also a :class:`ValueError`), carrying
the library's code and its one-line message, which names the offending
token.  A refused *request* is not an error: it is a decision, with
``allowed`` False.

Threads: every object may be used from several threads, as the C library
allows; ctypes releases the GIL during each call.  Objects are freed by
:meth:`close` (or ``with``), or when garbage-collected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple, Union

__all__ = [
    "SluiceError",
    "SpecError",
    "Result",
    "Stats",
    "TableStats",
    "KeyState",
    "SpecInfo",
    "Limiter",
    "Table",
    "SharedTable",
    "check_spec",
    "parse_spec",
    "now_ns",
    "version",
    "library_path",
]

Key = Union[bytes, bytearray, memoryview, str]

# ---------------------------------------------------------------------------
# The library


def _candidates() -> Iterator[str]:
    env = os.environ.get("SLUICE_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    yield os.path.join(root, "build", "libsluice.so")
    found = ctypes.util.find_library("sluice")
    if found:
        yield found


def _load() -> Tuple[ctypes.CDLL, str]:
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError(
        "sluice: cannot load libsluice.so (set SLUICE_LIBRARY to its path); tried: "
        + ("; ".join(tried) if tried else "nothing")
    )


_lib, _path = _load()

_u64 = ctypes.c_uint64
_i64 = ctypes.c_int64
_size = ctypes.c_size_t
_char_p = ctypes.c_char_p
_void_p = ctypes.c_void_p


class _Result(ctypes.Structure):
    _fields_ = [
        ("allowed", ctypes.c_bool),
        ("wait_ns", _u64),
        ("remaining", _u64),
        ("retry_after_ns", _i64),
        ("error", ctypes.c_int32),
        ("reserved_", ctypes.c_uint32 * 3),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("requests_allowed", _u64),
        ("requests_denied", _u64),
        ("permits_allowed", _u64),
        ("permits_denied", _u64),
        ("probes", _u64),
        ("reserved_", _u64 * 4),
    ]


class _TableStats(ctypes.Structure):
    _fields_ = [
        ("keys", _u64),
        ("reclaimed", _u64),
        ("evicted", _u64),
        ("refused", _u64),
        ("decisions", _Stats),
        ("reserved_", _u64 * 4),
    ]


class _KeyState(ctypes.Structure):
    _fields_ = [("last_ns", _u64), ("rest_ns", _u64), ("reserved_", _u64 * 2)]


class _SpecInfo(ctypes.Structure):
    _fields_ = [
        ("algorithm", ctypes.c_int),
        ("clock", ctypes.c_int),
        ("limit", _u64),
        ("period_ns", _u64),
        ("capacity", _u64),
        ("slots", _u64),
        ("nodelay", ctypes.c_bool),
        ("reserved", _u64 * 4),
    ]


def _fn(name: str, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_R = ctypes.POINTER(_Result)
_strerror = _fn("sluice_strerror", _char_p, ctypes.c_int)
_version = _fn("sluice_version", _char_p)
_now = _fn("sluice_now_ns", _u64)
_spec_check = _fn("sluice_spec_check", ctypes.c_int, _char_p, _char_p, _size, _char_p, _size)
_spec_parse = _fn("sluice_spec_parse", ctypes.c_int, _char_p, ctypes.POINTER(_SpecInfo), _char_p, _size)
_alg_name = _fn("sluice_algorithm_name", _char_p, ctypes.c_int)

_lim_new = _fn("sluice_limiter_new", _void_p, _char_p, _char_p, _size)
_lim_free = _fn("sluice_limiter_free", None, _void_p)
_lim_try = _fn("sluice_try_acquire_at", ctypes.c_bool, _void_p, _u64, _u64, _R)
_lim_stats = _fn("sluice_limiter_stats_get", None, _void_p, ctypes.POINTER(_Stats))
_lim_format = _fn("sluice_limiter_spec_format", ctypes.c_int, _void_p, _char_p, _size)
_lim_reconf = _fn("sluice_limiter_reconfigure_at", ctypes.c_int, _void_p, _char_p, _u64, _char_p, _size)
_lim_set_limit = _fn("sluice_limiter_set_limit_at", ctypes.c_int, _void_p, _u64, _u64, _u64, _char_p, _size)
_lim_set_burst = _fn("sluice_limiter_set_burst_at", ctypes.c_int, _void_p, _u64, _u64, _char_p, _size)
_lim_acquire = _fn("sluice_acquire_cancellable", ctypes.c_int, _void_p, _u64, _u64, _void_p)

_tab_new = _fn("sluice_table_new_flags", _void_p, _char_p, _size, ctypes.c_uint, _char_p, _size)
_tab_free = _fn("sluice_table_free", None, _void_p)
_tab_try = _fn("sluice_table_try_acquire_at", ctypes.c_bool, _void_p, _char_p, _size, _u64, _u64, _R)
_tab_stats = _fn("sluice_table_stats_get", None, _void_p, ctypes.POINTER(_TableStats))
_tab_remove = _fn("sluice_table_remove", ctypes.c_int, _void_p, _char_p, _size)
_tab_reset = _fn("sluice_table_reset", ctypes.c_int, _void_p, _char_p, _size)
_tab_peek = _fn("sluice_table_peek_at", ctypes.c_int, _void_p, _char_p, _size, _u64, _u64, _R,
                ctypes.POINTER(_KeyState))

_tab_open = _fn("sluice_table_open", _void_p, _char_p, _char_p, _size, _size, ctypes.c_uint,
                _char_p, _size)
_tab_unlink = _fn("sluice_table_unlink", ctypes.c_int, _char_p)

_SCAN_FN = ctypes.CFUNCTYPE(ctypes.c_int, _void_p, _size, ctypes.POINTER(_KeyState), _void_p)
_tab_scan = _fn("sluice_table_scan", ctypes.c_int, _void_p, _u64, _size, _SCAN_FN, _void_p,
                ctypes.POINTER(_u64))

# The C library's codes (include/sluice/errors.h).
EINVAL, ENOMEM, ERANGE, EFULL, ENOSPC, ENOENT = -1, -2, -3, -4, -5, -6
EBUSY, ETIMEDOUT, EBACKEND, ECANCELED = -7, -8, -9, -10

_TABLE_EVICT_LRU = 1
_TABLE_RECLAIM_WHEN_FULL = 2
_ERRLEN = 256
_NEVER = (1 << 64) - 1

# ---------------------------------------------------------------------------
# Errors and values


class SluiceError(Exception):
    """A call the library refused.  ``code`` is the library's negative
    error code (``sluice.EINVAL`` ...), ``message`` its one-line reason."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SpecError(SluiceError, ValueError):
    """A spec the grammar refuses; the message names the offending token."""


def _error(code: int, buf: Optional[ctypes.Array] = None, spec: bool = False) -> SluiceError:
    text = buf.value.decode("utf-8", "replace") if buf is not None and buf.value else ""
    if not text:
        text = _strerror(code).decode()
    return (SpecError if spec and code in (EINVAL, ERANGE) else SluiceError)(code, text)


@dataclass(frozen=True)
class Result:
    """One decision (the C library's ``sluice_result``).

    allowed         the permits were granted.
    wait_ns         leaky-bucket shaper: how long to wait before proceeding.
    remaining       whole permits a request at the same instant could get.
    retry_after_ns  for a refusal, the least wait after which the same
                    request (with no other traffic) is allowed; -1 if none
                    can; 0 when allowed.
    error           0, or why the request could not be decided (e.g.
                    ``sluice.EFULL``: a full table).
    """

    allowed: bool
    wait_ns: int
    remaining: int
    retry_after_ns: int
    error: int = 0

    def __bool__(self) -> bool:
        return self.allowed


def _result(r: _Result) -> Result:
    return Result(bool(r.allowed), r.wait_ns, r.remaining, r.retry_after_ns, r.error)


@dataclass(frozen=True)
class Stats:
    """Counters since the object was made (exact).  A probe counts in
    ``probes`` only."""

    requests_allowed: int
    requests_denied: int
    permits_allowed: int
    permits_denied: int
    probes: int


def _stats(s: _Stats) -> Stats:
    return Stats(s.requests_allowed, s.requests_denied, s.permits_allowed,
                 s.permits_denied, s.probes)


@dataclass(frozen=True)
class TableStats:
    """A table's counters: keys held now, dropped at rest (reclaimed) or in
    use (evicted), requests refused because the table was full, and the
    decisions over all keys."""

    keys: int
    reclaimed: int
    evicted: int
    refused: int
    decisions: Stats


@dataclass(frozen=True)
class KeyState:
    """What a table holds for a key: its latest admission's time and the
    time from which it is back at rest (both 0 for a key not held)."""

    last_ns: int
    rest_ns: int


@dataclass(frozen=True)
class SpecInfo:
    """A parsed spec, defaults filled in (the C ``sluice_spec_info``)."""

    algorithm: str
    clock: str
    limit: int
    period_ns: int
    capacity: int
    slots: int
    nodelay: bool


def _key(key: Key) -> bytes:
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise TypeError(f"sluice: a key is bytes or str, not {type(key).__name__}")


def _spec_bytes(spec: str) -> bytes:
    if not isinstance(spec, str):
        raise TypeError(f"sluice: a spec is a str, not {type(spec).__name__}")
    return spec.encode("utf-8")


def _u64_arg(name: str, v: int, lo: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"sluice: {name} must be an int")
    if v < lo or v > _NEVER:
        raise ValueError(f"sluice: {name} must be in {lo} .. 2^64-1, not {v}")
    return v


def _time(now_ns: Optional[int]) -> int:
    return _now() if now_ns is None else _u64_arg("now_ns", now_ns)


# ---------------------------------------------------------------------------
# Functions


def now_ns() -> int:
    """CLOCK_MONOTONIC now, in nanoseconds, as the library reads it."""
    return _now()


def version() -> str:
    """The loaded library's version string."""
    return _version().decode()


def library_path() -> str:
    """The path of the libsluice.so this module loaded."""
    return _path


def check_spec(spec: str) -> str:
    """Check a spec; return its canonical form, or raise :class:`SpecError`
    naming the offending token."""
    canon = ctypes.create_string_buffer(128)
    err = ctypes.create_string_buffer(_ERRLEN)
    rc = _spec_check(_spec_bytes(spec), canon, len(canon), err, len(err))
    if rc != 0:
        raise _error(rc, err, spec=True)
    return canon.value.decode()


_CLOCKS = {0: "monotonic", 1: "coarse"}


def parse_spec(spec: str) -> SpecInfo:
    """Parse a spec into its values (:class:`SpecInfo`), or raise
    :class:`SpecError`."""
    info = _SpecInfo()
    err = ctypes.create_string_buffer(_ERRLEN)
    rc = _spec_parse(_spec_bytes(spec), ctypes.byref(info), err, len(err))
    if rc != 0:
        raise _error(rc, err, spec=True)
    return SpecInfo(_alg_name(info.algorithm).decode(), _CLOCKS.get(info.clock, str(info.clock)),
                    info.limit, info.period_ns, info.capacity, info.slots, bool(info.nodelay))


# ---------------------------------------------------------------------------
# Objects


class _Handle:
    """An owned C object: freed once, by close() or by the collector."""

    _free = None  # the C function that frees the handle

    def __init__(self, handle: int) -> None:
        self._h = handle
        self._lock = threading.Lock()

    def _handle(self) -> int:
        h = self._h
        if not h:
            raise SluiceError(EINVAL, f"sluice: the {type(self).__name__} is closed")
        return h

    def close(self) -> None:
        """Free the C object.  Idempotent; the object cannot be used after.
        No other thread may be using it at the time."""
        with self._lock:
            h, self._h = self._h, None
        if h:
            type(self)._free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_h", None):
            self.close()


class Limiter(_Handle):
    """One limit, from a spec such as ``"token-bucket 100/s burst=20"``
    (the grammar: README.md of the sluice repository, "The limit spec").
    Raises :class:`SpecError` for a bad spec."""

    _free = _lim_free

    def __init__(self, spec: str) -> None:
        err = ctypes.create_string_buffer(_ERRLEN)
        h = _lim_new(_spec_bytes(spec), err, len(err))
        if not h:
            raise _error(EINVAL if err.value else ENOMEM, err, spec=True)
        super().__init__(h)

    def decide(self, permits: int = 1, now_ns: Optional[int] = None) -> Result:
        """Ask for ``permits`` at ``now_ns``; the full decision.  permits = 0
        is a probe: always allowed, takes nothing."""
        r = _Result()
        _lim_try(self._handle(), _u64_arg("permits", permits), _time(now_ns), ctypes.byref(r))
        return _result(r)

    def try_acquire(self, permits: int = 1, now_ns: Optional[int] = None) -> bool:
        """Ask for ``permits`` at ``now_ns``: True if granted (and taken)."""
        return bool(_lim_try(self._handle(), _u64_arg("permits", permits), _time(now_ns), None))

    def acquire(self, permits: int = 1, timeout: Optional[float] = None) -> bool:
        """Block until ``permits`` are granted (True), or return False at
        once when they cannot be within ``timeout`` seconds (None: no
        timeout).  Sleeps on CLOCK_MONOTONIC, without the GIL."""
        t = _NEVER if timeout is None else int(max(0.0, timeout) * 1e9)
        rc = _lim_acquire(self._handle(), _u64_arg("permits", permits), t, None)
        if rc == 0:
            return True
        if rc == ETIMEDOUT:
            return False
        raise _error(rc)

    def stats(self) -> Stats:
        """The limiter's counters."""
        s = _Stats()
        _lim_stats(self._handle(), ctypes.byref(s))
        return _stats(s)

    @property
    def spec(self) -> str:
        """The canonical spec the limiter runs."""
        buf = ctypes.create_string_buffer(128)
        rc = _lim_format(self._handle(), buf, len(buf))
        if rc < 0:
            raise _error(rc)
        return buf.value.decode()

    def reconfigure(self, spec: str, now_ns: Optional[int] = None) -> None:
        """Change the spec at ``now_ns``, keeping what was admitted (same
        algorithm).  A bad spec raises :class:`SpecError` and changes
        nothing."""
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = _lim_reconf(self._handle(), _spec_bytes(spec), _time(now_ns), err, len(err))
        if rc != 0:
            raise _error(rc, err, spec=True)

    def set_limit(self, limit: int, period_ns: int, now_ns: Optional[int] = None) -> None:
        """Change only LIMIT/PERIOD (x/time/rate's SetLimitAt)."""
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = _lim_set_limit(self._handle(), _u64_arg("limit", limit), _u64_arg("period_ns", period_ns),
                            _time(now_ns), err, len(err))
        if rc != 0:
            raise _error(rc, err, spec=True)

    def set_burst(self, burst: int, now_ns: Optional[int] = None) -> None:
        """Change only the burst (token-bucket) or capacity (leaky-bucket)."""
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = _lim_set_burst(self._handle(), _u64_arg("burst", burst), _time(now_ns), err, len(err))
        if rc != 0:
            raise _error(rc, err, spec=True)


class Table(_Handle):
    """One limiter per key, for up to ``max_keys`` keys in bounded memory.

    ``evict_lru``: when full of keys in use, drop the least recently used
    key instead of refusing the new one.  ``reclaim_when_full``: drop keys
    at rest only when room is needed (exact for times out of order across
    keys until the table fills).  Keys are ``bytes`` or ``str`` (UTF-8)."""

    _free = _tab_free

    def __init__(self, spec: str, max_keys: int, *, evict_lru: bool = False,
                 reclaim_when_full: bool = False) -> None:
        flags = (_TABLE_EVICT_LRU if evict_lru else 0) | (
            _TABLE_RECLAIM_WHEN_FULL if reclaim_when_full else 0)
        if not isinstance(max_keys, int) or max_keys < 1:
            raise ValueError(f"sluice: max_keys must be a positive int, not {max_keys!r}")
        err = ctypes.create_string_buffer(_ERRLEN)
        h = _tab_new(_spec_bytes(spec), max_keys, flags, err, len(err))
        if not h:
            raise _error(EINVAL if err.value else ENOMEM, err, spec=True)
        super().__init__(h)

    def decide(self, key: Key, permits: int = 1, now_ns: Optional[int] = None) -> Result:
        """Ask for ``permits`` for ``key`` at ``now_ns``; the full decision.
        A key that cannot be decided is refused with ``error`` set (a key
        longer than 65536 bytes: ``sluice.EINVAL``; a full table:
        ``sluice.EFULL``)."""
        k = _key(key)
        r = _Result()
        _tab_try(self._handle(), k, len(k), _u64_arg("permits", permits), _time(now_ns), ctypes.byref(r))
        return _result(r)

    def try_acquire(self, key: Key, permits: int = 1, now_ns: Optional[int] = None) -> bool:
        """Ask for ``permits`` for ``key``: True if granted."""
        k = _key(key)
        return bool(_tab_try(self._handle(), k, len(k), _u64_arg("permits", permits), _time(now_ns), None))

    def peek(self, key: Key, permits: int = 0,
             now_ns: Optional[int] = None) -> Tuple[Result, Optional[KeyState]]:
        """What a request for ``permits`` would get, without making the key
        or changing anything; and the key's state (None when not held)."""
        k = _key(key)
        r = _Result()
        st = _KeyState()
        rc = _tab_peek(self._handle(), k, len(k), _u64_arg("permits", permits), _time(now_ns),
                       ctypes.byref(r), ctypes.byref(st))
        if rc == ENOENT:
            return _result(r), None
        if rc != 0:
            raise _error(rc)
        return _result(r), KeyState(st.last_ns, st.rest_ns)

    def remove(self, key: Key) -> bool:
        """Drop the key's state: True if it was held."""
        k = _key(key)
        rc = _tab_remove(self._handle(), k, len(k))
        if rc == ENOENT:
            return False
        if rc != 0:
            raise _error(rc)
        return True

    def reset(self, key: Key) -> None:
        """Put the key's limiter back at rest (as remove, idempotent)."""
        k = _key(key)
        rc = _tab_reset(self._handle(), k, len(k))
        if rc != 0:
            raise _error(rc)

    def keys(self, count: int = 256) -> Iterator[Tuple[bytes, KeyState]]:
        """Iterate over the held keys and their states, a bounded step of
        ``count`` places per C call (as Redis's SCAN): every key held for
        the whole iteration is given at least once."""
        h = self._handle()
        batch: list = []

        def each(kp, klen, st, _arg):
            batch.append((ctypes.string_at(kp, klen) if klen else b"",
                          KeyState(st.contents.last_ns, st.contents.rest_ns)))
            return 0

        cb = _SCAN_FN(each)
        cursor = 0
        while True:
            nxt = _u64(0)
            rc = _tab_scan(h, cursor, count, cb, None, ctypes.byref(nxt))
            if rc != 0:
                raise _error(rc)
            yield from batch
            batch.clear()
            cursor = nxt.value
            if cursor == 0:
                return

    def stats(self) -> TableStats:
        """The table's counters."""
        s = _TableStats()
        _tab_stats(self._handle(), ctypes.byref(s))
        return TableStats(s.keys, s.reclaimed, s.evicted, s.refused, _stats(s.decisions))


class SharedTable(Table):
    """A table that several processes share (gunicorn workers, a
    ``multiprocessing`` pool): every process that opens ``path`` with the
    same spec, ``max_keys``, ``max_key_bytes`` and policy decides on the
    same keys, so they share one limit, not one each.  ``path`` "/name" (one
    slash, at the start) is a POSIX shared memory object, anything else a
    file; the first process makes it.  Keys are at most ``max_key_bytes``
    long (a longer one is refused with ``sluice.EINVAL``).  Opening with
    another spec or size raises ``SluiceError`` naming both.  A process
    killed while deciding blocks no other (README.md, "Tables shared between
    processes").  Each process opens its own: a handle does not cross a
    fork or a pickle.  Everything else is as ``Table``."""

    def __init__(self, path: str, spec: str, max_keys: int, *, max_key_bytes: int = 64,
                 evict_lru: bool = False) -> None:
        if not isinstance(max_keys, int) or max_keys < 1:
            raise ValueError(f"sluice: max_keys must be a positive int, not {max_keys!r}")
        if not isinstance(max_key_bytes, int) or max_key_bytes < 0:
            raise ValueError(f"sluice: max_key_bytes must be an int >= 0, not {max_key_bytes!r}")
        err = ctypes.create_string_buffer(_ERRLEN)
        h = _tab_open(path.encode(), _spec_bytes(spec), max_keys, max_key_bytes,
                      _TABLE_EVICT_LRU if evict_lru else 0, err, len(err))
        if not h:
            raise _error(EINVAL if err.value else ENOMEM, err)
        _Handle.__init__(self, h)

    @staticmethod
    def unlink(path: str) -> bool:
        """Remove the name (processes that have it open keep using it):
        True if it existed."""
        rc = _tab_unlink(path.encode())
        if rc == ENOENT:
            return False
        if rc != 0:
            raise _error(rc)
        return True
