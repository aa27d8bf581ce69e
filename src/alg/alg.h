/* alg.h -- the algorithm core that the library's source files share.
 *
 * A limiter is split as DPDK's rte_meter splits it: a profile (the parsed
 * spec: algorithm, LIMIT, PERIOD, options), immutable after _new and shared
 * by every limiter a table makes, and a small per-limiter state that the
 * algorithm's decide function moves forward.  Each algorithm is one row of
 * operations (sluice__alg_ops, below; one source file each, the table of
 * rows in spec.c): setup, format, decide, rest_at, pack, unpack, fini.
 * Only an admission writes a state (docs/decisions.md, section 1).
 *
 * Arithmetic is integer-only.  Rates are kept as the exact pair
 * (LIMIT, PERIOD); products that can exceed 64 bits use u128
 * (base/internal.h).  The bucket machine, shared by both buckets, is
 * alg/bucket.h; the window log, alg/window_log.h.
 *
 * Map: the profile and the state (sluice__profile, sluice__log,
 * sluice__state); the spec (sluice__spec_parse, _format, _info,
 * sluice__opts); one algorithm's row (sluice__packed_req,
 * sluice__settle_req, sluice__alg_ops, the rows); the dispatch
 * (sluice__clamp_time, sluice__decide, _rest_at, _state_pack, _unpack).
 */
#ifndef SLUICE_ALG_H
#define SLUICE_ALG_H

#include "base/internal.h"

typedef enum sluice__alg {
    SLUICE__FIXED_WINDOW,
    SLUICE__SLIDING_LOG,
    SLUICE__SLIDING_WHEEL,
    SLUICE__SLIDING_APPROX,
    SLUICE__TOKEN_BUCKET,
    SLUICE__LEAKY_BUCKET,
    SLUICE__ALG_COUNT
} sluice__alg;

/* The parsed spec.  All fields are set by sluice__spec_parse(). */

struct sluice__alg_ops;
struct sluice__tz; /* base/tzif.h */

/* Calendar windows (fixed-window with tz=, alg/calendar.h). */
enum { SLUICE__CAL_NONE, SLUICE__CAL_DAY, SLUICE__CAL_WEEK, SLUICE__CAL_MONTH, SLUICE__CAL_YEAR };

typedef struct sluice__profile {
    sluice__alg alg;
    const struct sluice__alg_ops *ops; /* the algorithm's row (below) */
    sluice__clock clock; /* what the live API reads */
    uint64_t limit;     /* L, permits per period, 1 .. 10^12 */
    uint64_t period_ns; /* W, 1 .. SLUICE_MAX_PERIOD_NS */
    uint64_t capacity;  /* burst (token), capacity (leaky), L otherwise: the
                         * most permits one request can ever get */
    uint64_t slots;     /* sliding-wheel: N; sliding-log: W; else 0 */
    uint64_t tick_ns;   /* sliding-wheel: W/N; sliding-log: 1; else 0 */
    bool nodelay;       /* leaky-bucket meter */
    bool shaper;        /* leaky-bucket without nodelay: reports a wait */
    /* derived, for the hot path */
    sluice__div div_w;    /* t / W */
    sluice__div div_tick; /* t / tick (window log) */
    uint64_t rl, rw;      /* buckets: L/g and W/g with g = gcd(L, W) */
    u128 cap_scaled;      /* buckets: capacity * rw, a full bucket in units
                           * of 1/rw permit */
    bool packed;          /* the state fits one 128-bit word (ops->pack) */
    /* fixed-window with tz=: windows follow the local calendar of zone tz
     * (interned, lives as long as the process: profiles stay plain values) */
    const struct sluice__tz *tz; /* NULL: windows [kW, (k+1)W) */
    uint8_t cal_unit;            /* SLUICE__CAL_*; NONE without tz */
    uint8_t cal_n;               /* months a window (1 2 3 4 6 12); 1 else */
    uint8_t anchor;              /* the day a month's window starts, 1..31 */
} sluice__profile;

/* One entry of a window log: the permits admitted in one slot. `cum` is the
 * running total of permits admitted up to and including this slot, modulo
 * 2^64 (only differences of at most L are ever taken). */
typedef struct sluice__log_entry {
    uint64_t slot; /* absolute slot number: t / tick */
    uint64_t cum;
} sluice__log_entry;

typedef struct sluice__log {
    sluice__log_entry *e; /* ring of `cap` entries, NULL until first use */
    uint32_t cap;         /* a power of two, or 0 */
    uint32_t head;        /* index of the oldest entry */
    uint32_t len;         /* entries in the ring */
    unsigned fixed : 1;   /* 1: e is caller memory of cap entries, never
                           * grown, shrunk or freed (a shared table's ring,
                           * region_table.c); 0: the heap's */
    unsigned hist : 31;   /* the specs admitted under before the current
                           * one: the largest LIMIT and smallest N, coded
                           * (window_log.c, carry); 0: none */
    uint64_t base;        /* cum of the last entry retired (0 at start) */
} sluice__log;

/* Per-limiter state.  t_last is the latest time the limiter has seen. */
typedef struct sluice__state {
    uint64_t t_last;
    union {
        struct { uint64_t window, count; } fw;          /* fixed-window */
        struct { uint64_t window, cur, prev; } sa;      /* sliding-approx */
        struct { u128 deficit; } bk; /* token-bucket and leaky-bucket: the
                                      * tokens missing (= the water), * rw;
                                      * above cap_scaled when in debt to
                                      * reservations */
        sluice__log log;             /* sliding-log, sliding-wheel */
    } u;
} sluice__state;

/* Parse `spec` into `pf`.  Returns 0, or a negative code with a one-line
 * reason in err. */
SLUICE__INTERNAL int sluice__spec_parse(const char *spec, sluice__profile *pf,
                                        char *err, size_t errlen);
SLUICE__INTERNAL int sluice__spec_format(const sluice__profile *pf, char *buf,
                                         size_t buflen);
/* The public, read-only view of a profile (sluice_spec_info). */
SLUICE__INTERNAL void sluice__spec_info(const sluice__profile *pf,
                                        sluice_spec_info *out);

/* The options of the spec grammar, as the parser hands them to an
 * algorithm's setup: which were given, and their values. */
enum {
    SLUICE__OPT_BURST,
    SLUICE__OPT_CAPACITY,
    SLUICE__OPT_SLOTS,
    SLUICE__OPT_NODELAY,
    SLUICE__OPT_CLOCK, /* every algorithm's */
    SLUICE__OPT_TZ,     /* fixed-window: tz=ZONE, calendar windows */
    SLUICE__OPT_ANCHOR, /* fixed-window with tz= and months: anchor=D */
    SLUICE__OPT_COUNT
};
#define SLUICE__OPT(o) (1u << (o))
typedef struct sluice__opts {
    bool seen[SLUICE__OPT_COUNT];
    uint64_t val[SLUICE__OPT_COUNT];
} sluice__opts;

/* A decision on a packed word (ops->decide_packed): the word, the request,
 * and the word the decision leaves (out == w: nothing to write).  In memory
 * rather than in arguments, so that the caller keeps no registers across
 * the call.  The caller sets out = w; decide_packed writes out only when
 * the decision writes (an admission), so that it never copies w -- which
 * a compiler would do with one 16-byte load of what the caller stored as
 * two 8-byte halves, a load that store forwarding cannot serve (a stall of
 * a dozen cycles on every refusal). */
typedef struct sluice__packed_req {
    uint64_t w[2];   /* the snapshot: (latest admission's time, count) */
    uint64_t now_ns; /* not yet clamped */
    uint64_t p, max_wait;
    sluice_result *res; /* may be NULL */
    uint64_t out[2];    /* w, set by the caller; decide_packed writes it
                         * when it admits */
} sluice__packed_req;

/* A reservation settled (ops->settle): `p` permits admitted at the clamped
 * time t0, to be used from at_ns (a bucket's booking; t0 for the others),
 * settled at `a` permits.  d1: a bucket's deficit right after it. */
typedef struct sluice__settle_req {
    uint64_t t0, at_ns, p, a;
    u128 d1;
} sluice__settle_req;

/* One algorithm: a row of operations (one source file each; the table of
 * rows is in spec.c).  Adding an algorithm is one file and one row.
 *
 *   setup     derive the profile's fields from L, W and the options, and
 *             check them; 0 or a negative code with a one-line reason
 *   format    append the options that differ from their defaults to buf
 *   decide    answer one request at t (already clamped, see
 *             sluice__clamp_time) and write the state only when it admits
 *             (allowed, p >= 1): a refusal or a probe is a pure read.
 *             Fills res when it is not NULL (the details cost divisions a
 *             bare yes/no does not need).  `max_wait` bounds the shaper's
 *             wait: a grant whose wait_ns would exceed it is not taken, and
 *             reported as a refusal with retry_after_ns = -1 and wait_ns set
 *             to the wait it would have had
 *   rest_at   the earliest time from which the state is back at rest with
 *             no further traffic (a table may then drop it)
 *   pack,     the packed 16-byte form, for profiles with `packed` set: the
 *   unpack    latest admission's time and one 64-bit count (limiter.c's
 *             lock-free word; table.c's 16 bytes per key); NULL when the
 *             algorithm never packs
 *   decide_packed
 *             the lock-free path's decision in one call, on a request
 *             (sluice__packed_req, above): unpack w, clamp now_ns
 *             (sluice__clamp_time), decide, pack into out -- exactly
 *             unpack, sluice__decide and pack in a row, which it replaces
 *             (one indirect call instead of three; the algorithm may take
 *             a cheaper road to the same answer); NULL when never packed
 *   refused_until
 *             for packed profiles: 0, or a time T beyond the packed word w's
 *             latest time w[0] such that a request for 1 permit on w is
 *             refused at every clamped time t, w[0] <= t < T (limiter.c
 *             keeps it after each admission, its refusals' hint).  It must
 *             stay true of every word that admissions at times <= t make
 *             from w (an admission only ever takes room), and a request for
 *             more permits is refused wherever one is.  Any T below the
 *             exact bound is correct, only slower; NULL when never packed
 *   fini      release what the state holds; NULL when it holds nothing
 *   bucket    books the future: reservations, debt, give-back
 *   settle    settle a reservation at t (clamped): for a < p give back
 *             what is exact and safe (docs/decisions.md, section 3.10),
 *             for a > p charge a - p at t past the limit (saturating at
 *             what the state holds); 0, or SLUICE_ENOMEM with the state
 *             unchanged; NULL: the algorithm cannot settle (SLUICE_EINVAL)
 *
 * For composite decisions (composite.c), where one limit must be decided
 * before it is known whether the permits are taken:
 *   judge     decide at t without writing the state or anything it points
 *             to; NULL when the state is self-contained (then the decision
 *             is made on a copy, and the copy is stored to commit)
 *   reserve   make sure that an admission on this state cannot fail (room
 *             in a ring); false when memory runs out; NULL: cannot fail
 * For a change of spec (reconfigure.c):
 *   recheck   whether profile `to` may replace `from` (same algorithm);
 *             0 or a negative code with a reason; NULL: any may
 *   carry     turn a state of `from` into one of `to` at time t (clamped
 *             already); NULL: the state stays as it is
 *   fits      whether a state packs into 16 bytes under its (packed)
 *             profile; NULL: always
 *
 * Every algorithm's state at rest is all zeros. */
typedef struct sluice__alg_ops {
    const char *name;
    unsigned options; /* SLUICE__OPT() of the options that belong */
    int (*setup)(sluice__profile *pf, const sluice__opts *o, char *err, size_t errlen);
    int (*format)(const sluice__profile *pf, char *buf, size_t buflen);
    bool (*decide)(const sluice__profile *pf, sluice__state *st, uint64_t t, uint64_t p,
                   uint64_t max_wait, sluice_result *res);
    uint64_t (*rest_at)(const sluice__profile *pf, const sluice__state *st);
    void (*pack)(const sluice__profile *pf, const sluice__state *st, uint64_t out[2]);
    void (*unpack)(const sluice__profile *pf, const uint64_t in[2], sluice__state *st);
    bool (*decide_packed)(const sluice__profile *pf, struct sluice__packed_req *q);
    uint64_t (*refused_until)(const sluice__profile *pf, const uint64_t w[2]);
    void (*fini)(sluice__state *st);
    bool bucket;
    bool (*judge)(const sluice__profile *pf, const sluice__state *st, uint64_t t, uint64_t p,
                  sluice_result *res);
    bool (*reserve)(sluice__state *st);
    int (*recheck)(const sluice__profile *from, const sluice__profile *to, char *err,
                   size_t errlen);
    void (*carry)(const sluice__profile *from, const sluice__profile *to, sluice__state *st,
                  uint64_t t);
    bool (*fits)(const sluice__profile *pf, const sluice__state *st);
    int (*settle)(const sluice__profile *pf, sluice__state *st, uint64_t t,
                  const sluice__settle_req *q);
} sluice__alg_ops;

/* The format of a row whose algorithm has no options of its own. */
SLUICE__INTERNAL int sluice__format_no_options(const sluice__profile *pf, char *buf,
                                               size_t buflen);

SLUICE__INTERNAL extern const sluice__alg_ops sluice__fixed_window_ops;
SLUICE__INTERNAL extern const sluice__alg_ops sluice__sliding_log_ops;
SLUICE__INTERNAL extern const sluice__alg_ops sluice__sliding_wheel_ops;
SLUICE__INTERNAL extern const sluice__alg_ops sluice__sliding_approx_ops;
SLUICE__INTERNAL extern const sluice__alg_ops sluice__token_bucket_ops;
SLUICE__INTERNAL extern const sluice__alg_ops sluice__leaky_bucket_ops;

/* The time a request is decided at: now_ns, clamped to the latest
 * admission (t_last) and to the end of the time axis, 2^63-1 -- so no
 * algorithm can overflow adding a period to a time. */
static inline uint64_t sluice__clamp_time(const sluice__state *st, uint64_t now_ns)
{
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    return now_ns > st->t_last ? now_ns : st->t_last;
}

/* The dispatch, through the profile's row. */
static inline void sluice__state_init(const sluice__profile *pf, sluice__state *st)
{
    (void)pf;
    memset(st, 0, sizeof *st);
}
static inline void sluice__state_fini(const sluice__profile *pf, sluice__state *st)
{
    if (pf->ops->fini) pf->ops->fini(st);
}
/* Clamp the time (sluice__clamp_time) and decide. */
static inline bool sluice__decide(const sluice__profile *pf, sluice__state *st,
                                  uint64_t now_ns, uint64_t permits, uint64_t max_wait,
                                  sluice_result *res)
{
    return pf->ops->decide(pf, st, sluice__clamp_time(st, now_ns), permits, max_wait, res);
}
static inline uint64_t sluice__rest_at(const sluice__profile *pf, const sluice__state *st)
{
    return pf->ops->rest_at(pf, st);
}
static inline void sluice__state_pack(const sluice__profile *pf, const sluice__state *st,
                                      uint64_t out[2])
{
    pf->ops->pack(pf, st, out);
}
static inline void sluice__state_unpack(const sluice__profile *pf, const uint64_t in[2],
                                        sluice__state *st)
{
    pf->ops->unpack(pf, in, st);
}

#endif /* SLUICE_ALG_H */
