#!/usr/bin/python3
"""calendar_ref.py -- calendar windows against Python's zoneinfo.

The model here is written apart from the library (alg/calendar.c,
base/tzif.c): it reads the same tzdata through the standard library's
zoneinfo and finds each window's start as the first instant whose local
time reaches the window's first midnight, by datetime arithmetic, folds
and, in a DST gap, a search over seconds.  It asks the C tool
(test_calendar --windows) for the window of many instants and compares:

  - 60 zones (the tricky ones by name: midnight DST changes, 30-minute
    DST, negative DST, 2-hour DST; the rest a seeded sample), instants
    spread over 2000-2040, for d, w, month, 3month, 12month, y and
    anchors 1, 29, 30, 31;
  - every DST change from 2000 to 2040 of 10 zones, with instants around
    each (-1 day, -1 h, -1 s, at it, +1 s, +1 h);
  - leap years: 28 and 29 February and 1 March of 2000-2040.

Usage: calendar_ref.py PATH/TO/test_calendar.  Exit 0 when every window
agrees; else the first 20 differences and exit 1.
"""
import random
import subprocess
import sys
import zoneinfo
from calendar import monthrange
from datetime import date, datetime, timedelta, timezone

NS = 10**9
EPOCH = datetime(1970, 1, 1)
TRICKY = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe",
          "America/Havana", "America/Santiago", "America/Asuncion", "Asia/Gaza",
          "Africa/Casablanca", "Europe/Dublin", "Antarctica/Troll", "Pacific/Chatham",
          "Asia/Tehran", "America/Sao_Paulo", "Pacific/Apia", "Australia/Sydney",
          "America/St_Johns", "Asia/Kolkata", "Pacific/Kiritimati", "Asia/Beirut"]
DST10 = TRICKY[1:11]
UNITS = [("d", 1), ("w", 1), ("month", 1), ("month", 3), ("month", 12), ("y", 1)]


def local(u, z):
    return datetime.fromtimestamp(u, z).replace(tzinfo=None)


def first_reach(z, naive):
    """The first instant (s) at which local time reaches `naive`."""
    cands = []
    for fold in (0, 1):
        aware = naive.replace(tzinfo=z, fold=fold)
        u = int((naive - EPOCH).total_seconds()) - int(aware.utcoffset().total_seconds())
        if local(u, z) == naive:
            cands.append(u)
    if cands:
        return min(cands)
    # a gap: local time jumps over naive; the first second past the jump
    hi = int((naive - EPOCH).total_seconds()) + 27 * 3600
    lo = hi - 54 * 3600
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if local(mid, z) >= naive:
            hi = mid
        else:
            lo = mid
    return hi


def bounds(z, unit, n, anchor):
    """first(d) and succ(d): the window's first date and the next one's."""
    if unit == "d":
        return (lambda d: d), (lambda d: d + timedelta(days=1))
    if unit == "w":
        return (lambda d: d - timedelta(days=d.weekday())), (lambda d: d + timedelta(days=7))
    if unit == "y":
        return (lambda d: date(d.year, 1, 1)), (lambda d: date(d.year + 1, 1, 1))

    def start_of(idx):
        y, m = divmod(idx, 12)
        return date(y, m + 1, min(anchor, monthrange(y, m + 1)[1]))

    def first(d):
        idx = d.year * 12 + d.month - 1
        if d < start_of(idx):
            idx -= 1
        return start_of(idx - idx % n)

    def succ(d):
        idx = d.year * 12 + d.month - 1
        return start_of(idx + n)
    return first, succ


def window(zname, unit, n, anchor, t):
    z = zoneinfo.ZoneInfo(zname)
    first, succ = bounds(z, unit, n, anchor)
    d = first(local(t // NS, z).date())
    midnight = lambda d: datetime(d.year, d.month, d.day)
    s, e = first_reach(z, midnight(d)), first_reach(z, midnight(succ(d)))
    while e * NS <= t:
        d = succ(d)
        s, e = e, first_reach(z, midnight(succ(d)))
    return max(s, 0) * NS, min(e * NS, 1 << 63)


def spec(zname, unit, n, anchor):
    p = "%d%s" % (n, unit) if n != 1 else unit
    a = " anchor=%d" % anchor if anchor != 1 else ""
    return "fixed-window 5/%s tz=%s%s" % (p, zname, a)


def transitions(zname, y0=2000, y1=2041):
    """Every change of UTC offset (s) in [y0, y1), by days then bisection."""
    z = zoneinfo.ZoneInfo(zname)
    off = lambda u: datetime.fromtimestamp(u, z).utcoffset()
    u = int(datetime(y0, 1, 1, tzinfo=timezone.utc).timestamp())
    end = int(datetime(y1, 1, 1, tzinfo=timezone.utc).timestamp())
    out = []
    while u < end:
        v = u + 86400
        if off(u) != off(v):
            lo, hi = u, v
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if off(mid) == off(u):
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
        u = v
    return out


def main():
    tool = sys.argv[1]
    rng = random.Random(20261206)
    allz = sorted(zoneinfo.available_timezones() - {"Factory", "localtime"})
    allz = [z for z in allz if not z.startswith(("posix/", "right/"))]
    zones = TRICKY + rng.sample([z for z in allz if z not in TRICKY], 40)
    t0 = int(datetime(2000, 1, 1, tzinfo=timezone.utc).timestamp()) * NS
    t1 = int(datetime(2041, 1, 1, tzinfo=timezone.utc).timestamp()) * NS
    cases = []
    for zname in zones:
        for unit, n in UNITS:
            for anchor in ([1, 29, 30, 31] if unit == "month" else [1]):
                for _ in range(12):
                    cases.append((zname, unit, n, anchor, rng.randrange(t0, t1)))
    for zname in DST10:
        for tr in transitions(zname):
            for dt in (-86400, -3600, -1, 0, 1, 3600):
                for unit, n in (("d", 1), ("w", 1), ("month", 1)):
                    cases.append((zname, unit, n, 1, (tr + dt) * NS + rng.choice([0, 1, NS - 1])))
    for y in range(2000, 2041):
        for zname in ("UTC", "America/New_York", "Asia/Tokyo"):
            for m, d in ((2, 28), (2, 29), (3, 1)) if y % 4 == 0 else ((2, 28), (3, 1)):
                t = int(datetime(y, m, d, 12, tzinfo=timezone.utc).timestamp()) * NS
                for anchor in (29, 30, 31):
                    cases.append((zname, "month", 1, anchor, t))
                cases.append((zname, "d", 1, 1, t))
                cases.append((zname, "y", 1, 1, t))
    cases.sort(key=lambda c: spec(*c[:4]))
    inp = "".join("%s|%d\n" % (spec(*c[:4]), c[4]) for c in cases)
    out = subprocess.run([tool, "--windows"], input=inp, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    if len(lines) != len(cases):
        print("tool printed %d lines for %d cases" % (len(lines), len(cases)))
        return 1
    bad = 0
    for c, line in zip(cases, lines):
        want = "%d %d" % window(*c)
        if line != want:
            bad += 1
            if bad <= 20:
                print("%s at %d: library %s, zoneinfo %s" % (spec(*c[:4]), c[4], line, want))
    print("%d windows, %d zones, %d differences" % (len(cases), len(zones), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
