"""sluice -- exact in-process rate limiting, from Python.

A thin, stdlib-only binding (ctypes) over ``libsluice.so``: the decisions
are made by the C library, in nanoseconds, exactly as its contract says
(docs/spec.md of the sluice repository, "The algorithms").

    >>> import sluice
    >>> lim = sluice.Limiter("token-bucket 10/s burst=5")
    >>> lim.try_acquire()
    True
    >>> per_client = sluice.Table("sliding-window 100/1m", max_keys=100_000)
    >>> per_client.decide("10.0.0.7").allowed
    True

Finding the library: the ``libsluice.so`` bundled in the package (``pip
install`` builds and bundles it), else the environment variable
``SLUICE_LIBRARY`` (a path to ``libsluice.so``), else the build tree this
package sits in (``build/libsluice.so`` two levels up), else the system's
library path (``ctypes.util.find_library("sluice")``).

Time: every call that decides takes an optional ``now_ns``, nanoseconds on
the caller's monotonic axis (the C library's ``_at`` functions).  Without
it the library reads CLOCK_MONOTONIC itself (:func:`now_ns`).

Errors: a call the library refuses raises :class:`SluiceError` (a bad spec
raises :class:`SpecError`, which is also a :class:`ValueError`), carrying
the library's code and its one-line message, which names the offending
token.  A refused *request* is not an error: it is a decision, with
``allowed`` False.  A request the library could not decide (a key it
refuses, no memory) raises, from every method, and never reads as a
refusal; the one exception is a full table (``sluice.EFULL``), which is
the table's documented policy of refusing new keys: a refusal with
``Result.error == sluice.EFULL``.  Any method of a closed object raises
:class:`ClosedError`.

Threads: every object may be used from several threads, as the C library
allows; ctypes releases the GIL during each call.  Objects are freed by
:meth:`close` (or ``with``), or when garbage-collected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time as _time_module
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple, Union

__all__ = [
    "SluiceError",
    "SpecError",
    "ClosedError",
    "RateLimited",
    "Result",
    "Stats",
    "TableStats",
    "KeyState",
    "SpecInfo",
    "Limiter",
    "Reservation",
    "TableReservation",
    "Concurrency",
    "Permit",
    "Table",
    "SharedTable",
    "SharedConcurrency",
    "SharedPermit",
    "check_spec",
    "parse_spec",
    "now_ns",
    "version",
    "library_path",
    "limit",
]

Key = Union[bytes, bytearray, memoryview, str]

# ---------------------------------------------------------------------------
# The library


def _candidates() -> Iterator[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    # 1. the library bundled in the installed package (pip install, a wheel)
    bundled = os.path.join(here, "libsluice.so")
    if os.path.exists(bundled):
        yield bundled
    # 2. the one the environment names
    env = os.environ.get("SLUICE_LIBRARY")
    if env:
        yield env
    # 3. the build tree of the checkout this package sits in
    root = os.path.normpath(os.path.join(here, "..", "..", ".."))
    built = os.path.join(root, "build", "libsluice.so")
    if os.path.exists(built):
        yield built
    # 4. the system's library path
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


class _Reservation(ctypes.Structure):
    # include/sluice.h's sluice_reservation: the public fields, then the
    # private ones, mirrored so that the struct has the C size
    _fields_ = [
        ("permits", _u64),
        ("wait_ns", _u64),
        ("at_ns", _u64),
        ("limiter", _void_p),
        ("state", ctypes.c_uint32),
        ("t_ns_", _u64),
        ("d1_", _u64 * 2),
        ("cfg_", _void_p),
    ]


class _TableReservation(ctypes.Structure):
    # include/sluice.h's sluice_table_reservation, mirrored as above
    _fields_ = [
        ("permits", _u64),
        ("wait_ns", _u64),
        ("at_ns", _u64),
        ("table", _void_p),
        ("state", ctypes.c_uint32),
        ("kgen_", _u64),
        ("hash_", _u64),
        ("keylen_", ctypes.c_uint32),
        ("cfg_", ctypes.c_uint32),
        ("key_", _u64 * 2),
        ("t_ns_", _u64),
        ("d1_", _u64 * 2),
        ("serial_", _u64),
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

# The clock of a decision without now_ns: sluice_now_ns() reads
# CLOCK_MONOTONIC as tv_sec * 10^9 + tv_nsec (src/base/clock.c), and so does
# time.monotonic_ns() where Python says it reads that clock, without a
# ctypes call (a third of a try_acquire).  Elsewhere, the library's.
if _time_module.get_clock_info("monotonic").implementation == "clock_gettime(CLOCK_MONOTONIC)":
    _clock = _time_module.monotonic_ns
else:
    _clock = _now

_lim_new = _fn("sluice_limiter_new", _void_p, _char_p, _char_p, _size)
_lim_free = _fn("sluice_limiter_free", None, _void_p)
# The decisions take their sluice_result by address (an int: the cheapest
# argument ctypes converts), from the pool `_results` below.
_lim_try = _fn("sluice_try_acquire_at", ctypes.c_bool, _void_p, _u64, _u64, _void_p)
_lim_stats = _fn("sluice_limiter_stats_get", None, _void_p, ctypes.POINTER(_Stats))
_lim_format = _fn("sluice_limiter_spec_format", ctypes.c_int, _void_p, _char_p, _size)
_lim_reconf = _fn("sluice_limiter_reconfigure_at", ctypes.c_int, _void_p, _char_p, _u64, _char_p, _size)
_lim_set_limit = _fn("sluice_limiter_set_limit_at", ctypes.c_int, _void_p, _u64, _u64, _u64, _char_p, _size)
_lim_set_burst = _fn("sluice_limiter_set_burst_at", ctypes.c_int, _void_p, _u64, _u64, _char_p, _size)
_lim_acquire = _fn("sluice_acquire_cancellable", ctypes.c_int, _void_p, _u64, _u64, _void_p)
_lim_reserve = _fn("sluice_reserve_at", ctypes.c_bool, _void_p, _u64, _u64, _u64,
                   ctypes.POINTER(_Reservation), ctypes.POINTER(_Result))
_rv_cancel = _fn("sluice_reservation_cancel_at", ctypes.c_int, ctypes.POINTER(_Reservation), _u64)
_rv_settle = _fn("sluice_reservation_settle_at", ctypes.c_int, ctypes.POINTER(_Reservation),
                 _u64, _u64)

_tab_new = _fn("sluice_table_new_flags", _void_p, _char_p, _size, ctypes.c_uint, _char_p, _size)
_tab_free = _fn("sluice_table_free", None, _void_p)
_tab_try = _fn("sluice_table_try_acquire_at", ctypes.c_bool, _void_p, _char_p, _size, _u64, _u64,
               _void_p)
_tab_stats = _fn("sluice_table_stats_get", None, _void_p, ctypes.POINTER(_TableStats))
_tab_remove = _fn("sluice_table_remove", ctypes.c_int, _void_p, _char_p, _size)
_tab_reset = _fn("sluice_table_reset", ctypes.c_int, _void_p, _char_p, _size)
_tab_reserve = _fn("sluice_table_reserve_at", ctypes.c_bool, _void_p, _char_p, _size, _u64, _u64,
                   _u64, ctypes.POINTER(_TableReservation), _R)
_trv_cancel = _fn("sluice_table_reservation_cancel_at", ctypes.c_int,
                  ctypes.POINTER(_TableReservation), _u64)
_trv_settle = _fn("sluice_table_reservation_settle_at", ctypes.c_int,
                  ctypes.POINTER(_TableReservation), _u64, _u64)
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
    """A spec the grammar refuses; the message names the offending token.
    Raised by every constructor and reconfiguration (``Limiter``,
    ``Table``, ``SharedTable``, ``check_spec`` ...), also for a spec with a
    NUL byte in it."""


class ClosedError(SluiceError, ValueError):
    """A method called on an object after its :meth:`close` (as Python's
    files raise ValueError after close)."""


class RateLimited(Exception):
    """Raised by the :meth:`Limiter.limit` decorator when a call is
    refused (``block=False``, or the permits cannot be had within
    ``timeout``).  ``retry_after`` is the least wait in seconds after which
    the same call, with no other traffic, would be allowed (None: never,
    or not known: a blocking wait that timed out)."""

    def __init__(self, message: str, retry_after: Optional[float]) -> None:
        super().__init__(message)
        self.retry_after = retry_after


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


_object_new = object.__new__


def _result(r: _Result) -> Result:
    # Result(...) without its __init__, which sets each field of the frozen
    # dataclass through object.__setattr__ (a third of a decide()): the
    # same object (fields in __dict__; equality, hash and repr alike).
    res = _object_new(Result)
    res.__dict__.update(allowed=bool(r.allowed), wait_ns=r.wait_ns, remaining=r.remaining,
                        retry_after_ns=r.retry_after_ns, error=r.error)
    return res


# Idle result structs for the decisions, each with its address: a decision
# takes one (list.pop) and gives it back (list.append) instead of making a
# ctypes struct per call.  Both are single steps under the GIL (see
# "Objects" below), so each struct is held by one call at a time, whatever
# the threads (and a signal handler deciding in the middle of a decision
# takes another one).  The pool holds at most as many as were ever in use
# at once.  The library writes the whole struct on every decision; a struct
# goes back with `error` 0, as a new one is, so a stale error cannot read
# as this call's.
_results: list = []


def _new_result() -> Tuple[_Result, int]:
    r = _Result()
    return r, ctypes.addressof(r)


def _undecided(item: Tuple[_Result, int], key: Optional[bytes] = None) -> None:
    """After a refusal with res.error set: give the struct back (error
    cleared) and raise, unless the error is EFULL (a refusal by policy)."""
    code = item[0].error
    item[0].error = 0
    _results.append(item)
    if code != EFULL:
        raise _key_error(code, key) if key is not None else _error(code)


def _closed_error(obj) -> "ClosedError":
    return ClosedError(EINVAL, f"sluice: the {type(obj).__name__} is closed")


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
    if "\0" in spec:
        # C would read the spec only up to the NUL: refuse, never cut short.
        raise SpecError(EINVAL, f"sluice: NUL byte at offset {spec.index(chr(0))} of spec {spec!r}")
    return spec.encode("utf-8")


def _path_bytes(path) -> bytes:
    """A path as the C library takes it: str, bytes or os.PathLike, with no
    NUL byte (ValueError, as os.open says "embedded null byte")."""
    try:
        b = os.fsencode(os.fspath(path))
    except TypeError:
        raise TypeError(f"sluice: a path is str, bytes or os.PathLike, not "
                        f"{type(path).__name__}") from None
    if b"\0" in b:
        raise ValueError(f"sluice: NUL byte at offset {b.index(0)} of path {path!r}")
    if not b:
        raise ValueError("sluice: empty path")
    return b


def _key_error(code: int, key: bytes) -> SluiceError:
    """The exception for a decision the library could not make (res.error
    other than EFULL): it names the key, shortened."""
    shown = key[:40] + (b"..." if len(key) > 40 else b"")
    why = _strerror(code).decode()
    return SluiceError(code, f"sluice: key {shown!r} ({len(key)} bytes) refused: {why}")


def _u64_arg(name: str, v: int, lo: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"sluice: {name} must be an int")
    if v < lo or v > _NEVER:
        raise ValueError(f"sluice: {name} must be in {lo} .. 2^64-1, not {v}")
    return v


def _time(now_ns: Optional[int]) -> int:
    return _clock() if now_ns is None else _u64_arg("now_ns", now_ns)


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


_CLOCKS = {0: "monotonic", 1: "coarse", 2: "realtime"}


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
#
# Lifetime: a C object is freed exactly once, and never while a call is in
# it.  Every method takes the handle through _use() (which counts the call
# in), and gives it back in _done(); close() only marks the object closed,
# and whichever of close() and the last call in flight comes second frees
# it.  So close() from one thread while another thread is blocked in
# acquire(), or while a keys() iterator is between steps, is safe: the
# other call finishes on a live object, and the next one raises ClosedError.
#
# The count costs no lock (a lock taken twice per call doubled the cost of
# a try_acquire).  It is a list, `_calls`, one entry per call in flight:
# with CPython's GIL, list.append, list.pop and len() each run whole, with
# no other Python thread between their start and end (they are C functions
# that neither release the GIL nor run Python code), and a store to or a
# load of an attribute is one step too; what one thread did before it gave
# the GIL up, the next holder sees (the GIL's handover is a full barrier).
# So the steps of all threads run one at a time, in one order.  (An int
# counter would not do: `self._busy += 1` is a load, an add and a store,
# and a switch between them loses a count.)
#
#   a call:   A: _calls.append    B: load _closed (raise if set)
#             load _h, then the C call on it (GIL released)
#             C: _calls.pop       D: load _closed and len(_calls): both
#                                    "closed" and 0 -> _release()
#   close():  E: store _closed    F: len(_calls) == 0 -> _release()
#
# A call that went on to C loaded _closed False at B, so B came before E,
# and A before F: F sees the entry until C, which comes after the C call.
# So close() frees no handle under a call.  A call's D frees only after E
# (it saw _closed) with no entry left: every call that went on to C has
# popped.  A call that starts after E sees _closed at B and gives its entry
# back (raising ClosedError) without using the handle.  Two of them (or
# close() and a call) may both reach _release(): the lock there, taken only
# at the end of an object's life, frees the handle once.
#
# Free-threaded CPython (3.13t, no GIL) is not a target: there the steps of
# two threads may overlap and this argument does not hold (use a lock, as
# this binding did before).


class _Handle:
    """An owned C object: freed once, by close() or by the collector, and
    never under a call in flight."""

    _free = None  # the C function that frees the handle
    # the clock of a decision without now_ns: CLOCK_REALTIME (ns since the
    # Unix epoch) for a calendar quota (tz=), the monotonic one otherwise
    _clock = staticmethod(_clock)

    def _calendar(self, spec) -> None:
        info = _SpecInfo()
        if _spec_parse(_spec_bytes(spec), ctypes.byref(info), None, 0) == 0 and info.clock == 2:
            self._clock = _time_module.time_ns

    def _time(self, now_ns: Optional[int]) -> int:
        return self._clock() if now_ns is None else _u64_arg("now_ns", now_ns)

    def __init__(self, handle: int) -> None:
        self._lock = threading.Lock()  # _release and close only
        self._calls: list = []         # one entry per call in flight
        self._closed = False
        self._h = handle

    def _use(self) -> int:
        self._calls.append(None)
        if self._closed:
            self._done()
            raise _closed_error(self)
        return self._h

    def _done(self) -> None:
        calls = self._calls
        calls.pop()
        if self._closed and not calls:
            self._release()

    def _release(self) -> None:
        with self._lock:
            h, self._h = self._h, None
        if h:
            type(self)._free(h)

    def _call(self, fn, *args):
        """fn(handle, *args) with the handle held for the call."""
        h = self._use()
        try:
            return fn(h, *args)
        finally:
            self._done()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self) -> None:
        """Free the C object.  Idempotent; every method raises
        :class:`ClosedError` after it.  Safe while other threads are in a
        call on the object: the object is freed when the last one returns."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if not self._calls:
            self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_h", None) and not getattr(self, "_closed", True):
            self.close()


def _deadline(timeout: Optional[float]) -> Optional[int]:
    """now + timeout seconds, on the library's clock (None: no deadline)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout != timeout:
        raise TypeError(f"sluice: timeout must be a number of seconds or None, not {timeout!r}")
    return _now() + int(max(0.0, min(float(timeout), 1e10)) * 1e9)


def _next_wait(r: Result, deadline: Optional[int]) -> Optional[float]:
    """After a refusal: seconds to sleep before trying again, or None when
    no wait within the deadline can help (retry_after -1, or past it)."""
    if r.retry_after_ns < 0:
        return None
    wait = max(r.retry_after_ns, 1000)  # at least 1 us: never a busy loop
    if deadline is not None and _now() + r.retry_after_ns > deadline:
        return None
    return wait / 1e9


class Limiter(_Handle):
    """One limit, from a spec such as ``"token-bucket 100/s burst=20"``
    (the grammar: docs/spec.md of the sluice repository, "The limit spec").
    Raises :class:`SpecError` for a bad spec."""

    _free = _lim_free

    def __init__(self, spec: str) -> None:
        err = ctypes.create_string_buffer(_ERRLEN)
        h = _lim_new(_spec_bytes(spec), err, len(err))
        if not h:
            raise _error(EINVAL if err.value else ENOMEM, err, spec=True)
        super().__init__(h)
        self._calendar(spec)

    def __repr__(self) -> str:
        if self._closed:
            return "<sluice.Limiter closed>"
        return f"<sluice.Limiter {self.spec!r}>"

    def decide(self, permits: int = 1, now_ns: Optional[int] = None) -> Result:
        """Ask for ``permits`` at ``now_ns``; the full decision.  permits = 0
        is a probe: always allowed, takes nothing.  Raises
        :class:`SluiceError` when the library could not decide (no memory
        for a sliding-log's ring)."""
        if type(permits) is not int or not 0 <= permits <= _NEVER:
            permits = _u64_arg("permits", permits)
        if now_ns is None:
            now_ns = self._clock()
        elif type(now_ns) is not int or not 0 <= now_ns <= _NEVER:
            now_ns = _u64_arg("now_ns", now_ns)
        try:
            item = _results.pop()
        except IndexError:
            item = _new_result()
        calls = self._calls  # _use() and _done(), written out
        calls.append(None)
        try:
            if self._closed:
                raise _closed_error(self)
            _lim_try(self._h, permits, now_ns, item[1])
        finally:
            calls.pop()
            if self._closed and not calls:
                self._release()
        r = item[0]
        res = _result(r)  # before the struct goes back to the pool
        if r.error:
            _undecided(item)
            return res  # EFULL: not for a limiter, but a refusal if it were
        _results.append(item)
        return res

    def try_acquire(self, permits: int = 1, now_ns: Optional[int] = None) -> bool:
        """Ask for ``permits`` at ``now_ns``: True if granted (and taken).
        Raises as :meth:`decide`."""
        # The hot path: the checks of _u64_arg and the steps of _use() and
        # _done() written out (a call of a Python function costs as much as
        # the decision).  `type(x) is int` leaves bool and int subclasses to
        # _u64_arg, which refuses bool and takes the subclasses.
        if type(permits) is not int or not 0 <= permits <= _NEVER:
            permits = _u64_arg("permits", permits)
        if now_ns is None:
            now_ns = self._clock()
        elif type(now_ns) is not int or not 0 <= now_ns <= _NEVER:
            now_ns = _u64_arg("now_ns", now_ns)
        try:
            item = _results.pop()
        except IndexError:
            item = _new_result()
        calls = self._calls
        calls.append(None)
        try:
            if self._closed:
                raise _closed_error(self)
            ok = _lim_try(self._h, permits, now_ns, item[1])
        finally:
            calls.pop()
            if self._closed and not calls:
                self._release()
        if not ok and item[0].error:  # an admission has no error
            _undecided(item)
            return False  # EFULL: not for a limiter, but a refusal if it were
        _results.append(item)
        return ok

    def acquire(self, permits: int = 1, timeout: Optional[float] = None) -> bool:
        """Block until ``permits`` are granted (True), or return False at
        once when they cannot be within ``timeout`` seconds (None: no
        timeout).  Sleeps on CLOCK_MONOTONIC, without the GIL."""
        if timeout is None:
            t = _NEVER
        else:
            _deadline(timeout)  # type check
            t = int(max(0.0, min(float(timeout), 1e10)) * 1e9)
        rc = self._call(_lim_acquire, _u64_arg("permits", permits), t, None)
        if rc == 0:
            return True
        if rc == ETIMEDOUT:
            return False
        raise _error(rc)

    def reserve(self, permits: int = 1, max_wait: Optional[float] = 0.0,
                now_ns: Optional[int] = None) -> "Reservation":
        """Take ``permits`` now, to be used after a wait of at most
        ``max_wait`` seconds (None: any; token-bucket and leaky-bucket may
        go into debt for it, the windows never wait), and return the
        :class:`Reservation`; ``granted`` is False, with nothing taken,
        when it was refused.  Settle it with the real cost once known
        (:meth:`Reservation.settle`), or use it as a context manager::

            with lim.reserve(2000) as rv:   # an estimate
                used = call_the_model()
                rv.settle(used)             # the real cost
        """
        permits = _u64_arg("permits", permits)
        if max_wait is None:
            mw = _NEVER
        else:
            _deadline(max_wait)  # type check
            mw = int(max(0.0, min(float(max_wait), 1e10)) * 1e9)
        now = _time(now_ns)
        rv, r = _Reservation(), _Result()
        self._call(_lim_reserve, permits, now, mw, ctypes.byref(rv), ctypes.byref(r))
        if r.error:
            raise _error(r.error)
        return Reservation(self, rv, _result(r))

    async def acquire_async(self, permits: int = 1, timeout: Optional[float] = None) -> bool:
        """:meth:`acquire` for asyncio: waits with ``asyncio.sleep`` (the
        event loop runs other tasks meanwhile), for as long as each
        refusal's ``retry_after_ns`` says.  True when granted (after the
        leaky-bucket shaper's ``wait_ns``, awaited too); False, at once and
        taking nothing, when the permits cannot be had within ``timeout``
        seconds (None: no timeout) or ever (more than the capacity)."""
        import asyncio
        _u64_arg("permits", permits)
        deadline = _deadline(timeout)
        while True:
            r = self.decide(permits)
            if r.allowed:
                if r.wait_ns:
                    await asyncio.sleep(r.wait_ns / 1e9)
                return True
            wait = _next_wait(r, deadline)
            if wait is None:
                return False
            await asyncio.sleep(wait)

    def limit(self, permits: int = 1, *, block: bool = True,
              timeout: Optional[float] = None):
        """A decorator: each call of the decorated function (or coroutine
        function) first takes ``permits`` from this limiter.  ``block``:
        wait for them (:meth:`acquire`, or :meth:`acquire_async` for a
        coroutine function, so the event loop is not blocked) up to
        ``timeout`` seconds (None: as long as it takes); when they cannot be
        had in time, or at once with ``block=False``, the call raises
        :class:`RateLimited` and the function does not run.

            @lim.limit()                 # or @sluice.limit(lim)
            def fetch(url): ...

            @lim.limit(block=False)
            async def handler(request): ...
        """
        return _decorator(self, None, permits, block, timeout)

    def stats(self) -> Stats:
        """The limiter's counters."""
        s = _Stats()
        self._call(_lim_stats, ctypes.byref(s))
        return _stats(s)

    @property
    def spec(self) -> str:
        """The canonical spec the limiter runs."""
        buf = ctypes.create_string_buffer(128)
        rc = self._call(_lim_format, buf, len(buf))
        if rc < 0:
            raise _error(rc)
        return buf.value.decode()

    def reconfigure(self, spec: str, now_ns: Optional[int] = None) -> None:
        """Change the spec at ``now_ns``, keeping what was admitted (same
        algorithm).  A bad spec raises :class:`SpecError` and changes
        nothing."""
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = self._call(_lim_reconf, _spec_bytes(spec), self._time(now_ns), err, len(err))
        if rc != 0:
            raise _error(rc, err, spec=True)

    def set_limit(self, limit: int, period_ns: int, now_ns: Optional[int] = None) -> None:
        """Change only LIMIT/PERIOD (x/time/rate's SetLimitAt)."""
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = self._call(_lim_set_limit, _u64_arg("limit", limit), _u64_arg("period_ns", period_ns),
                        self._time(now_ns), err, len(err))
        if rc != 0:
            raise _error(rc, err, spec=True)

    def set_burst(self, burst: int, now_ns: Optional[int] = None) -> None:
        """Change only the burst (token-bucket) or capacity (leaky-bucket)."""
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = self._call(_lim_set_burst, _u64_arg("burst", burst), self._time(now_ns), err, len(err))
        if rc != 0:
            raise _error(rc, err, spec=True)


class Reservation:
    """Permits taken by :meth:`Limiter.reserve`.

    granted   the reservation was made (False: refused, nothing taken).
    permits   the permits taken (0 if refused).
    wait_ns   how long to wait before using them; at_ns: until when.
    result    the reservation's :class:`Result`.

    Settled once (:meth:`settle`) or cancelled once (:meth:`cancel`);
    after either, both raise :class:`SluiceError` with code ENOENT and
    change nothing.  As a context manager, one left without a settle is
    settled at its estimate, or at 0 when an exception leaves the block
    (the work failed: what can be given back goes back).  It holds its
    limiter, so the collector does not free it first; after the limiter's
    close(), both raise :class:`ClosedError`.  Not for two threads at
    once."""

    def __init__(self, lim: "Limiter", rv: _Reservation, result: Result) -> None:
        self._lim = lim
        self._rv = rv
        self._final = not result.allowed
        self.granted = result.allowed
        self.permits = rv.permits
        self.wait_ns = rv.wait_ns
        self.at_ns = rv.at_ns
        self.result = result

    def __repr__(self) -> str:
        state = "done" if self._final else "open"
        return f"<sluice.Reservation {self.permits} permits, {state}>"

    def _check_open(self, what: str) -> None:
        if self._final:
            why = "refused" if not self.granted else "already settled or cancelled"
            raise SluiceError(ENOENT, f"sluice: cannot {what}: the reservation was {why}")

    def settle(self, actual: int, now_ns: Optional[int] = None) -> None:
        """Charge the real cost ``actual`` once the work is done
        (docs/decisions.md of the sluice repository, "Settling a
        reservation"): below the estimate the difference goes back where
        that is exact; above it, the extra is charged at once, past the
        limit, and paid back before anything else passes.  Raises
        :class:`SluiceError` (ENOENT) for a second settle, one after a
        cancel or of a refused reservation; TypeError or ValueError for an
        ``actual`` that is not an int in 0 .. 2^64-1."""
        actual = _u64_arg("actual", actual)
        now = _time(now_ns)
        self._check_open("settle")
        rc = self._settle_c(actual, now)
        if rc != 0:
            raise _error(rc)
        self._final = True

    def cancel(self, now_ns: Optional[int] = None) -> bool:
        """Give the permits back before their time (token-bucket and
        leaky-bucket): True if they went back, False if their time had come
        (they count as used).  Either way the reservation is done.  Raises
        :class:`SluiceError`: ENOENT when it is done already, EINVAL for a
        window algorithm (which cannot give back; settle it instead)."""
        now = _time(now_ns)
        self._check_open("cancel")
        rc = self._cancel_c(now)
        if rc == EINVAL:
            raise SluiceError(EINVAL, "sluice: a window algorithm's reservation cannot be "
                                      "cancelled; settle it")
        self._final = True
        if rc not in (0, ENOENT):
            raise _error(rc)
        return rc == 0

    @property
    def done(self) -> bool:
        """True once settled, cancelled, or refused."""
        return self._final

    def _settle_c(self, actual: int, now: int) -> int:
        return self._lim._call(lambda h: _rv_settle(ctypes.byref(self._rv), actual, now))

    def _cancel_c(self, now: int) -> int:
        return self._lim._call(lambda h: _rv_cancel(ctypes.byref(self._rv), now))

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if not self._final:
            self.settle(0 if exc_type is not None else self.permits)


class TableReservation(Reservation):
    """Permits taken for a key by :meth:`Table.reserve`: a
    :class:`Reservation` (the same methods and rules) on the key's limiter
    (docs/tables.md of the sluice repository, "Reservations").  A settle or
    a cancel on a key removed, reset or evicted since changes nothing and
    raises :class:`SluiceError` (ENOENT).  The C reservation holds its
    table, so it may be settled after the table's close(); one collected
    while open is settled at its estimate (nothing changes) to let go of
    the table."""

    def _settle_c(self, actual: int, now: int) -> int:
        return _trv_settle(ctypes.byref(self._rv), actual, now)

    def _cancel_c(self, now: int) -> int:
        return _trv_cancel(ctypes.byref(self._rv), now)

    def __del__(self) -> None:
        rv = getattr(self, "_rv", None)
        if rv is not None and rv.table:  # still open in C (a probe's cancel keeps it)
            _trv_settle(ctypes.byref(rv), rv.permits, 0)


class Table(_Handle):
    """One limiter per key, for up to ``max_keys`` keys in bounded memory.

    ``evict_lru``: when full of keys in use, drop the least recently used
    key instead of refusing the new one.  ``reclaim_when_full``: drop keys
    at rest only when room is needed (exact for times out of order across
    keys until the table fills).  Keys are ``bytes`` or ``str`` (UTF-8).
    A full table refuses a new key (``Result.error == sluice.EFULL``, a
    refusal by policy); any other error of a decision raises."""

    _free = _tab_free

    def __init__(self, spec: str, max_keys: int, *, evict_lru: bool = False,
                 reclaim_when_full: bool = False) -> None:
        flags = (_TABLE_EVICT_LRU if evict_lru else 0) | (
            _TABLE_RECLAIM_WHEN_FULL if reclaim_when_full else 0)
        _max_keys_arg(max_keys)
        err = ctypes.create_string_buffer(_ERRLEN)
        h = _tab_new(_spec_bytes(spec), max_keys, flags, err, len(err))
        if not h:
            raise _error(EINVAL if err.value else ENOMEM, err, spec=True)
        super().__init__(h)
        self._calendar(spec)
        self._spec = check_spec(spec)
        self._max_keys = max_keys
        self.max_key_bytes = 65536  # SLUICE_MAX_KEY_BYTES

    def __repr__(self) -> str:
        if self._closed:
            return f"<sluice.{type(self).__name__} closed>"
        return (f"<sluice.{type(self).__name__} {self._spec!r} max_keys={self._max_keys} "
                f"keys={self.stats().keys}>")

    @property
    def spec(self) -> str:
        """The canonical spec the table's keys run (as given at creation)."""
        return self._spec

    def decide(self, key: Key, permits: int = 1, now_ns: Optional[int] = None) -> Result:
        """Ask for ``permits`` for ``key`` at ``now_ns``; the full decision.
        A full table refuses a new key with ``error`` set to
        ``sluice.EFULL``.  A key of any length is limited (a long one by
        its digest); a failure (no memory) raises :class:`SluiceError`:
        never a refusal."""
        k = key if type(key) is bytes else _key(key)
        if type(permits) is not int or not 0 <= permits <= _NEVER:
            permits = _u64_arg("permits", permits)
        if now_ns is None:
            now_ns = self._clock()
        elif type(now_ns) is not int or not 0 <= now_ns <= _NEVER:
            now_ns = _u64_arg("now_ns", now_ns)
        try:
            item = _results.pop()
        except IndexError:
            item = _new_result()
        calls = self._calls  # _use() and _done(), written out
        calls.append(None)
        try:
            if self._closed:
                raise _closed_error(self)
            _tab_try(self._h, k, len(k), permits, now_ns, item[1])
        finally:
            calls.pop()
            if self._closed and not calls:
                self._release()
        r = item[0]
        res = _result(r)
        if r.error:
            _undecided(item, k)
            return res  # EFULL: a refusal
        _results.append(item)
        return res

    def try_acquire(self, key: Key, permits: int = 1, now_ns: Optional[int] = None) -> bool:
        """Ask for ``permits`` for ``key``: True if granted.  Raises as
        :meth:`decide`."""
        # The hot path, as Limiter.try_acquire; bytes and str keys first.
        if type(key) is bytes:
            k = key
        elif type(key) is str:
            k = key.encode("utf-8")
        else:
            k = _key(key)
        if type(permits) is not int or not 0 <= permits <= _NEVER:
            permits = _u64_arg("permits", permits)
        if now_ns is None:
            now_ns = self._clock()
        elif type(now_ns) is not int or not 0 <= now_ns <= _NEVER:
            now_ns = _u64_arg("now_ns", now_ns)
        try:
            item = _results.pop()
        except IndexError:
            item = _new_result()
        calls = self._calls
        calls.append(None)
        try:
            if self._closed:
                raise _closed_error(self)
            ok = _tab_try(self._h, k, len(k), permits, now_ns, item[1])
        finally:
            calls.pop()
            if self._closed and not calls:
                self._release()
        if not ok and item[0].error:  # an admission has no error
            _undecided(item, k)
            return False  # EFULL: a refusal
        _results.append(item)
        return ok

    def acquire(self, key: Key, permits: int = 1, timeout: Optional[float] = None) -> bool:
        """Block until ``permits`` are granted for ``key`` (True), or return
        False, taking nothing, as soon as they cannot be within ``timeout``
        seconds (None: no timeout) -- each refusal's ``retry_after_ns``
        says how long to sleep, and whether the deadline can be met.  After
        an admission the leaky-bucket shaper's ``wait_ns`` is slept too.
        Sleeps release the GIL.  Raises as :meth:`decide`."""
        import time
        _u64_arg("permits", permits)
        deadline = _deadline(timeout)
        while True:
            r = self.decide(key, permits)
            if r.allowed:
                if r.wait_ns:
                    time.sleep(r.wait_ns / 1e9)
                return True
            wait = _next_wait(r, deadline)
            if wait is None:
                return False
            time.sleep(wait)

    async def acquire_async(self, key: Key, permits: int = 1,
                            timeout: Optional[float] = None) -> bool:
        """:meth:`acquire` for asyncio (``asyncio.sleep``: the event loop
        is not blocked)."""
        import asyncio
        _u64_arg("permits", permits)
        deadline = _deadline(timeout)
        while True:
            r = self.decide(key, permits)
            if r.allowed:
                if r.wait_ns:
                    await asyncio.sleep(r.wait_ns / 1e9)
                return True
            wait = _next_wait(r, deadline)
            if wait is None:
                return False
            await asyncio.sleep(wait)

    def limit(self, key, permits: int = 1, *, block: bool = True,
              timeout: Optional[float] = None):
        """A decorator, as :meth:`Limiter.limit`, limiting per key:
        ``key`` is a callable given the call's arguments that returns the
        key (``key=lambda request: request.remote_addr``), or a fixed key."""
        return _decorator(self, key, permits, block, timeout)

    def peek(self, key: Key, permits: int = 0,
             now_ns: Optional[int] = None) -> Tuple[Result, Optional[KeyState]]:
        """What a request for ``permits`` would get, without making the key
        or changing anything; and the key's state (None when not held)."""
        k = _key(key)
        r = _Result()
        st = _KeyState()
        rc = self._call(_tab_peek, k, len(k), _u64_arg("permits", permits), self._time(now_ns),
                        ctypes.byref(r), ctypes.byref(st))
        if rc == ENOENT:
            return _result(r), None
        if rc != 0:
            raise _key_error(rc, k)
        return _result(r), KeyState(st.last_ns, st.rest_ns)

    def reserve(self, key: Key, permits: int = 1, max_wait: Optional[float] = 0.0,
                now_ns: Optional[int] = None) -> "TableReservation":
        """:meth:`Limiter.reserve` on the limiter of ``key``: returns the
        :class:`TableReservation` (``granted`` False, nothing taken, when
        refused -- a full table's refusal included, ``result.error ==
        sluice.EFULL``); settle it with the real cost once known::

            with table.reserve(user, 2000) as rv:   # an estimate
                rv.settle(call_the_model())          # the real cost

        Raises for the errors of :meth:`decide` but EFULL.  On a
        :class:`SharedTable` the key is every process's (docs/tables.md,
        "Reservations"): settle or cancel it in the process that made it."""
        k = _key(key)
        permits = _u64_arg("permits", permits)
        if max_wait is None:
            mw = _NEVER
        else:
            _deadline(max_wait)  # type check
            mw = int(max(0.0, min(float(max_wait), 1e10)) * 1e9)
        now = self._time(now_ns)
        rv, r = _TableReservation(), _Result()
        self._call(_tab_reserve, k, len(k), permits, now, mw, ctypes.byref(rv), ctypes.byref(r))
        if r.error and r.error != EFULL:
            raise _error(r.error)
        return TableReservation(self, rv, _result(r))

    def remove(self, key: Key) -> bool:
        """Drop the key's state: True if it was held."""
        k = _key(key)
        rc = self._call(_tab_remove, k, len(k))
        if rc == ENOENT:
            return False
        if rc != 0:
            raise _key_error(rc, k)
        return True

    def reset(self, key: Key) -> None:
        """Put the key's limiter back at rest (as remove, idempotent)."""
        k = _key(key)
        rc = self._call(_tab_reset, k, len(k))
        if rc != 0:
            raise _key_error(rc, k)

    def keys(self, count: int = 256) -> Iterator[Tuple[bytes, KeyState]]:
        """Iterate over the held keys and their states, a bounded step of
        ``count`` places per C call (as Redis's SCAN): every key held for
        the whole iteration is given at least once.  Each step checks the
        table is open: after :meth:`close` the next step raises
        :class:`ClosedError`."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"sluice: count must be a positive int, not {count!r}")
        self._use()  # raise at the call, not at the first next(), when closed
        self._done()
        return self._scan(count)

    def _scan(self, count: int) -> Iterator[Tuple[bytes, KeyState]]:
        batch: list = []

        def each(kp, klen, st, _arg):
            batch.append((ctypes.string_at(kp, klen) if klen else b"",
                          KeyState(st.contents.last_ns, st.contents.rest_ns)))
            return 0

        cb = _SCAN_FN(each)
        cursor = 0
        while True:
            nxt = _u64(0)
            rc = self._call(_tab_scan, cursor, count, cb, None, ctypes.byref(nxt))
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
        self._call(_tab_stats, ctypes.byref(s))
        return TableStats(s.keys, s.reclaimed, s.evicted, s.refused, _stats(s.decisions))


def _max_keys_arg(max_keys) -> None:
    if not isinstance(max_keys, int) or isinstance(max_keys, bool) or max_keys < 1:
        raise ValueError(f"sluice: max_keys must be a positive int, not {max_keys!r}")


class SharedTable(Table):
    """A table that several processes share (gunicorn workers, a
    ``multiprocessing`` pool): every process that opens ``path`` with the
    same spec, ``max_keys``, ``max_key_bytes`` and policy decides on the
    same keys, so they share one limit, not one each.  ``path`` (str, bytes
    or os.PathLike) "/name" (one slash, at the start) is a POSIX shared
    memory object, anything else a file; the first process makes it.  A bad
    spec raises :class:`SpecError` (as ``Table``); a NUL byte in the spec
    raises :class:`SpecError`, in the path ValueError.  A key of up to
    ``max_key_bytes`` bytes is stored whole, a longer one by its keyed
    digest: every key is limited, whatever its length.  Opening with another
    spec or size raises ``SluiceError`` naming both.  A process killed
    while deciding blocks no other (docs/tables.md, "Tables shared between
    processes").  Each process opens its own: a handle does not cross a
    pickle.  Everything else is as ``Table``."""

    def __init__(self, path, spec: str, max_keys: int, *, max_key_bytes: int = 64,
                 evict_lru: bool = False) -> None:
        p = _path_bytes(path)
        canon = check_spec(spec)  # a bad spec: SpecError, as Table
        _max_keys_arg(max_keys)
        if not isinstance(max_key_bytes, int) or isinstance(max_key_bytes, bool) or max_key_bytes < 0:
            raise ValueError(f"sluice: max_key_bytes must be an int >= 0, not {max_key_bytes!r}")
        err = ctypes.create_string_buffer(_ERRLEN)
        h = _tab_open(p, _spec_bytes(spec), max_keys, max_key_bytes,
                      _TABLE_EVICT_LRU if evict_lru else 0, err, len(err))
        if not h:
            raise _error(EINVAL if err.value else ENOMEM, err)
        _Handle.__init__(self, h)
        self._calendar(spec)
        self._spec = canon
        self._max_keys = max_keys
        self.path = os.fsdecode(p)
        self.max_key_bytes = max_key_bytes

    def __repr__(self) -> str:
        if self._closed:
            return f"<sluice.SharedTable {self.path!r} closed>"
        return (f"<sluice.SharedTable {self.path!r} {self._spec!r} max_keys={self._max_keys} "
                f"max_key_bytes={self.max_key_bytes} keys={self.stats().keys}>")

    @staticmethod
    def unlink(path) -> bool:
        """Remove the name (processes that have it open keep using it):
        True if it existed."""
        rc = _tab_unlink(_path_bytes(path))
        if rc == ENOENT:
            return False
        if rc != 0:
            raise _error(rc)
        return True


# ---------------------------------------------------------------------------
# The decorator


def _decorator(obj, key, permits: int, block: bool, timeout: Optional[float]):
    import functools
    import inspect
    _u64_arg("permits", permits)
    if timeout is not None:
        _deadline(timeout)  # type check now, not at the first call
    keyed = isinstance(obj, Table)

    def key_of(args, kwargs):
        return key(*args, **kwargs) if callable(key) else key

    def wrap(fn):
        name = getattr(fn, "__qualname__", repr(fn))
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                k = (key_of(args, kwargs),) if keyed else ()
                if block:
                    if not await obj.acquire_async(*k, permits, timeout):
                        raise RateLimited(f"sluice: {name}: {permits} permit(s) not granted within "
                                          f"{timeout} s", None)
                else:
                    r = obj.decide(*k, permits)
                    if not r.allowed:
                        raise _limited(name, r)
                    if r.wait_ns:
                        import asyncio
                        await asyncio.sleep(r.wait_ns / 1e9)
                return await fn(*args, **kwargs)
            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            k = (key_of(args, kwargs),) if keyed else ()
            if block:
                if not obj.acquire(*k, permits, timeout):
                    raise RateLimited(f"sluice: {name}: {permits} permit(s) not granted within "
                                      f"{timeout} s", None)
            else:
                r = obj.decide(*k, permits)
                if not r.allowed:
                    raise _limited(name, r)
                if r.wait_ns:
                    import time
                    time.sleep(r.wait_ns / 1e9)
            return fn(*args, **kwargs)
        return wrapper

    return wrap


# ---------------------------------------------------------------------------
# Concurrency limits: permits held, released by a handle


class _PermitStruct(ctypes.Structure):
    _fields_ = [("permits", _u64), ("owner", _void_p), ("slot", ctypes.c_uint32),
                ("gen", ctypes.c_uint32)]


_PP = ctypes.POINTER(_PermitStruct)
_conc_new = _fn("sluice_concurrency_new", _void_p, _char_p, _char_p, _size)
_conc_free = _fn("sluice_concurrency_free", None, _void_p)
_conc_try = _fn("sluice_acquire_permit_at", ctypes.c_bool, _void_p, _u64, _u64, _PP, _R)
_conc_acquire = _fn("sluice_acquire_permit", ctypes.c_int, _void_p, _u64, _u64, _PP)
_conc_release = _fn("sluice_permit_release_at", ctypes.c_int, _PP, _u64)
_conc_held = _fn("sluice_concurrency_held_at", _u64, _void_p, _u64)
_conc_limit = _fn("sluice_concurrency_limit", _u64, _void_p)
_conc_format = _fn("sluice_concurrency_spec_format", ctypes.c_int, _void_p, _char_p, _size)


class Permit:
    """Permits held from a :class:`Concurrency`, until :meth:`release` (or
    the end of a ``with`` block, or the limit's lease).  ``permits`` is 0
    once released."""

    __slots__ = ("_conc", "_p")

    def __init__(self, conc: "Concurrency", p: _PermitStruct) -> None:
        self._conc = conc
        self._p = p

    @property
    def permits(self) -> int:
        return self._p.permits

    def release(self, now_ns: Optional[int] = None) -> bool:
        """Give the permits back: True, or False when this permit holds
        nothing any more (released already, or its lease ended: the permits
        went back by themselves).  Raises :class:`ClosedError` when the
        limit is closed."""
        now = _clock() if now_ns is None else _u64_arg("now_ns", now_ns)
        p = self._p
        rc = self._conc._call(lambda _h: _conc_release(ctypes.byref(p), now))
        if rc not in (0, ENOENT):
            raise _error(rc)
        return rc == 0

    def __enter__(self) -> "Permit":
        return self

    def __exit__(self, *exc) -> None:
        if self._p.permits and not self._conc.closed:
            self.release()

    def __repr__(self) -> str:
        return f"<sluice.Permit permits={self._p.permits}>"


class Concurrency(_Handle):
    """At most N permits held at once, from ``"concurrency N"`` or
    ``"concurrency N lease=30s"`` (docs/spec.md, "Concurrency limits").
    ``with lim.hold(): ...`` holds one permit for the block, waiting for it
    in arrival order.  Raises :class:`SpecError` for a bad spec."""

    _free = _conc_free

    def __init__(self, spec: str) -> None:
        err = ctypes.create_string_buffer(_ERRLEN)
        h = _conc_new(_spec_bytes(spec), err, len(err))
        if not h:
            raise _error(EINVAL if err.value else ENOMEM, err, spec=True)
        super().__init__(h)

    @property
    def spec(self) -> str:
        """The canonical spec."""
        buf = ctypes.create_string_buffer(128)
        self._call(_conc_format, buf, len(buf))
        return buf.value.decode()

    @property
    def limit(self) -> int:
        """N."""
        return self._call(_conc_limit)

    def held(self, now_ns: Optional[int] = None) -> int:
        """The permits held at ``now_ns`` (with a lease, after the leases
        ended by then went back)."""
        now = _clock() if now_ns is None else _u64_arg("now_ns", now_ns)
        return self._call(_conc_held, now)

    def __repr__(self) -> str:
        if self._closed:
            return "<sluice.Concurrency closed>"
        return f"<sluice.Concurrency {self.spec!r}>"

    def try_acquire(self, permits: int = 1, now_ns: Optional[int] = None) -> Optional[Permit]:
        """Take ``permits`` now, without waiting: a :class:`Permit`, or None
        when refused (at most N are held, and waiters come first)."""
        permits = _u64_arg("permits", permits)
        now = _clock() if now_ns is None else _u64_arg("now_ns", now_ns)
        p = _PermitStruct()
        r = _Result()
        ok = self._call(_conc_try, permits, now, ctypes.byref(p), ctypes.byref(r))
        if not ok:
            if r.error:
                raise _error(r.error)
            return None
        return Permit(self, p)

    def decide(self, permits: int = 1, now_ns: Optional[int] = None) -> Tuple[Result, Optional[Permit]]:
        """As :meth:`try_acquire`, with the decision's details: retry_after_ns
        of a refusal is the time until enough leases end (with a lease), or
        2^63-1 without one (only a release can help)."""
        permits = _u64_arg("permits", permits)
        now = _clock() if now_ns is None else _u64_arg("now_ns", now_ns)
        p = _PermitStruct()
        r = _Result()
        ok = self._call(_conc_try, permits, now, ctypes.byref(p), ctypes.byref(r))
        if r.error:
            raise _error(r.error)
        return _result(r), (Permit(self, p) if ok and permits else None)

    def acquire(self, permits: int = 1, timeout: Optional[float] = None) -> Optional[Permit]:
        """Wait until ``permits`` are held (a :class:`Permit`) or ``timeout``
        seconds have passed (None; None: no timeout).  Waiters are served in
        arrival order; waits without the GIL."""
        permits = _u64_arg("permits", permits, 1)
        if timeout is None:
            t = _NEVER
        else:
            _deadline(timeout)  # type check
            t = int(max(0.0, min(float(timeout), 1e10)) * 1e9)
        p = _PermitStruct()
        rc = self._call(_conc_acquire, permits, t, ctypes.byref(p))
        if rc == 0:
            return Permit(self, p)
        if rc == ETIMEDOUT:
            return None
        raise _error(rc)

    def hold(self, permits: int = 1, timeout: Optional[float] = None) -> Permit:
        """``with lim.hold(): ...``: wait for ``permits`` (as :meth:`acquire`)
        and hold them for the block.  Raises :class:`RateLimited` when they
        cannot be had within ``timeout``."""
        pm = self.acquire(permits, timeout)
        if pm is None:
            raise RateLimited(f"sluice: {self.spec}: no permit within {timeout} s", None)
        return pm


# ---------------------------------------------------------------------------
# Concurrency limits shared between processes (a named region)


class _RegionPermitStruct(ctypes.Structure):
    _fields_ = [("permits", _u64), ("owner", _void_p), ("shard", ctypes.c_uint32),
                ("slot", ctypes.c_uint32), ("holder", ctypes.c_uint32), ("gen", ctypes.c_uint32)]


_RPP = ctypes.POINTER(_RegionPermitStruct)
_creg_check = _fn("sluice_concurrency_spec_check", ctypes.c_int, _char_p, _char_p, _size, _char_p,
                  _size)
_creg_open = _fn("sluice_concurrency_region_open", _void_p, _char_p, _char_p, _size, _char_p, _size)
_creg_free = _fn("sluice_concurrency_region_free", None, _void_p)
_creg_try = _fn("sluice_concurrency_region_acquire_at", ctypes.c_bool, _void_p, _char_p, _size,
                _u64, _u64, _RPP, _R)
_creg_acquire = _fn("sluice_concurrency_region_acquire", ctypes.c_int, _void_p, _char_p, _size,
                    _u64, _u64, _RPP, _R)
_creg_release = _fn("sluice_region_permit_release_at", ctypes.c_int, _RPP, _u64)
_creg_held = _fn("sluice_concurrency_region_held_at", _u64, _void_p, _char_p, _size, _u64)
_creg_waiting = _fn("sluice_concurrency_region_waiting", ctypes.c_uint32, _void_p, _char_p, _size)


class SharedPermit(Permit):
    """Permits of one key held from a :class:`SharedConcurrency`, until
    :meth:`release` (or the end of a ``with`` block, or the lease, or the
    death of the process that took them: the region gives a dead holder's
    permits back).  As :class:`Permit`."""

    __slots__ = ()

    def release(self, now_ns: Optional[int] = None) -> bool:
        """Give the permits back: True, or False when this permit holds
        nothing any more (released already, or they went back by
        themselves).  Raises :class:`ClosedError` when the region's handle
        is closed."""
        now = _now() if now_ns is None else _u64_arg("now_ns", now_ns)
        p = self._p
        rc = self._conc._call(lambda _h: _creg_release(ctypes.byref(p), now))
        if rc not in (0, ENOENT):
            raise _error(rc)
        return rc == 0

    def __repr__(self) -> str:
        return f"<sluice.SharedPermit permits={self._p.permits}>"


class SharedConcurrency(_Handle):
    """Concurrency limits per key that several processes share (gunicorn
    workers, a ``multiprocessing`` pool): at most N permits of a key held by
    all the processes that open ``path`` with the same spec
    (``"concurrency N [lease=D]"``, N at most 65536) and ``max_keys``.
    ``path`` as :class:`SharedTable`'s ("/name": POSIX shared memory, else
    a file; the first process makes it).  ``with c.hold(key): ...`` holds a
    permit of ``key`` for the block, waiting for a release by any process.
    A process that dies holding permits gives them back (docs/tables.md,
    "Concurrency limits in a shared region").  A bad spec raises
    :class:`SpecError`; another spec or size on the same path, or N above
    65536, :class:`SluiceError`.  Each process opens its own: a handle does
    not cross a pickle.  Times are CLOCK_MONOTONIC's (every process of a
    region must pass the same clock's)."""

    _free = _creg_free

    def __init__(self, path, spec: str, max_keys: int) -> None:
        p = _path_bytes(path)
        canon = ctypes.create_string_buffer(128)
        err = ctypes.create_string_buffer(_ERRLEN)
        rc = _creg_check(_spec_bytes(spec), canon, len(canon), err, len(err))
        if rc != 0:
            raise _error(rc, err, spec=True)
        _max_keys_arg(max_keys)
        h = _creg_open(p, _spec_bytes(spec), max_keys, err, len(err))
        if not h:
            raise _error(EINVAL if err.value else ENOMEM, err)
        super().__init__(h)
        self._spec = canon.value.decode()
        self._limit = int(self._spec.split()[1])
        self._max_keys = max_keys
        self.path = os.fsdecode(p)

    @property
    def spec(self) -> str:
        """The canonical spec."""
        return self._spec

    @property
    def limit(self) -> int:
        """N, per key."""
        return self._limit

    def __repr__(self) -> str:
        if self._closed:
            return f"<sluice.SharedConcurrency {self.path!r} closed>"
        return f"<sluice.SharedConcurrency {self.path!r} {self._spec!r} max_keys={self._max_keys}>"

    unlink = staticmethod(SharedTable.unlink)

    def decide(self, key: Key, permits: int = 1,
               now_ns: Optional[int] = None) -> Tuple[Result, Optional[SharedPermit]]:
        """Take ``permits`` of ``key`` now, without waiting: the decision and
        a :class:`SharedPermit` (None when refused, or for 0 permits).  A
        new key refused for want of room is a refusal with ``error ==
        sluice.EFULL``; other errors raise."""
        k = _key(key)
        permits = _u64_arg("permits", permits)
        now = _now() if now_ns is None else _u64_arg("now_ns", now_ns)
        p = _RegionPermitStruct()
        r = _Result()
        ok = self._call(_creg_try, k, len(k), permits, now, ctypes.byref(p), ctypes.byref(r))
        if r.error and r.error != EFULL:
            raise _key_error(r.error, k)
        return _result(r), (SharedPermit(self, p) if ok and permits else None)

    def try_acquire(self, key: Key, permits: int = 1,
                    now_ns: Optional[int] = None) -> Optional[SharedPermit]:
        """As :meth:`decide`: the permit, or None when refused."""
        return self.decide(key, permits, now_ns)[1]

    def acquire(self, key: Key, permits: int = 1,
                timeout: Optional[float] = None) -> Optional[SharedPermit]:
        """Wait until ``permits`` of ``key`` are held (a
        :class:`SharedPermit`) or ``timeout`` seconds have passed (None;
        None: no timeout), without the GIL.  A release by any process wakes
        one waiter; roughly arrival order, not a strict queue
        (docs/decisions.md 3.9).  Raises :class:`SluiceError` for permits
        above N, or a new key with no room in the region (not waited
        for)."""
        k = _key(key)
        permits = _u64_arg("permits", permits, 1)
        if timeout is None:
            t = _NEVER
        else:
            _deadline(timeout)  # type check
            t = int(max(0.0, min(float(timeout), 1e10)) * 1e9)
        p = _RegionPermitStruct()
        rc = self._call(_creg_acquire, k, len(k), permits, t, ctypes.byref(p), None)
        if rc == 0:
            return SharedPermit(self, p)
        if rc == ETIMEDOUT:
            return None
        raise _key_error(rc, k)

    def hold(self, key: Key, permits: int = 1, timeout: Optional[float] = None) -> SharedPermit:
        """``with c.hold(key): ...``: wait for ``permits`` of ``key`` (as
        :meth:`acquire`) and hold them for the block.  Raises
        :class:`RateLimited` when they cannot be had within ``timeout``."""
        pm = self.acquire(key, permits, timeout)
        if pm is None:
            raise RateLimited(f"sluice: {self._spec}: no permit of key {_key(key)[:40]!r} "
                              f"within {timeout} s", None)
        return pm

    def held(self, key: Key, now_ns: Optional[int] = None) -> int:
        """The permits ``key`` holds, in every process (dead holders'
        count until a sweep gives them back)."""
        k = _key(key)
        now = _now() if now_ns is None else _u64_arg("now_ns", now_ns)
        return self._call(_creg_held, k, len(k), now)

    def waiting(self, key: Key) -> int:
        """The acquirers blocked on ``key`` in every process (an upper
        bound: one killed while waiting still counts for a while)."""
        k = _key(key)
        return self._call(_creg_waiting, k, len(k))


def _limited(name: str, r: Result) -> RateLimited:
    after = None if r.retry_after_ns < 0 else r.retry_after_ns / 1e9
    why = "never (more than the capacity)" if after is None else f"retry after {after:.6f} s"
    return RateLimited(f"sluice: {name}: rate limited, {why}", after)


def limit(obj, permits: int = 1, *, key=None, block: bool = True,
          timeout: Optional[float] = None):
    """``@sluice.limit(lim)``: the same as ``@lim.limit()`` (a Limiter), or
    ``@sluice.limit(table, key=...)`` for a Table."""
    if isinstance(obj, Table):
        if key is None:
            raise TypeError("sluice.limit: a Table needs key= (a callable or a fixed key)")
        return obj.limit(key, permits, block=block, timeout=timeout)
    if not isinstance(obj, Limiter):
        raise TypeError(f"sluice.limit: a Limiter or a Table, not {type(obj).__name__}")
    if key is not None:
        raise TypeError("sluice.limit: key= is for a Table")
    return obj.limit(permits, block=block, timeout=timeout)
