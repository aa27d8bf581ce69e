/* sluice_module.c -- sluice's algorithms inside Redis: the module sluice.so.
 *
 *     redis-server --loadmodule build/sluice.so [testclock]
 *
 *     SLUICE.ACQUIRE  key spec [permits]      -> [allowed, remaining, retry_after_ms, wait_ms]
 *     SLUICE.PEEK     key spec [permits]      -> the same, changing nothing
 *     SLUICE.THROTTLE key max_burst count period [quantity]
 *                                             -> redis-cell's CL.THROTTLE reply
 *     SLUICE.RESET    key                     -> 1 if a state was deleted, else 0
 *     SLUICE.RESERVE  key spec permits [max_wait_ms]
 *                                             -> ACQUIRE's reply, then a reservation id
 *     SLUICE.SETTLE   key id actual           -> 1: settled at `actual` permits
 *     SLUICE.CANCEL   key id                  -> 1: given back, 0: its time had come
 *
 * THROTTLE also reads the values redis-cell left (its TAT: "redis-cell's
 * values" below), so clients move from CL.THROTTLE key by key.
 *
 * Every decision is the core's: the spec goes through sluice__spec_parse
 * once (a small cache maps spec text to its parsed profile) and each
 * request through sluice__decide on the key's state, so the module and
 * the library can never disagree (docs/decisions.md, section 3).  Time is
 * the server's wall clock, CLOCK_REALTIME in ns, so a state stays
 * meaningful across a restart, on a replica and after a failover; a clock
 * that steps back counts as the latest admission's time (section 1).
 *
 * State.  One plain Redis string per key, so RDB, AOF, AOF rewrite and
 * replication need nothing of the module:
 *
 *     'S' 'L' version(1) algorithm  spec id (u32, FNV-1a of the canonical spec)
 *     spec length (1 byte), the canonical spec; the reservations when the
 *     algorithm byte has RSV_FLAG (below, at its definition); then,
 *     little-endian:
 *       fixed-window    t_last u64, count u64
 *       sliding-approx  t_last u64, cur u64, prev u64
 *       token-/leaky-   t_last u64, deficit u64 [, deficit's high u64 when
 *       bucket          it does not fit 64 bits]
 *       sliding-log,    t_last u64, then per slot that admitted something in
 *       sliding-wheel   the window of t_last, oldest first: varint slot gap,
 *                       varint permits (the first gap counts back from
 *                       slot(t_last)); the algorithm byte's high bit
 *                       (RETIRED_FLAG) says that admissions left the ring,
 *                       and a varint after t_last how many (<= 2^62); the
 *                       next bit (HIST_FLAG), that the carry's history
 *                       follows (a varint of 31 bits, after that count)
 *
 * A state is read back only after it is checked to be well-formed for its
 * spec (bounded counts, slots strictly increasing inside the window, ...):
 * anything else is refused with an error and left alone.  The rings of the
 * windows are bounded: a spec whose window could hold more than RING_MAX
 * slots (min(LIMIT, slots) for sliding-wheel, LIMIT for sliding-log) is
 * refused, so a value is at most about 80 KiB and a decision reads at most
 * RING_MAX + 1 entries.
 *
 * A key is bound to its algorithm.  A request with another spec of the same
 * algorithm changes the key's limit as a running limiter's changes
 * (docs/decisions.md 3.8, the core's reconfiguration: tokens kept and
 * capped, windows keep their admissions), at that request's time; that is
 * stored even when the request is refused, so the change happens once.
 * redis-cell's users change THROTTLE's numbers on the fly in this way.
 * A window is stored without the entries that left the window of t_last (a
 * change to a shorter one that admits nothing leaves them in the ring), and
 * with the count of the admissions that left it (RETIRED_FLAG): read back,
 * that is the ring's base, so that a change to a longer window stands in for
 * them with the core's bound (window_log.c, carry) as a running limiter does.
 *
 * Reservations (docs/decisions.md 3.10, the limiter's sluice_reserve_at
 * and sluice_reservation_settle_at).  RESERVE is a bucket's booking of the
 * future (a window's decision) that also records, in the key's value (the
 * RSV_FLAG section), what a settle needs: the time, the permits, when they
 * are due, a bucket's deficit after it and the spec's id.  At most RSV_MAX
 * are kept per key; a new one drops the oldest, and those made more than
 * RSV_KEEP_NS before (their permits count as used).  SETTLE and CANCEL name
 * one by its id and remove it, so each happens once; an id that is not
 * open on the key is refused with nothing changed.  A settle above the
 * estimate marks the value (RSV_OVERDRAFT): its counts may then pass what
 * admissions alone leave, up to the core's saturation, and only such a
 * value is read back with them.
 *
 * Only an admission, a reservation, a settle, a cancel (or such a change)
 * writes.  It stores the new state and
 * gives the key an absolute expiry at the instant the state is back at rest
 * (rest_at, rounded up to the ms; later while it holds a reservation
 * younger than RSV_KEEP_NS), then replicates the result, never the
 * command: `SET key <state> PXAT <ms>` goes to the replicas and the AOF, so
 * no replica ever decides with its own clock.  A refusal or a PEEK writes
 * and replicates nothing.  RESET deletes and replicates `DEL key`.
 *
 * The module API is reached by name: Debian ships no redismodule.h, so the
 * few functions used are declared below and fetched through the GetApi
 * function that is the first word of the load context.
 *
 * Test clock.  Loaded with the argument `testclock`, the commands accept a
 * trailing `AT time_ns`, after the spec (THROTTLE: after the period), that
 * replaces the clock -- so a key named AT is always a key; such an
 * admission gets no expiry (its times are not the server's).  Without the
 * argument AT is an error: production servers cannot be fed a time.
 *
 * Single-threaded: Redis runs every module command on its main thread, so
 * the cache and the serialisation buffer need no lock.
 */
#define _POSIX_C_SOURCE 200809L
#include "alg/alg.h"
#include "alg/bucket.h"      /* sluice__bucket_reserve, _give_back */
#include "alg/reconfigure.h" /* sluice__reconfigure_check, _state */
#include "base/shared.h"     /* sluice__random_seed */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* ---- the module API, declared here ------------------------------------- */

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

#define RM_OK 0
#define RM_ERR 1
#define RM_APIVER_1 1
#define RM_READ (1 << 0)
#define RM_WRITE (1 << 1)
#define RM_KEYTYPE_EMPTY 0
#define RM_KEYTYPE_STRING 1
#define RM_NO_EXPIRE (-1LL)
#define RM_WRONGTYPE "WRONGTYPE Operation against a key holding the wrong kind of value"

static struct {
    int (*GetApi)(const char *name, void *out);
    int (*IsModuleNameBusy)(const char *name);
    void (*SetModuleAttribs)(RedisModuleCtx *ctx, const char *name, int ver, int apiver);
    int (*CreateCommand)(RedisModuleCtx *ctx, const char *name, RedisModuleCmdFunc f,
                         const char *flags, int firstkey, int lastkey, int keystep);
    RedisModuleKey *(*OpenKey)(RedisModuleCtx *ctx, RedisModuleString *name, int mode);
    void (*CloseKey)(RedisModuleKey *key);
    int (*KeyType)(RedisModuleKey *key);
    char *(*StringDMA)(RedisModuleKey *key, size_t *len, int mode);
    int (*StringTruncate)(RedisModuleKey *key, size_t len);
    int (*DeleteKey)(RedisModuleKey *key);
    int (*SetExpire)(RedisModuleKey *key, long long ms);
    int (*SetAbsExpire)(RedisModuleKey *key, long long unix_ms);
    const char *(*StringPtrLen)(const RedisModuleString *s, size_t *len);
    int (*ReplyWithArray)(RedisModuleCtx *ctx, long len);
    int (*ReplyWithLongLong)(RedisModuleCtx *ctx, long long v);
    int (*ReplyWithError)(RedisModuleCtx *ctx, const char *err);
    int (*WrongArity)(RedisModuleCtx *ctx);
    int (*Replicate)(RedisModuleCtx *ctx, const char *cmd, const char *fmt, ...);
    void (*Log)(RedisModuleCtx *ctx, const char *level, const char *fmt, ...);
} rm;

/* Fetch one function by its name; false when this Redis lacks it. */
static bool api(const char *name, void *fnptr) { return rm.GetApi(name, fnptr) == RM_OK; }

/* ---- configuration ----------------------------------------------------- */

#define RING_MAX 4096       /* slots a window's state may hold */
#define SPEC_MAX 256        /* bytes of spec text */
#define CACHE_SLOTS 256     /* parsed specs kept (direct-mapped) */
#define HDR 9               /* 'S' 'L' version algorithm id[4] speclen */
#define CANON_MAX 255       /* bytes of a canonical spec in a value */
#define VERSION 1
#define VARINT_MAX 10
/* in the algorithm byte of a window's value: admissions left its ring
 * before its oldest entry, and their count (at most RETIRED_MAX) follows
 * t_last as a varint.  Read back, it is the ring's base, as in a running
 * limiter, so that a change to a longer window stands in for them with the
 * core's bound (window_log.c, carry) */
#define RETIRED_FLAG 0x80u
#define RETIRED_MAX ((uint64_t)1 << 62)
/* in the same byte: the log's carry history (window_log.c, carry: the
 * largest LIMIT and smallest window admitted under) follows, a varint of
 * 1 .. 2^31-1, so that a chain of changes bounds what left the ring as a
 * running limiter does */
#define HIST_FLAG 0x40u
#define HIST_MAX 0x7fffffffu
/* in the same byte: the value holds reservations (SLUICE.RESERVE), a
 * section between the canonical spec and t_last:
 *     flags (1 byte: RSV_OVERDRAFT), nonce u32, counter u32, n (1 byte),
 *     n records of RSV_REC bytes: counter u32, spec id u32, t0 u64,
 *     at_ns u64, permits u64, d1 u64 (low), d1 u64 (high)
 * A reservation's id is nonce << 32 | counter: the nonce is drawn at
 * random when the key's first reservation is made (1 .. 2^31-1), the
 * counter counts its reservations (a new nonce when it would wrap), so an
 * id of another key, or of this key before a RESET or an expiry, matches
 * with a chance of 2^-31 at most. */
#define RSV_FLAG 0x20u
#define RSV_MAX 16          /* open reservations kept per key; a new one
                             * drops the oldest (its permits count as used) */
#define RSV_REC 48
#define RSV_HDR 10
#define RSV_KEEP_NS (3600 * 1000000000ull) /* a reservation is kept an hour */
/* in the section's flags: a settle charged past the limit, so the counts
 * may exceed what admissions alone leave (docs/decisions.md 3.10) */
#define RSV_OVERDRAFT 0x01u
/* a ring read back may hold one entry more than RING_MAX: the one a change
 * of spec adds (docs/decisions.md 3.8) before the next admission */
#define VALUE_MAX (HDR + CANON_MAX + RSV_HDR + RSV_MAX * RSV_REC + 8 + VARINT_MAX + (RING_MAX + 1) * 2 * VARINT_MAX)

static bool g_testclock; /* AT time_ns accepted */

/* ---- the spec cache ---------------------------------------------------- */

typedef struct spec_entry {
    char text[SPEC_MAX + 1]; /* the spec as the client sent it */
    size_t len;
    bool used;
    uint32_t id; /* FNV-1a of the canonical spec: the state's owner */
    char canon[CANON_MAX + 1]; /* the canonical spec (no clock=), stored in values */
    size_t canon_len;
    sluice__profile pf;
} spec_entry;

static spec_entry g_cache[CACHE_SLOTS];

static uint32_t fnv1a(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The entry for spec text s[0..n), parsed and checked once; NULL with a
 * reason in err when the spec is refused (refusals are not cached). */
static const spec_entry *spec_get(const char *s, size_t n, char *err, size_t errlen)
{
    /* the length first: a client may send 512 MB, and nothing may cost
     * more than the spec's bytes up to SPEC_MAX */
    if (n > SPEC_MAX) {
        snprintf(err, errlen, "the spec is %zu bytes, more than the module's %d", n, SPEC_MAX);
        return NULL;
    }
    spec_entry *e = &g_cache[fnv1a(s, n) % CACHE_SLOTS];
    if (e->used && e->len == n && memcmp(e->text, s, n) == 0) return e;
    const char *nul = memchr(s, '\0', n);
    if (nul) {
        snprintf(err, errlen, "the spec has a NUL byte (at byte %zu)", (size_t)(nul - s));
        return NULL;
    }
    spec_entry fresh;
    memcpy(fresh.text, s, n);
    fresh.text[n] = '\0';
    fresh.len = n;
    if (sluice__spec_parse(fresh.text, &fresh.pf, err, errlen) != 0) return NULL;
    const sluice__profile *pf = &fresh.pf;
    if (pf->alg == SLUICE__SLIDING_LOG || pf->alg == SLUICE__SLIDING_WHEEL) {
        const uint64_t most = sluice__min_u64(pf->limit, pf->slots);
        if (most > RING_MAX) {
            snprintf(err, errlen,
                     "%s: a window may hold %llu slots, more than the module's %d (use fewer permits or slots=N with N <= %d)",
                     pf->ops->name, (unsigned long long)most, RING_MAX, RING_MAX);
            return NULL;
        }
    }
    /* the id ignores clock=: the module always reads the server's clock */
    sluice__profile canon = fresh.pf;
    canon.clock = SLUICE__CLOCK_MONOTONIC;
    int k = sluice__spec_format(&canon, fresh.canon, sizeof fresh.canon);
    if (k < 0) {
        snprintf(err, errlen, "spec too long once formatted");
        return NULL;
    }
    fresh.canon_len = (size_t)k;
    fresh.id = fnv1a(fresh.canon, fresh.canon_len);
    fresh.used = true;
    *e = fresh;
    return e;
}

/* THROTTLE's numbers, parsed, to their spec: a second small cache, so that
 * THROTTLE formats no spec text per request. */
typedef struct throttle_entry {
    uint64_t max_burst, count, period;
    bool used;
    spec_entry e;
} throttle_entry;

static throttle_entry g_throttle[64];

static const spec_entry *throttle_spec(uint64_t max_burst, uint64_t count, uint64_t period,
                                       char *err, size_t errlen)
{
    const uint64_t h = (max_burst * 0x9e3779b97f4a7c15u) ^ (count * 0xc2b2ae3d27d4eb4fu) ^
                       (period * 0x165667b19e3779f9u);
    throttle_entry *te = &g_throttle[(h >> 58) & 63];
    if (te->used && te->max_burst == max_burst && te->count == count && te->period == period)
        return &te->e;
    char spec[128];
    int n = snprintf(spec, sizeof spec, "token-bucket %llu/%llus burst=%llu",
                     (unsigned long long)count, (unsigned long long)period,
                     (unsigned long long)max_burst + 1);
    const spec_entry *e = spec_get(spec, (size_t)n, err, errlen);
    if (!e) return NULL;
    *te = (throttle_entry){.max_burst = max_burst, .count = count, .period = period, .used = true,
                           .e = *e};
    return &te->e;
}

/* ---- serialisation ----------------------------------------------------- */

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (unsigned char)v;
    return n;
}

/* A varint from p[*at..end); false when truncated or longer than 64 bits. */
static bool get_varint(const unsigned char *p, size_t end, size_t *at, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && *at < end; shift += 7) {
        unsigned char b = p[(*at)++];
        if (shift == 63 && b > 1) return false;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

static inline sluice__log_entry *ring_at(const sluice__log *lg, uint32_t i)
{
    return &lg->e[(lg->head + i) & (lg->cap - 1)];
}

/* ---- reservations (SLUICE.RESERVE, SETTLE, CANCEL) ----------------------- */

typedef struct rsv_rec {
    uint32_t ctr;     /* the id's low half */
    uint32_t spec_id; /* the spec it was made under: under another, nothing goes back */
    uint64_t t0, at_ns, p;
    u128 d1; /* a bucket's deficit right after it */
} rsv_rec;

typedef struct rsv_table {
    unsigned flags;    /* RSV_OVERDRAFT */
    uint32_t nonce;    /* 0: no reservation was ever made on the value */
    uint32_t ctr;      /* the latest id's low half */
    unsigned n;        /* records, oldest first */
    rsv_rec r[RSV_MAX];
} rsv_table;

static bool rsv_present(const rsv_table *rt) { return rt->nonce != 0; }

static size_t rsv_store(const rsv_table *rt, unsigned char *out)
{
    size_t n = 0;
    out[n++] = (unsigned char)rt->flags;
    for (int i = 0; i < 4; i++) out[n++] = (unsigned char)(rt->nonce >> (8 * i));
    for (int i = 0; i < 4; i++) out[n++] = (unsigned char)(rt->ctr >> (8 * i));
    out[n++] = (unsigned char)rt->n;
    for (unsigned k = 0; k < rt->n; k++) {
        const rsv_rec *x = &rt->r[k];
        for (int i = 0; i < 4; i++) out[n++] = (unsigned char)(x->ctr >> (8 * i));
        for (int i = 0; i < 4; i++) out[n++] = (unsigned char)(x->spec_id >> (8 * i));
        put64(out + n, x->t0), n += 8;
        put64(out + n, x->at_ns), n += 8;
        put64(out + n, x->p), n += 8;
        put64(out + n, (uint64_t)x->d1), n += 8;
        put64(out + n, (uint64_t)(x->d1 >> 64)), n += 8;
    }
    return n;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The section at v[0..n) (n: the bytes left in the value) into *rt; its
 * length, or 0 when it is damaged: every field within what RESERVE
 * writes (times at most 2^63-1, at_ns not before t0, a window's at_ns its
 * t0, ids below the counter). */
static size_t rsv_load(const unsigned char *v, size_t n, bool bucket, rsv_table *rt)
{
    if (n < RSV_HDR) return 0;
    rt->flags = v[0];
    rt->nonce = get32(v + 1);
    rt->ctr = get32(v + 5);
    rt->n = v[9];
    if ((rt->flags & ~RSV_OVERDRAFT) || rt->nonce == 0 || rt->nonce > 0x7fffffffu || rt->ctr == 0 ||
        rt->n > RSV_MAX || n < RSV_HDR + (size_t)rt->n * RSV_REC)
        return 0;
    const unsigned char *b = v + RSV_HDR;
    for (unsigned k = 0; k < rt->n; k++, b += RSV_REC) {
        rsv_rec *x = &rt->r[k];
        x->ctr = get32(b);
        x->spec_id = get32(b + 4);
        x->t0 = get64(b + 8);
        x->at_ns = get64(b + 16);
        x->p = get64(b + 24);
        x->d1 = (u128)get64(b + 40) << 64 | get64(b + 32);
        if (x->ctr == 0 || x->ctr > rt->ctr || x->t0 > (uint64_t)INT64_MAX ||
            x->at_ns > (uint64_t)INT64_MAX || x->at_ns < x->t0 || (!bucket && x->at_ns != x->t0))
            return 0;
    }
    return RSV_HDR + (size_t)rt->n * RSV_REC;
}

/* Drop the reservations made more than RSV_KEEP_NS before t. */
static void rsv_prune(rsv_table *rt, uint64_t t)
{
    unsigned k = 0;
    for (unsigned i = 0; i < rt->n; i++)
        if (t - rt->r[i].t0 <= RSV_KEEP_NS || rt->r[i].t0 > t) rt->r[k++] = rt->r[i];
    rt->n = k;
}

/* The time until which the key must stay for its reservations: the
 * newest one's time + RSV_KEEP_NS (0 when it holds none). */
static uint64_t rsv_keep_until(const rsv_table *rt)
{
    uint64_t u = 0;
    for (unsigned i = 0; i < rt->n; i++) {
        const uint64_t k = rt->r[i].t0 + RSV_KEEP_NS; /* t0 <= 2^63-1: no wrap */
        if (k > u) u = k;
    }
    return u;
}

/* Write the state of spec e (and the reservations rt, when it holds any
 * or ever did) into out (VALUE_MAX bytes); its length. */
static size_t state_store(const spec_entry *e, const sluice__state *st, const rsv_table *rt,
                          unsigned char *out)
{
    const sluice__profile *pf = &e->pf;
    out[0] = 'S', out[1] = 'L', out[2] = VERSION, out[3] = (unsigned char)pf->alg;
    out[4] = (unsigned char)e->id, out[5] = (unsigned char)(e->id >> 8);
    out[6] = (unsigned char)(e->id >> 16), out[7] = (unsigned char)(e->id >> 24);
    out[8] = (unsigned char)e->canon_len;
    memcpy(out + HDR, e->canon, e->canon_len);
    size_t n = HDR + e->canon_len;
    if (rt && rsv_present(rt)) {
        out[3] |= RSV_FLAG;
        n += rsv_store(rt, out + n);
    }
    put64(out + n, st->t_last), n += 8;
    switch (pf->alg) {
    case SLUICE__FIXED_WINDOW:
        put64(out + n, st->u.fw.count), n += 8;
        break;
    case SLUICE__SLIDING_APPROX:
        put64(out + n, st->u.sa.cur), n += 8;
        put64(out + n, st->u.sa.prev), n += 8;
        break;
    case SLUICE__TOKEN_BUCKET:
    case SLUICE__LEAKY_BUCKET:
        put64(out + n, (uint64_t)st->u.bk.deficit), n += 8;
        if (st->u.bk.deficit >> 64) put64(out + n, (uint64_t)(st->u.bk.deficit >> 64)), n += 8;
        break;
    case SLUICE__SLIDING_LOG:
    case SLUICE__SLIDING_WHEEL: {
        const sluice__log *lg = &st->u.log;
        const uint64_t s_last = sluice__div_q(&pf->div_tick, st->t_last);
        uint64_t prev_slot = s_last;
        uint64_t prev_cum = lg->base;
        /* entries out of the window of t_last never count again (no
         * decision is made before t_last): a change to a shorter window
         * that admitted nothing leaves them in the ring */
        uint32_t first = 0;
        while (first < lg->len && s_last >= pf->slots &&
               ring_at(lg, first)->slot <= s_last - pf->slots)
            prev_cum = ring_at(lg, first++)->cum;
        /* at most RING_MAX + 1 entries: repeated changes to longer windows
         * may each add one (window_log.c, carry); the oldest are merged
         * into the next one, which counts them as long as itself */
        if (lg->len - first > RING_MAX + 1) first = lg->len - (RING_MAX + 1);
        /* how many admissions left the ring before it: a longer window may
         * reach back to them (the carry counts at most this many) */
        if (prev_cum != 0) {
            out[3] |= RETIRED_FLAG;
            n += put_varint(out + n, prev_cum < RETIRED_MAX ? prev_cum : RETIRED_MAX);
        }
        if (lg->hist) {
            out[3] |= HIST_FLAG;
            n += put_varint(out + n, lg->hist);
        }
        for (uint32_t i = first; i < lg->len; i++) {
            const sluice__log_entry *x = ring_at(lg, i);
            /* the first gap counts back from slot(t_last), the others forward */
            n += put_varint(out + n, i == first ? prev_slot - x->slot : x->slot - prev_slot);
            n += put_varint(out + n, x->cum - prev_cum);
            prev_slot = x->slot;
            prev_cum = x->cum;
        }
        break;
    }
    default:
        break;
    }
    return n;
}

typedef enum load_rc { LOAD_OK, LOAD_FOREIGN, LOAD_CORRUPT, LOAD_NOMEM } load_rc;

/* A value's header: the spec that wrote it, and the state's bytes. */
typedef struct value_hdr {
    unsigned alg;
    bool retired; /* RETIRED_FLAG */
    bool hist;    /* HIST_FLAG */
    rsv_table rsv; /* RSV_FLAG: the reservations (else nonce 0) */
    bool rsv_bad;  /* RSV_FLAG, and the section is damaged (rsv empty) */
    uint32_t id;
    const char *canon; /* the canonical spec, canon_len bytes, no NUL */
    size_t canon_len;
    const unsigned char *body; /* t_last and the algorithm's fields */
    size_t body_len;
} value_hdr;

/* Whether v[0..n) is laid out as a sluice state; fills *h. */
static bool parse_header(const unsigned char *v, size_t n, value_hdr *h)
{
    if (n < HDR || v[0] != 'S' || v[1] != 'L' || v[2] != VERSION ||
        (v[3] & ~(RETIRED_FLAG | HIST_FLAG | RSV_FLAG)) >= SLUICE__ALG_COUNT)
        return false;
    const size_t cl = v[8];
    if (cl == 0 || n < HDR + cl + 8) return false;
    h->alg = v[3] & ~(RETIRED_FLAG | HIST_FLAG | RSV_FLAG);
    h->retired = (v[3] & RETIRED_FLAG) != 0;
    h->hist = (v[3] & HIST_FLAG) != 0;
    if ((h->retired || h->hist) && h->alg != SLUICE__SLIDING_LOG && h->alg != SLUICE__SLIDING_WHEEL)
        return false;
    h->id = (uint32_t)v[4] | (uint32_t)v[5] << 8 | (uint32_t)v[6] << 16 | (uint32_t)v[7] << 24;
    h->canon = (const char *)v + HDR;
    h->canon_len = cl;
    size_t rl = 0;
    memset(&h->rsv, 0, sizeof h->rsv);
    h->rsv_bad = false;
    if (v[3] & RSV_FLAG) {
        /* a damaged section still leaves a sluice state (RESET deletes
         * it); every reader refuses it as damaged */
        const bool bucket = h->alg == SLUICE__TOKEN_BUCKET || h->alg == SLUICE__LEAKY_BUCKET;
        rl = rsv_load(v + HDR + cl, n - HDR - cl, bucket, &h->rsv);
        if (rl == 0 || n < HDR + cl + rl + 8) {
            memset(&h->rsv, 0, sizeof h->rsv);
            h->rsv_bad = true;
            rl = 0;
        }
    }
    h->body = v + HDR + cl + rl;
    h->body_len = n - HDR - cl - rl;
    return true;
}

/* Read a state of profile pf from body b[0..bn) into *st (zeroed first; a
 * ring is allocated for the windows: sluice__state_fini releases it).
 * Checks that it is well-formed -- what the algorithm could have left after
 * an admission or a change of spec under pf, within the bounds the core's
 * arithmetic relies on; anything else is LOAD_CORRUPT. */
static load_rc load_body(const sluice__profile *pf, const unsigned char *b, size_t bn,
                         bool retired, bool hist, bool overdraft, sluice__state *st)
{
    memset(st, 0, sizeof *st);
    const uint64_t t = get64(b);
    if (t > (uint64_t)INT64_MAX) return LOAD_CORRUPT;
    st->t_last = t;
    b += 8, bn -= 8;
    switch (pf->alg) {
    case SLUICE__FIXED_WINDOW:
        if (bn != 8) return LOAD_CORRUPT;
        /* the window is the time's (a calendar one with tz=): the row's unpack */
        pf->ops->unpack(pf, (const uint64_t[2]){t, get64(b)}, st);
        /* at most LIMIT after an admission; a change of spec keeps an
         * earlier LIMIT's count */
        return st->u.fw.count <= SLUICE_MAX_LIMIT || overdraft ? LOAD_OK : LOAD_CORRUPT;
    case SLUICE__SLIDING_APPROX:
        if (bn != 16) return LOAD_CORRUPT;
        st->u.sa.window = sluice__div_q(&pf->div_w, t);
        st->u.sa.cur = get64(b);
        st->u.sa.prev = get64(b + 8);
        /* within L after an admission; a change of spec may place up to
         * 2^62 in either (sliding_approx.c, carry) */
        /* a settle's overdraft saturates at 2^64-1 (2^32-1 when packed,
         * within the bound below) */
        if (overdraft && !pf->packed) return LOAD_OK;
        return st->u.sa.cur <= UINT64_MAX / 2 && st->u.sa.prev <= UINT64_MAX / 2 ? LOAD_OK
                                                                                 : LOAD_CORRUPT;
    case SLUICE__TOKEN_BUCKET:
    case SLUICE__LEAKY_BUCKET:
        if (bn != 8 && bn != 16) return LOAD_CORRUPT;
        st->u.bk.deficit = get64(b);
        if (bn == 16) {
            const uint64_t hi = get64(b + 8);
            if (hi == 0) return LOAD_CORRUPT; /* not the form we write */
            st->u.bk.deficit |= (u128)hi << 64;
        }
        /* at most full after an admission; a change of spec may leave
         * more (water above a lowered capacity), never more than drains
         * in 2^63-1 ns */
        return st->u.bk.deficit <= (u128)INT64_MAX * pf->rl ? LOAD_OK : LOAD_CORRUPT;
    case SLUICE__SLIDING_LOG:
    case SLUICE__SLIDING_WHEEL:
        break;
    default:
        return LOAD_CORRUPT;
    }
    /* the windows: decode into a small array first, then the ring */
    static sluice__log_entry tmp[RING_MAX + 1];
    const uint64_t s_last = sluice__div_q(&pf->div_tick, t);
    uint64_t slot = s_last, cum = 0, base = 0;
    uint32_t len = 0;
    size_t at = 0;
    if (retired && (!get_varint(b, bn, &at, &base) || base == 0 || base > RETIRED_MAX))
        return LOAD_CORRUPT;
    uint64_t hv = 0;
    if (hist && (!get_varint(b, bn, &at, &hv) || hv == 0 || hv > HIST_MAX)) return LOAD_CORRUPT;
    while (at < bn) {
        uint64_t gap, permits;
        if (len == RING_MAX + 1 || !get_varint(b, bn, &at, &gap) ||
            !get_varint(b, bn, &at, &permits))
            return LOAD_CORRUPT;
        if (len == 0) {
            if (gap >= pf->slots || gap > slot) return LOAD_CORRUPT; /* inside the window */
            slot -= gap;
        } else {
            if (gap == 0 || gap > s_last - slot) return LOAD_CORRUPT; /* increasing, <= s_last */
            slot += gap;
        }
        /* the window's sum is at most L after an admission; a change of
         * spec may add one entry standing for more (window_log.c, carry).
         * The retired count is part of the total: a carry moves up to all
         * of it into the ring, and the writer stores the ring's sum from
         * the new base, so base + sum <= 2^63 is what a change keeps and a
         * read-back accepts (an admission stores at most 2^62 + L) */
        /* a settle's overdraft is an admission past L, its count
         * saturating at 2^64-1 (docs/decisions.md 3.10) */
        const uint64_t top = overdraft ? UINT64_MAX : (uint64_t)1 << 63;
        if (permits == 0 || permits > top - base - cum) return LOAD_CORRUPT;
        cum += permits;
        tmp[len].slot = slot;
        tmp[len].cum = cum;
        len++;
    }
    if (len == 0) {
        st->u.log.base = base;
        st->u.log.hist = (unsigned)hv;
        return LOAD_OK;
    }
    for (uint32_t i = 0; i < len; i++) tmp[i].cum += base;
    uint32_t cap = 4;
    while (cap < len) cap *= 2;
    sluice__log_entry *ring = sluice__malloc((size_t)cap * sizeof *ring);
    if (!ring) return LOAD_NOMEM;
    memcpy(ring, tmp, (size_t)len * sizeof *ring);
    st->u.log = (sluice__log){.e = ring, .cap = cap, .head = 0, .len = len, .base = base,
                              .hist = (unsigned)hv};
    return LOAD_OK;
}

/* ---- replies and arguments --------------------------------------------- */

static int reply_errf(RedisModuleCtx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int reply_errf(RedisModuleCtx *ctx, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* an error is one line of text: a client's bytes echoed in it are too */
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return rm.ReplyWithError(ctx, buf);
}

/* A whole number from min to max, 1 to 20 decimal digits (the spec's
 * reader, sluice_parse_u64: no sign, no space), or false. */
static bool arg_u64(const RedisModuleString *s, uint64_t min, uint64_t max, uint64_t *out)
{
    size_t n;
    const char *p = rm.StringPtrLen(s, &n);
    uint64_t v;
    if (n > 20 || sluice_parse_u64(p, n, max, &v) != 0 || v < min) return false;
    *out = v;
    return true;
}

/* Reply `bad WHAT "TOKEN": EXPECTED` (the token cut at 40 bytes). */
static int reply_bad_arg(RedisModuleCtx *ctx, const char *what, const RedisModuleString *arg,
                         const char *expected)
{
    size_t n;
    const char *p = rm.StringPtrLen(arg, &n);
    return reply_errf(ctx, "ERR sluice: bad %s \"%.*s%s\": expected %s", what, (int)(n > 40 ? 40 : n), p,
                      n > 40 ? "..." : "", expected);
}

static bool arg_is(const RedisModuleString *s, const char *word)
{
    size_t n;
    const char *p = rm.StringPtrLen(s, &n);
    return n == strlen(word) && strncasecmp(p, word, n) == 0;
}

/* Strip a trailing `AT time_ns` from argv[0..*argc), where the keyword
 * stands at index `first` or later: after the arguments that every form of
 * the command has (the key, the spec or THROTTLE's numbers), so that a key
 * or a spec is never read as the keyword -- a key named AT is a key.  1:
 * taken (time in *at), 0: none, -1: an error was replied. */
static int take_at(RedisModuleCtx *ctx, RedisModuleString **argv, int *argc, int first, uint64_t *at)
{
    if (*argc - 2 < first || !arg_is(argv[*argc - 2], "AT")) return 0;
    if (!g_testclock) {
        rm.ReplyWithError(ctx, "ERR sluice: AT needs the module loaded with the testclock argument");
        return -1;
    }
    if (!arg_u64(argv[*argc - 1], 0, (uint64_t)INT64_MAX, at)) {
        reply_bad_arg(ctx, "AT time", argv[*argc - 1], "a time in ns from 0 to 2^63-1");
        return -1;
    }
    *argc -= 2;
    return 1;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ceil(ns / unit) for ns >= 0; -1 stays -1. */
static long long ceil_units(int64_t ns, uint64_t unit)
{
    if (ns < 0) return -1;
    return (long long)((uint64_t)ns / unit + ((uint64_t)ns % unit != 0));
}

/* ---- the decision ------------------------------------------------------ */

typedef enum mode { M_ACQUIRE, M_PEEK, M_THROTTLE, M_RESERVE } mode;

/* The state of spec e from the value v[0..n), in *st.  A state written
 * under another spec of the same algorithm is carried to e at now_ns by the
 * rules of a change of limit (docs/decisions.md 3.8; the core's
 * reconfiguration), and *changed is set: the caller stores it even when it
 * admits nothing, so the change happens once, at that instant, and a
 * retry_after reported under the new spec holds.  NULL, or why not (with a
 * detail in why). */
static const char *read_state(const spec_entry *e, const unsigned char *v, size_t n,
                              uint64_t now_ns, sluice__state *st, rsv_table *rt, bool *changed,
                              char *why, size_t whylen)
{
    *changed = false;
    const sluice__profile *pf = &e->pf;
    memset(st, 0, sizeof *st);
    static value_hdr h; /* single-threaded (the head comment); 800 bytes */
    if (!parse_header(v, n, &h)) return "the key holds a string that is not a sluice state";
    if (h.rsv_bad) return "the key holds a damaged sluice state";
    *rt = h.rsv;
    const bool od = (h.rsv.flags & RSV_OVERDRAFT) != 0;
    if (h.alg != (unsigned)pf->alg) {
        snprintf(why, whylen, "%s", sluice_algorithm_name((int)h.alg));
        return "the key holds the state of another algorithm; SLUICE.RESET it or use another key";
    }
    load_rc rc;
    if (h.canon_len == e->canon_len && memcmp(h.canon, e->canon, h.canon_len) == 0) {
        if (h.id != e->id) return "the key holds a damaged sluice state";
        rc = load_body(pf, h.body, h.body_len, h.retired, h.hist, od, st);
    } else {
        /* another spec of this algorithm: parse the one stored (rare; not
         * through the cache, which holds e) */
        char text[CANON_MAX + 1];
        memcpy(text, h.canon, h.canon_len);
        text[h.canon_len] = '\0';
        sluice__profile from;
        char err[256];
        if (fnv1a(text, h.canon_len) != h.id || sluice__spec_parse(text, &from, err, sizeof err) != 0 ||
            from.alg != pf->alg)
            return "the key holds a damaged sluice state";
        rc = load_body(&from, h.body, h.body_len, h.retired, h.hist, od, st);
        if (rc == LOAD_OK) {
            if (sluice__reconfigure_check(&from, pf, why, whylen) != 0) {
                sluice__state_fini(pf, st);
                return "the key holds the state of a spec it cannot change to";
            }
            /* room for the entry a window's carry may add */
            if (pf->ops->reserve && !pf->ops->reserve(st)) rc = LOAD_NOMEM;
            else sluice__reconfigure_state(&from, pf, st, now_ns), *changed = true;
        }
    }
    if (rc == LOAD_OK) return NULL;
    sluice__state_fini(pf, st);
    return rc == LOAD_NOMEM ? "out of memory" : "the key holds a damaged sluice state";
}

/* ---- redis-cell's values ------------------------------------------------
 *
 * redis-cell (CL.THROTTLE, brandur/redis-cell) keeps one plain string per
 * key: GCRA's theoretical arrival time, TAT, as a signed decimal integer of
 * ns since the Unix epoch (its wall clock, as ours), with a TTL of TAT - now.
 * With emission interval T and max_burst + 1 = B, a request for q at now
 * passes iff max(TAT, now) + q*T - now <= B*T, and then TAT = max(TAT, now)
 * + q*T.  That is the token bucket's deficit seen from now: D = (TAT - now)
 * * rl in the bucket's units of 1/rw permit (token_bucket.c), and where T
 * is a whole number of ns (count divides period in ns: rl = 1, rw = T) the
 * two rules are one, so SLUICE.THROTTLE reads such a value as its state at
 * now and decides exactly as CL.THROTTLE would (where it is not, redis-cell
 * rounds T down to whole ns, and sluice keeps the exact rate).  Only an
 * admission replaces the value with a sluice state; a refusal leaves it. */

/* Whether v[0..n) is a redis-cell value: an optional '-' and 1-19 digits,
 * within int64_t; the TAT in *tat. */
static bool cell_tat(const unsigned char *v, size_t n, int64_t *tat)
{
    const bool neg = n > 0 && v[0] == '-';
    const size_t d0 = neg ? 1 : 0;
    uint64_t x;
    if (n - d0 > 19 || sluice_parse_u64((const char *)v + d0, n - d0, INT64_MAX, &x) != 0)
        return false;
    *tat = neg ? -(int64_t)x : (int64_t)x;
    return true;
}

/* The bucket state of profile pf at now_ns for redis-cell's TAT: full when
 * TAT <= now, else a deficit of (TAT - now) * rl at now (at most 2^63-1 ns
 * to drain, which the loader's bound allows). */
static void cell_state(const sluice__profile *pf, int64_t tat, uint64_t now_ns, sluice__state *st)
{
    memset(st, 0, sizeof *st);
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    if (tat <= 0 || (uint64_t)tat <= now_ns) return;
    st->t_last = now_ns;
    st->u.bk.deficit = (u128)((uint64_t)tat - now_ns) * pf->rl;
}

static unsigned char g_value[VALUE_MAX];

/* Write the state st of spec e, with the reservations rt, as the value of
 * `key` (opened for writing; it held a value of `type`, old_len bytes), and
 * replicate the result, never the command.  Its expiry is the instant it is
 * at rest and holds no reservation younger than RSV_KEEP_NS (none with the
 * test clock); at rest and holding none, it is deleted instead.  False,
 * with nothing written, when the key cannot be written. */
static bool store_key(RedisModuleCtx *ctx, RedisModuleKey *key, RedisModuleString *name, int type,
                      size_t old_len, const spec_entry *e, const sluice__state *st,
                      const rsv_table *rt, uint64_t t, bool fixed)
{
    const uint64_t rest = sluice__rest_at(&e->pf, st);
    if (rt->n == 0 && rest <= t) {
        if (type != RM_KEYTYPE_EMPTY) {
            rm.DeleteKey(key);
            rm.Replicate(ctx, "DEL", "s", name);
        }
        return true;
    }
    const size_t n = state_store(e, st, rt, g_value);
    char *dst = NULL;
    size_t have = 0;
    if (type == RM_KEYTYPE_STRING && old_len == n) dst = rm.StringDMA(key, &have, RM_WRITE);
    else if (rm.StringTruncate(key, n) == RM_OK) dst = rm.StringDMA(key, &have, RM_WRITE);
    if (!dst || have != n) return false;
    memcpy(dst, g_value, n);
    if (fixed) {
        rm.SetExpire(key, RM_NO_EXPIRE);
        rm.Replicate(ctx, "SET", "sb", name, (const char *)g_value, n);
    } else {
        /* at rest from `until` on: the key may go then (rounded up) */
        const uint64_t keep = rsv_keep_until(rt), until = keep > rest ? keep : rest;
        const long long ms = (long long)(until / 1000000u + (until % 1000000u != 0));
        rm.SetAbsExpire(key, ms);
        rm.Replicate(ctx, "SET", "sbcl", name, (const char *)g_value, n, "PXAT", ms);
    }
    return true;
}

/* Record a reservation of `permits` made at t under spec e (a bucket's
 * booked until at_ns, leaving deficit d1) in rt; its id.  The oldest
 * record goes when RSV_MAX are held, and those older than RSV_KEEP_NS. */
static uint64_t rsv_add(rsv_table *rt, const spec_entry *e, uint64_t t, uint64_t at_ns,
                        uint64_t permits, u128 d1)
{
    rsv_prune(rt, t);
    if (rt->nonce == 0 || rt->ctr == UINT32_MAX) {
        /* the first reservation on this value, or the counter's end: a
         * fresh nonce (the records of the old one can no longer be named,
         * so they go; their permits count as used) */
        uint64_t seed[2];
        sluice__random_seed(seed);
        rt->nonce = (uint32_t)(seed[0] & 0x7fffffffu);
        if (rt->nonce == 0) rt->nonce = 1;
        rt->ctr = 0;
        rt->n = 0;
    }
    if (rt->n == RSV_MAX) {
        memmove(&rt->r[0], &rt->r[1], (RSV_MAX - 1) * sizeof rt->r[0]);
        rt->n--;
    }
    rt->ctr++;
    rt->r[rt->n++] = (rsv_rec){.ctr = rt->ctr, .spec_id = e->id, .t0 = t, .at_ns = at_ns,
                               .p = permits, .d1 = d1};
    return (uint64_t)rt->nonce << 32 | rt->ctr;
}

/* Decide `permits` on key `name` under spec e at now_ns (the clock unless
 * `fixed`), write and replicate an admission, a reservation or a change of
 * spec (not for PEEK), and reply.  max_wait_ns: RESERVE's bound on a
 * bucket's wait. */
static int decide_key(RedisModuleCtx *ctx, RedisModuleString *name, const spec_entry *e,
                      uint64_t permits, uint64_t max_wait_ns, uint64_t now_ns, bool fixed, mode m)
{
    const sluice__profile *pf = &e->pf;
    /* opened for reading: a refusal touches nothing (no WATCH is broken,
     * no client-side cache invalidated); reopened to write */
    RedisModuleKey *key = rm.OpenKey(ctx, name, RM_READ);
    const int type = rm.KeyType(key);
    sluice__state st;
    memset(&st, 0, sizeof st);
    static rsv_table rt;
    memset(&rt, 0, sizeof rt);
    size_t old_len = 0;
    bool changed = false;
    if (type == RM_KEYTYPE_STRING) {
        const unsigned char *v = (const unsigned char *)rm.StringDMA(key, &old_len, RM_READ);
        char why[256] = "";
        int64_t tat;
        const char *fail = NULL;
        if (!cell_tat(v, old_len, &tat))
            fail = read_state(e, v, old_len, now_ns, &st, &rt, &changed, why, sizeof why);
        else if (m == M_THROTTLE)
            cell_state(pf, tat, now_ns, &st); /* redis-cell's, carried over */
        else
            fail = "the key holds a redis-cell value (a TAT); "
                   "SLUICE.THROTTLE reads it, SLUICE.RESET deletes it";
        if (fail) {
            rm.CloseKey(key);
            return reply_errf(ctx, "ERR sluice: %s%s%s%s", fail, why[0] ? " (" : "", why,
                              why[0] ? ")" : "");
        }
    } else if (type != RM_KEYTYPE_EMPTY) {
        rm.CloseKey(key);
        return rm.ReplyWithError(ctx, RM_WRONGTYPE);
    }

    const uint64_t t = sluice__clamp_time(&st, now_ns);
    sluice_result r;
    memset(&r, 0, sizeof r);
    /* a bucket books the future; a window's reservation is a decision */
    const bool ok = m == M_RESERVE && pf->ops->bucket
                        ? sluice__bucket_reserve(pf, &st, t, permits, max_wait_ns, &r)
                        : sluice__decide(pf, &st, now_ns, permits, UINT64_MAX, &r);
    if (r.error) {
        sluice__state_fini(pf, &st);
        rm.CloseKey(key);
        return rm.ReplyWithError(ctx, "ERR sluice: out of memory");
    }
    const uint64_t rest = sluice__rest_at(pf, &st);
    const bool admitted = ok && permits > 0;
    const bool reserved = ok && m == M_RESERVE;
    uint64_t id = 0;
    if (reserved)
        id = rsv_add(&rt, e, t, pf->ops->bucket ? t + r.wait_ns : t, permits,
                     pf->ops->bucket ? st.u.bk.deficit : 0);
    const bool write = m != M_PEEK && (admitted || changed || reserved);
    if (write) {
        rm.CloseKey(key);
        key = rm.OpenKey(ctx, name, RM_READ | RM_WRITE);
        /* a state at rest with no reservation (a change of spec that
         * admits nothing) is as good as no key: store_key deletes it */
        if (!store_key(ctx, key, name, type, old_len, e, &st, &rt, t, fixed)) {
            sluice__state_fini(pf, &st);
            rm.CloseKey(key);
            return rm.ReplyWithError(ctx, "ERR sluice: cannot write the key");
        }
    }
    sluice__state_fini(pf, &st);
    rm.CloseKey(key);

    /* a burst may pass 2^63 permits (at more than one per ns) */
    const long long remaining = r.remaining > (uint64_t)INT64_MAX ? INT64_MAX : (long long)r.remaining;
    if (m == M_THROTTLE) {
        /* redis-cell's reply: limited, limit, remaining, retry_after s (-1
         * when allowed or never), reset_after s (until the bucket is full) */
        rm.ReplyWithArray(ctx, 5);
        rm.ReplyWithLongLong(ctx, ok ? 0 : 1);
        rm.ReplyWithLongLong(ctx, (long long)pf->capacity);
        rm.ReplyWithLongLong(ctx, remaining);
        rm.ReplyWithLongLong(ctx, ok ? -1 : ceil_units(r.retry_after_ns, 1000000000u));
        rm.ReplyWithLongLong(ctx, ceil_units(rest > t ? (int64_t)(rest - t) : 0, 1000000000u));
        return RM_OK;
    }
    rm.ReplyWithArray(ctx, m == M_RESERVE ? 5 : 4);
    rm.ReplyWithLongLong(ctx, ok ? 1 : 0);
    rm.ReplyWithLongLong(ctx, remaining);
    rm.ReplyWithLongLong(ctx, ok ? 0 : ceil_units(r.retry_after_ns, 1000000u));
    rm.ReplyWithLongLong(ctx, r.wait_ns > (uint64_t)INT64_MAX ? -1
                                                              : ceil_units((int64_t)r.wait_ns, 1000000u));
    if (m == M_RESERVE) rm.ReplyWithLongLong(ctx, (long long)id);
    return RM_OK;
}

/* ---- the commands ------------------------------------------------------ */

/* SLUICE.ACQUIRE key spec [permits] [AT ns] and SLUICE.PEEK (same args). */
static int cmd_decide(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, mode m)
{
    uint64_t at = 0;
    const int has_at = take_at(ctx, argv, &argc, 3, &at);
    if (has_at < 0) return RM_OK;
    if (argc != 3 && argc != 4) return rm.WrongArity(ctx);
    uint64_t permits = 1;
    if (argc == 4 && !arg_u64(argv[3], 0, UINT64_MAX, &permits))
        return reply_bad_arg(ctx, "permits", argv[3], "a whole number from 0 to 2^64-1");
    size_t n;
    const char *s = rm.StringPtrLen(argv[2], &n);
    char err[256];
    const spec_entry *e = spec_get(s, n, err, sizeof err);
    if (!e) return reply_errf(ctx, "ERR sluice: bad spec: %s", err);
    return decide_key(ctx, argv[1], e, permits, 0, has_at ? at : realtime_ns(), has_at, m);
}

static int cmd_acquire(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return cmd_decide(ctx, argv, argc, M_ACQUIRE);
}

static int cmd_peek(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return cmd_decide(ctx, argv, argc, M_PEEK);
}

/* SLUICE.THROTTLE key max_burst count period [quantity] [AT ns]: a token
 * bucket of max_burst + 1 permits refilled at count per period seconds,
 * i.e. the spec "token-bucket COUNT/PERIODs burst=MAX_BURST+1". */
static int cmd_throttle(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    uint64_t at = 0;
    const int has_at = take_at(ctx, argv, &argc, 5, &at);
    if (has_at < 0) return RM_OK;
    if (argc != 5 && argc != 6) return rm.WrongArity(ctx);
    uint64_t max_burst, count, period, quantity = 1;
    if (!arg_u64(argv[2], 0, (uint64_t)INT64_MAX - 1, &max_burst))
        return reply_bad_arg(ctx, "max_burst", argv[2], "a whole number from 0 to 2^63-2");
    if (!arg_u64(argv[3], 1, SLUICE_MAX_LIMIT, &count))
        return reply_bad_arg(ctx, "count", argv[3], "a whole number from 1 to 10^12 (permits per period)");
    if (!arg_u64(argv[4], 1, SLUICE_MAX_PERIOD_NS / 1000000000u, &period))
        return reply_bad_arg(ctx, "period", argv[4],
                             "a whole number of seconds from 1 to 3153600000 (36500 days)");
    if (argc == 6 && !arg_u64(argv[5], 0, UINT64_MAX, &quantity))
        return reply_bad_arg(ctx, "quantity", argv[5], "a whole number from 0 to 2^64-1");
    char err[256];
    const spec_entry *e = throttle_spec(max_burst, count, period, err, sizeof err);
    if (!e) return reply_errf(ctx, "ERR sluice: bad rate: %s", err);
    return decide_key(ctx, argv[1], e, quantity, 0, has_at ? at : realtime_ns(), has_at, M_THROTTLE);
}

/* SLUICE.RESERVE key spec permits [max_wait_ms] [AT ns]: take `permits`
 * now, to be used after the reply's wait (a bucket books the future, as
 * sluice_reserve_at; a window decides at once), and a reservation id for
 * SETTLE and CANCEL.  max_wait_ms bounds a bucket's wait (none by
 * default).  Reply: ACQUIRE's four numbers, then the id (0 when refused). */
static int cmd_reserve(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    uint64_t at = 0;
    const int has_at = take_at(ctx, argv, &argc, 4, &at);
    if (has_at < 0) return RM_OK;
    if (argc != 4 && argc != 5) return rm.WrongArity(ctx);
    uint64_t permits, max_wait_ms = UINT64_MAX / 1000000u;
    if (!arg_u64(argv[3], 0, UINT64_MAX, &permits))
        return reply_bad_arg(ctx, "permits", argv[3], "a whole number from 0 to 2^64-1");
    if (argc == 5 && !arg_u64(argv[4], 0, (uint64_t)INT64_MAX / 1000000u, &max_wait_ms))
        return reply_bad_arg(ctx, "max_wait_ms", argv[4], "a whole number of ms from 0 to 9223372036854");
    size_t n;
    const char *s = rm.StringPtrLen(argv[2], &n);
    char err[256];
    const spec_entry *e = spec_get(s, n, err, sizeof err);
    if (!e) return reply_errf(ctx, "ERR sluice: bad spec: %s", err);
    const uint64_t max_wait = argc == 5 ? max_wait_ms * 1000000u : UINT64_MAX;
    return decide_key(ctx, argv[1], e, permits, max_wait, has_at ? at : realtime_ns(), has_at,
                      M_RESERVE);
}

/* Reply that reservation `id` is not open on `name` (nothing changed). */
static int reply_no_rsv(RedisModuleCtx *ctx, uint64_t id, RedisModuleString *name)
{
    size_t n;
    const char *k = rm.StringPtrLen(name, &n);
    return reply_errf(ctx,
                      "ERR sluice: no open reservation %llu on key \"%.*s%s\" (settled, cancelled, "
                      "dropped, expired, or another key's); nothing changed",
                      (unsigned long long)id, (int)(n > 40 ? 40 : n), k, n > 40 ? "..." : "");
}

/* SLUICE.SETTLE key id actual [AT ns] (settle) and SLUICE.CANCEL key id
 * [AT ns]: finish reservation `id` of `key` -- settled at `actual`
 * permits (docs/decisions.md 3.10; reply 1), or cancelled, a bucket's
 * only (reply 1 when the permits went back, 0 when their time had come
 * and they count as used).  Either way the id is done: a second SETTLE or
 * CANCEL is refused with nothing changed, as is an unknown id. */
static int cmd_finish(RedisModuleCtx *ctx, RedisModuleString **argv, int argc, bool settle)
{
    uint64_t at = 0;
    const int has_at = take_at(ctx, argv, &argc, settle ? 4 : 3, &at);
    if (has_at < 0) return RM_OK;
    if (argc != (settle ? 4 : 3)) return rm.WrongArity(ctx);
    uint64_t id, actual = 0;
    if (!arg_u64(argv[2], 1, (uint64_t)INT64_MAX, &id))
        return reply_bad_arg(ctx, "reservation id", argv[2], "an id that SLUICE.RESERVE returned");
    if (settle && !arg_u64(argv[3], 0, UINT64_MAX, &actual))
        return reply_bad_arg(ctx, "actual", argv[3], "a whole number from 0 to 2^64-1 (the permits used)");
    const uint64_t now_ns = has_at ? at : realtime_ns();
    RedisModuleKey *key = rm.OpenKey(ctx, argv[1], RM_READ);
    const int type = rm.KeyType(key);
    if (type != RM_KEYTYPE_STRING) {
        rm.CloseKey(key);
        return type == RM_KEYTYPE_EMPTY ? reply_no_rsv(ctx, id, argv[1])
                                        : rm.ReplyWithError(ctx, RM_WRONGTYPE);
    }
    size_t old_len = 0;
    const unsigned char *v = (const unsigned char *)rm.StringDMA(key, &old_len, RM_READ);
    static value_hdr h;
    if (!parse_header(v, old_len, &h) || h.rsv_bad) {
        rm.CloseKey(key);
        return rm.ReplyWithError(ctx, h.rsv_bad ? "ERR sluice: the key holds a damaged sluice state"
                                                : "ERR sluice: the key holds a string that is not a sluice state");
    }
    unsigned i = 0;
    while (i < h.rsv.n && !(id >> 32 == h.rsv.nonce && (uint32_t)id == h.rsv.r[i].ctr)) i++;
    if (i == h.rsv.n) {
        rm.CloseKey(key);
        return reply_no_rsv(ctx, id, argv[1]);
    }
    char err[256] = "";
    const spec_entry *e = spec_get(h.canon, h.canon_len, err, sizeof err);
    sluice__state st;
    static rsv_table rt;
    bool changed;
    const char *fail = e ? read_state(e, v, old_len, now_ns, &st, &rt, &changed, err, sizeof err)
                         : "the key holds a damaged sluice state";
    if (fail) {
        rm.CloseKey(key);
        return reply_errf(ctx, "ERR sluice: %s%s%s%s", fail, err[0] ? " (" : "", err, err[0] ? ")" : "");
    }
    const sluice__profile *pf = &e->pf;
    if (!settle && !pf->ops->bucket) {
        sluice__state_fini(pf, &st);
        rm.CloseKey(key);
        return reply_errf(ctx, "ERR sluice: CANCEL is for token-bucket and leaky-bucket; a %s "
                               "reservation is finished with SLUICE.SETTLE; nothing changed",
                          pf->ops->name);
    }
    const rsv_rec x = rt.r[i];
    const uint64_t t = sluice__clamp_time(&st, now_ns);
    long long reply = 1;
    if (settle) {
        /* under another spec (a change since), nothing goes back: the
         * units changed; an excess is still charged */
        if (actual != x.p && (actual > x.p || x.spec_id == e->id)) {
            const sluice__settle_req q = {.t0 = x.t0, .at_ns = x.at_ns, .p = x.p, .a = actual,
                                          .d1 = x.d1};
            if (pf->ops->settle(pf, &st, t, &q) != 0) {
                sluice__state_fini(pf, &st);
                rm.CloseKey(key);
                return rm.ReplyWithError(ctx, "ERR sluice: out of memory; nothing changed");
            }
            if (actual > x.p) rt.flags |= RSV_OVERDRAFT;
        }
    } else {
        reply = x.p > 0 && x.spec_id == e->id && sluice__bucket_give_back(pf, &st, t, x.p, x.at_ns);
    }
    memmove(&rt.r[i], &rt.r[i + 1], (rt.n - i - 1) * sizeof rt.r[0]);
    rt.n--;
    rm.CloseKey(key);
    key = rm.OpenKey(ctx, argv[1], RM_READ | RM_WRITE);
    const bool ok = store_key(ctx, key, argv[1], type, old_len, e, &st, &rt, t, has_at);
    sluice__state_fini(pf, &st);
    rm.CloseKey(key);
    return ok ? rm.ReplyWithLongLong(ctx, reply) : rm.ReplyWithError(ctx, "ERR sluice: cannot write the key");
}

static int cmd_settle(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return cmd_finish(ctx, argv, argc, true);
}

static int cmd_cancel(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    return cmd_finish(ctx, argv, argc, false);
}

/* SLUICE.RESET key: delete a sluice state or a redis-cell value (another
 * kind of value is an error and stays).  The key is opened for reading to
 * check it, and for writing only to delete: closing a key opened for
 * writing counts as touching it (other clients' WATCH breaks). */
static int cmd_reset(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 2) return rm.WrongArity(ctx);
    RedisModuleKey *key = rm.OpenKey(ctx, argv[1], RM_READ);
    const int type = rm.KeyType(key);
    if (type == RM_KEYTYPE_EMPTY) {
        rm.CloseKey(key);
        return rm.ReplyWithLongLong(ctx, 0);
    }
    size_t n = 0;
    const unsigned char *v =
        type == RM_KEYTYPE_STRING ? (const unsigned char *)rm.StringDMA(key, &n, RM_READ) : NULL;
    value_hdr h;
    int64_t tat;
    if (!v || (!parse_header(v, n, &h) && !cell_tat(v, n, &tat))) {
        rm.CloseKey(key);
        return rm.ReplyWithError(ctx, type == RM_KEYTYPE_STRING
                                          ? "ERR sluice: the key holds a string that is not a sluice state"
                                          : RM_WRONGTYPE);
    }
    rm.CloseKey(key);
    key = rm.OpenKey(ctx, argv[1], RM_READ | RM_WRITE);
    rm.DeleteKey(key);
    rm.CloseKey(key);
    rm.Replicate(ctx, "DEL", "s", argv[1]);
    return rm.ReplyWithLongLong(ctx, 1);
}

/* ---- loading ----------------------------------------------------------- */

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
    __attribute__((visibility("default")));

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    memcpy(&rm.GetApi, ctx, sizeof rm.GetApi); /* the context's first word */
    if (!rm.GetApi) return RM_ERR;
    if (!api("RedisModule_SetModuleAttribs", &rm.SetModuleAttribs) ||
        !api("RedisModule_CreateCommand", &rm.CreateCommand) ||
        !api("RedisModule_OpenKey", &rm.OpenKey) || !api("RedisModule_CloseKey", &rm.CloseKey) ||
        !api("RedisModule_KeyType", &rm.KeyType) || !api("RedisModule_StringDMA", &rm.StringDMA) ||
        !api("RedisModule_StringTruncate", &rm.StringTruncate) ||
        !api("RedisModule_DeleteKey", &rm.DeleteKey) ||
        !api("RedisModule_SetExpire", &rm.SetExpire) ||
        !api("RedisModule_StringPtrLen", &rm.StringPtrLen) ||
        !api("RedisModule_ReplyWithArray", &rm.ReplyWithArray) ||
        !api("RedisModule_ReplyWithLongLong", &rm.ReplyWithLongLong) ||
        !api("RedisModule_ReplyWithError", &rm.ReplyWithError) ||
        !api("RedisModule_WrongArity", &rm.WrongArity) ||
        !api("RedisModule_Replicate", &rm.Replicate) || !api("RedisModule_Log", &rm.Log))
        return RM_ERR;
    if (api("RedisModule_IsModuleNameBusy", &rm.IsModuleNameBusy) && rm.IsModuleNameBusy("sluice"))
        return RM_ERR;
    rm.SetModuleAttribs(ctx, "sluice", SLUICE_VERSION_NUMBER, RM_APIVER_1);
    /* SET ... PXAT and an absolute expiry: Redis >= 6.2.2 */
    if (!api("RedisModule_SetAbsExpire", &rm.SetAbsExpire)) {
        rm.Log(ctx, "warning", "sluice: this Redis has no RedisModule_SetAbsExpire (6.2.2 or later is needed)");
        return RM_ERR;
    }
    g_testclock = false;
    for (int i = 0; i < argc; i++) {
        if (arg_is(argv[i], "testclock")) {
            g_testclock = true;
        } else {
            size_t n;
            const char *s = rm.StringPtrLen(argv[i], &n);
            rm.Log(ctx, "warning", "sluice: unknown module argument \"%.*s\" (the only one is testclock)",
                   (int)(n > 64 ? 64 : n), s);
            return RM_ERR;
        }
    }
    if (rm.CreateCommand(ctx, "sluice.acquire", cmd_acquire, "write deny-oom", 1, 1, 1) != RM_OK ||
        rm.CreateCommand(ctx, "sluice.peek", cmd_peek, "readonly fast", 1, 1, 1) != RM_OK ||
        rm.CreateCommand(ctx, "sluice.throttle", cmd_throttle, "write deny-oom", 1, 1, 1) != RM_OK ||
        rm.CreateCommand(ctx, "sluice.reset", cmd_reset, "write", 1, 1, 1) != RM_OK ||
        rm.CreateCommand(ctx, "sluice.reserve", cmd_reserve, "write deny-oom", 1, 1, 1) != RM_OK ||
        rm.CreateCommand(ctx, "sluice.settle", cmd_settle, "write", 1, 1, 1) != RM_OK ||
        rm.CreateCommand(ctx, "sluice.cancel", cmd_cancel, "write", 1, 1, 1) != RM_OK)
        return RM_ERR;
    if (g_testclock)
        rm.Log(ctx, "warning", "sluice: testclock: the commands accept AT time_ns (for tests only)");
    return RM_OK;
}
