/* fuzz_conc_region.c -- fuzz the concurrency limits in a shared region
 * (src/table/region_conc.c) over a damaged region.
 *
 * As fuzz_region.c is for the rate tables: a damaged region must not make
 * the processes attached crash, hang, grow or write outside it
 * (sluice/concurrency.h, "a table of concurrency limits in a shared
 * region").  The input is a small program over one region made here (an
 * anonymous mapping):
 *
 *   byte 0      the spec (one of SPECS: with and without a lease, N from 1
 *               to 16) and max_keys (8, or 300: two shards); bit 5: the
 *               wheel of the queued acquires is freed before the handles
 *   traffic     commands on the valid region until a 0xff byte (at most 64)
 *   damage      patches until a 0xfe byte (at most 64): an offset anywhere
 *               in the region, a width (1, 2, 4, 8 bytes) and a value
 *   calls       commands again, through the handle made before the damage
 *               and through one attached after it (when attach accepts the
 *               damaged header)
 *   stats       the region-wide read of the metrics through both handles
 *               (sluice_concurrency_region_stats_get: bounded, clamped)
 *
 * A command: acquire (a key of ten, 0 .. N + 1 permits), release one of
 * eight handles (as given, or with a field changed), held, a blocking
 * acquire with a time-out of 0 (it never sleeps) and the waiters' count,
 * a probe, a queued acquire's command (queue 0 .. N + 1 permits with a
 * deadline up to 65 s on, cancel a known id or any, advance the wheel to
 * the world's time: callbacks keep or release what they are given); times
 * move on by up to 65 s, jump years, or stand near 2^63.
 *
 * Checked: sanitizers (no read or write outside the region or a buffer, no
 * undefined behaviour), libFuzzer's -timeout and -rss_limit_mb, and
 * FUZZ_CHECK: an acquire's return is res.allowed, an admission fills the
 * handle with the permits asked and reports remaining <= N, errors are the
 * documented codes; a queued acquire is called back with 0 and 1 .. N
 * permits or SLUICE_ETIMEDOUT, and never after its handle is freed.  Wrong answers are not checked: a damaged region may
 * give them.
 *
 * What the damage never writes: the init word and the shards' lock words.
 * A word naming a live process at its true start time is a live holder by
 * every test the library can make -- a forged one stalls its shard, as a
 * co-tenant holding a lock for ever does (documented) -- and this process
 * is live.
 */
#define _GNU_SOURCE
#include <sluice.h>
#include <string.h>
#include <sys/mman.h>

#include "fuzz.h"

static const char *const SPECS[] = {
    "concurrency 1", "concurrency 4", "concurrency 3 lease=1s", "concurrency 16 lease=250ms",
};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])
#define CHEAD 512 /* region_conc.c's header bytes; a shard is a 64-byte line */

typedef struct world {
    sluice_concurrency_region *r;
    uint64_t n;
    uint64_t t;
    sluice_region_permit pm[8];
    sluice_wheel *wh;  /* the queued acquires' wheel, advanced to t by hand */
    uint64_t ids[8];   /* ids of queued acquires (a cancel picks one, or any) */
    unsigned calls;    /* callbacks run */
} world;

/* A queued acquire's callback: the documented statuses, a grant within
 * 1 .. N, kept in a free handle slot (released later by the traffic) or
 * released at once. */
static void on_permit(void *arg, uint64_t id, int status, sluice_region_permit *pm,
                      uint64_t now_ns)
{
    world *w = arg;
    w->calls++;
    FUZZ_CHECK(id >= 1, "callback id %llu", (unsigned long long)id);
    FUZZ_CHECK(status == 0 || status == SLUICE_ETIMEDOUT, "callback status %d", status);
    FUZZ_CHECK((status == 0) == (pm != NULL), "status %d with pm %p", status, (void *)pm);
    if (status != 0) return;
    FUZZ_CHECK(pm->permits >= 1 && pm->permits <= w->n, "granted %llu of N %llu",
               (unsigned long long)pm->permits, (unsigned long long)w->n);
    for (unsigned i = 0; i < 8; i++)
        if (w->pm[i].permits == 0) {
            w->pm[i] = *pm;
            return;
        }
    (void)sluice_region_permit_release_at(pm, now_ns);
}

/* Queue, cancel, or advance the wheel (to the world's time). */
static void async_command(world *w, fuzz_in *in, const char *key, size_t keylen)
{
    const uint8_t how = fuzz_u8(in);
    switch (how % 3) {
    case 0: { /* queue: 0 .. N + 1 permits, a deadline up to 65 s on */
        const uint64_t p = fuzz_u8(in) % (w->n + 2);
        const uint64_t d = fuzz_u16(in) * (uint64_t)1000000;
        const uint64_t deadline = w->t > UINT64_MAX - d ? UINT64_MAX : w->t + d;
        uint64_t id = 0;
        const int rc = sluice_concurrency_region_acquire_async_at(w->r, w->wh, key, keylen, p,
                                                                  w->t, deadline, on_permit, w,
                                                                  &id);
        FUZZ_CHECK(rc == 0 || rc == SLUICE_EFULL || rc == SLUICE_ENOMEM ||
                       (p == 0 && rc == SLUICE_EINVAL) || (p > w->n && rc == SLUICE_ERANGE),
                   "queued acquire of %llu: %d", (unsigned long long)p, rc);
        FUZZ_CHECK(rc != 0 || id >= 1, "queued with id %llu", (unsigned long long)id);
        if (rc == 0) w->ids[how / 3 % 8] = id;
        break;
    }
    case 1: { /* cancel a known id, or any */
        const uint64_t id = how & 0x80 ? fuzz_u64(in) : w->ids[fuzz_u8(in) % 8];
        const int rc = sluice_concurrency_region_async_cancel_at(w->r, id, w->t);
        FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT, "cancel %d", rc);
        break;
    }
    default:
        (void)sluice_wheel_advance(w->wh, w->t);
        break;
    }
}

static void command(world *w, fuzz_in *in)
{
    const uint8_t op = fuzz_u8(in);
    const uint8_t a = fuzz_u8(in);
    char key[10];
    const size_t keylen = (size_t)(a % 10);
    memset(key, 'k', sizeof key);
    key[0] = (char)('0' + a % 10);
    switch (op >> 6) { /* the time */
    case 0: w->t += fuzz_u16(in) * (uint64_t)1000000; break;
    case 1: w->t += fuzz_u8(in) * (uint64_t)365 * 86400 * 1000000000; break;
    case 2: w->t = (uint64_t)INT64_MAX - fuzz_u16(in); break;
    default: break;
    }
    sluice_result res;
    switch (op & 3) {
    case 0: { /* acquire */
        const uint64_t p = fuzz_u8(in) % (w->n + 2);
        sluice_region_permit *pm = &w->pm[fuzz_u8(in) % 8];
        if (pm->permits) break; /* keep held handles to release */
        const bool ok = sluice_concurrency_region_acquire_at(w->r, key, keylen, p, w->t, pm, &res);
        FUZZ_CHECK(ok == res.allowed, "acquire returned %d, res.allowed %d", ok, res.allowed);
        FUZZ_CHECK(!ok || pm->permits == p, "admitted %llu, handle holds %llu",
                   (unsigned long long)p, (unsigned long long)pm->permits);
        FUZZ_CHECK(!ok || res.remaining <= w->n, "remaining %llu > N %llu",
                   (unsigned long long)res.remaining, (unsigned long long)w->n);
        FUZZ_CHECK(ok || pm->permits == 0, "refused, and the handle holds %llu",
                   (unsigned long long)pm->permits);
        FUZZ_CHECK(res.error == 0 || res.error == SLUICE_EFULL, "acquire error %d", res.error);
        break;
    }
    case 1: { /* release, the handle as given or changed */
        const unsigned i = fuzz_u8(in) % 8;
        sluice_region_permit pm = w->pm[i];
        const uint8_t how = fuzz_u8(in);
        if (how == 1) pm.slot = fuzz_u32(in);
        if (how == 2) pm.holder = fuzz_u32(in);
        if (how == 3) pm.gen = fuzz_u32(in);
        if (how == 4) pm.shard = fuzz_u32(in);
        if (how == 5) pm.permits = fuzz_u64(in);
        const int rc = sluice_region_permit_release_at(&pm, w->t);
        FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT || rc == SLUICE_EINVAL, "release %d", rc);
        if (how == 0 && rc == 0) w->pm[i].permits = 0;
        break;
    }
    case 2:
        if (a & 0x80) { /* a blocking acquire that does not wait (time-out 0), the line's count */
            sluice_region_permit pm;
            const uint64_t p = 1 + fuzz_u8(in) % w->n;
            const int rc = sluice_concurrency_region_acquire(w->r, key, keylen, p, 0, &pm, &res);
            FUZZ_CHECK(rc == 0 || rc == SLUICE_ETIMEDOUT || rc == SLUICE_EFULL,
                       "blocking acquire %d", rc);
            FUZZ_CHECK(rc == res.error, "returned %d, res.error %d", rc, res.error);
            FUZZ_CHECK((rc == 0 ? p : 0) == pm.permits, "returned %d, the handle holds %llu", rc,
                       (unsigned long long)pm.permits);
            if (rc == 0) (void)sluice_region_permit_release_at(&pm, w->t);
            (void)sluice_concurrency_region_waiting(w->r, key, keylen);
            break;
        }
        (void)sluice_concurrency_region_held_at(w->r, key, keylen, w->t);
        break;
    default: { /* a queued acquire's command, or a probe */
        if (a & 0x40) {
            async_command(w, in, key, keylen);
            break;
        }
        sluice_region_permit pm;
        const bool ok = sluice_concurrency_region_acquire_at(w->r, key, keylen, 0, w->t, &pm, &res);
        FUZZ_CHECK(ok && pm.permits == 0, "a probe: %d, %llu held", ok,
                   (unsigned long long)pm.permits);
        break;
    }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    const uint8_t b0 = fuzz_u8(&in);
    const char *spec = SPECS[b0 % NSPECS];
    const size_t max_keys = (b0 >> 4) & 1 ? 300 : 8;
    const size_t n = sluice_concurrency_region_size(spec, max_keys, NULL, 0);
    FUZZ_CHECK(n > CHEAD, "size %zu", n);
    unsigned char *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 0;
    world w = {.n = 0, .t = 1};
    w.wh = sluice_wheel_new(0, 64, 0, NULL, 0);
    FUZZ_CHECK(w.wh != NULL, "wheel");
    w.r = sluice_concurrency_region_attach(m, n, spec, max_keys, NULL, 0);
    FUZZ_CHECK(w.r != NULL, "attach %s", spec);
    w.n = strtoull(spec + strlen("concurrency "), NULL, 10);
    for (unsigned c = 0; c < 64 && in.n && in.p[0] != 0xff; c++) command(&w, &in);
    (void)fuzz_u8(&in); /* the 0xff */
    const size_t nshards = max_keys == 300 ? 2 : 1;
    for (unsigned d = 0; d < 64 && in.n && in.p[0] != 0xfe; d++) {
        const size_t at = fuzz_u32(&in) % n;
        const unsigned width = 1u << (fuzz_u8(&in) & 3);
        const uint64_t v = fuzz_u64(&in);
        if (at < 8 || at + width > n) continue; /* the init word */
        bool lock = false;
        for (size_t k = 0; k < nshards; k++) /* a shard's lock word */
            lock |= at < CHEAD + k * 64 + 8 && at + width > CHEAD + k * 64;
        if (!lock) memcpy(m + at, &v, width);
    }
    (void)fuzz_u8(&in); /* the 0xfe */
    sluice_concurrency_region *again = sluice_concurrency_region_attach(m, n, spec, max_keys, NULL, 0);
    for (unsigned c = 0; c < 64 && in.n; c++) {
        if (again && (c & 1)) {
            sluice_concurrency_region *first = w.r;
            w.r = again;
            command(&w, &in);
            w.r = first;
        } else {
            command(&w, &in);
        }
    }
    for (unsigned h = 0; h < 2; h++) { /* the metrics' read: clamped whatever the damage */
        sluice_concurrency_region *r = h ? again : w.r;
        sluice_concurrency_region_stats st;
        if (!r) continue;
        FUZZ_CHECK(sluice_concurrency_region_stats_get(r, &st) == 0, "stats");
        FUZZ_CHECK(st.keys <= max_keys && st.held <= st.keys * w.n && st.limit == w.n &&
                       st.max_keys == max_keys,
                   "stats: %llu keys, %llu held", (unsigned long long)st.keys,
                   (unsigned long long)st.held);
    }
    /* either order: the handles drop their queued acquires (never called
     * back after), or the wheel does */
    const unsigned calls = w.calls;
    if (b0 & 0x20) {
        sluice_wheel_free(w.wh);
        FUZZ_CHECK(w.calls == calls, "called back by the wheel's free");
        sluice_concurrency_region_free(again);
        sluice_concurrency_region_free(w.r);
    } else {
        sluice_concurrency_region_free(again);
        sluice_concurrency_region_free(w.r);
        FUZZ_CHECK(sluice_wheel_pending(w.wh) == 0, "timers left after the handles' free");
        (void)sluice_wheel_advance(w.wh, UINT64_MAX);
        FUZZ_CHECK(w.calls == calls, "called back after the handle's free");
        sluice_wheel_free(w.wh);
    }
    munmap(m, n);
    return 0;
}
