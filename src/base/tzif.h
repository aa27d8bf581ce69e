/* tzif.h -- time zones from the system's tzdata (TZif files, RFC 8536).
 *
 * A zone's file is read when a spec that names it is parsed (never on a
 * decision), and the zone is kept for the life of the process, interned by
 * name and contents: every profile that names the same zone, with the same
 * file, shares one object (immutable but for its window cache, below), so
 * profiles stay plain values that may be copied freely; at most 4096 such
 * objects are kept (a file rewritten that many times refuses the next).
 * The queries never read the process's TZ, never call localtime, take no
 * lock and allocate nothing.
 *
 * Times here are whole seconds since the Unix epoch (UTC), int64; offsets
 * are seconds east of UTC.
 */
#ifndef SLUICE_BASE_TZIF_H
#define SLUICE_BASE_TZIF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifndef SLUICE__INTERNAL
#define SLUICE__INTERNAL __attribute__((visibility("hidden")))
#endif

typedef struct sluice__tz sluice__tz;

/* The longest zone name accepted (IANA names are far shorter). */
#define SLUICE__TZ_NAME_MAX 64

/* Parse the TZif image buf[0..n) (version 2 or later; the 64-bit block and
 * the footer rule are used).  Returns a new zone (free with
 * sluice__tz_free) or NULL with a one-line reason in err.  Every count,
 * length and index is checked against n before use. */
SLUICE__INTERNAL sluice__tz *sluice__tz_parse(const unsigned char *buf, size_t n,
                                              char *err, size_t errlen);
SLUICE__INTERNAL void sluice__tz_free(sluice__tz *z);

/* The zone called `name` (an IANA name such as Europe/Paris, or UTC), read
 * from $TZDIR or /usr/share/zoneinfo, interned: the same pointer for the
 * same name and file contents, valid until the process exits.  NULL with a
 * one-line reason naming the zone in err when the name is malformed, the
 * file is missing or its data are not valid.  Thread-safe. */
SLUICE__INTERNAL const sluice__tz *sluice__tz_load(const char *name, size_t namelen,
                                                   char *err, size_t errlen);

/* A cache of calendar windows, a few slots a zone, that alg/calendar.c
 * keeps so that a decision inside the current window does no calendar
 * arithmetic: each slot holds one window (`key` names the unit, months and
 * anchor; 0: empty) under a sequence lock (base/seqlock.h), written by
 * whoever wins the hold, read by anyone.  The only mutable part of a zone. */
#define SLUICE__TZ_WINS 8
typedef struct sluice__tz_win {
    _Atomic uint64_t seq;
    uint64_t key, start, end; /* through SLUICE__PUT / SLUICE__GET */
} sluice__tz_win;
SLUICE__INTERNAL sluice__tz_win *sluice__tz_wins(const sluice__tz *z);

/* The zone's name as loaded ("" for one made by sluice__tz_parse). */
SLUICE__INTERNAL const char *sluice__tz_name(const sluice__tz *z);

/* The UTC offset in effect at instant u, in seconds east of UTC. */
SLUICE__INTERNAL int32_t sluice__tz_offset(const sluice__tz *z, int64_t u);

/* The first instant > u at which the offset may change, or INT64_MAX when
 * it never changes again. */
SLUICE__INTERNAL int64_t sluice__tz_next_change(const sluice__tz *z, int64_t u);

/* The first instant u at which local time (u + offset(u)) reaches the
 * local time `local` (seconds on the local axis): the instant of a local
 * midnight, the earlier one when it happens twice, and the end of the gap
 * when it never happens (a DST gap over it).  |local| must be below 2^62. */
SLUICE__INTERNAL int64_t sluice__tz_first_reach(const sluice__tz *z, int64_t local);

/* Days since 1970-01-01 of the civil date y-m-d (proleptic Gregorian), and
 * back: integer-only (Howard Hinnant's algorithms), exact for |y| < 2^31. */
SLUICE__INTERNAL int64_t sluice__days_from_civil(int64_t y, unsigned m, unsigned d);
SLUICE__INTERNAL void sluice__civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d);

#endif /* SLUICE_BASE_TZIF_H */
