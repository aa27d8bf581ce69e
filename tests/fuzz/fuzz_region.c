/* fuzz_region.c -- fuzz a shared table (src/table/region_table.c) over a damaged
 * region.
 *
 * The processes attached to a region trust each other, but a damaged
 * region -- a crashed writer, a buggy co-tenant, a stray write -- must not
 * make the others crash, hang, grow without bound or write outside it
 * (include/sluice.h, "What a damaged region can do").  The input is a small
 * program over one region made here (an anonymous mapping, with a guard
 * page on each side):
 *
 *   byte 0      the spec (one of SPECS: every algorithm, packed copies and
 *               whole states, the window logs' rings) and max_keys (8, or
 *               300: two shards)
 *   traffic     commands on the valid region, as any process makes them:
 *               until a 0xff byte (at most 64 commands)
 *   damage      patches, until a 0xfe byte (at most 64): an area (header,
 *               shards, slots, configurations, stripes, anywhere), an
 *               offset in it, a width (1, 2, 4, 8 bytes) and a value
 *   calls       commands again, on the damaged region, through the handle
 *               made before the damage and through one attached after it
 *
 * A command: try_acquire, a burst of four keys, peek, remove, reset, a
 * scan to its end, statistics, a change of spec (to one of the same
 * algorithm, or one that must be refused), a composite of two keys and an
 * in-process limiter, a reservation (up to four open at once, across the
 * damage: the slots' generations are patched with the rest) and its
 * settle or cancel, the open ones closed after both handles are freed;
 * keys from a set of twelve (lengths 0 .. max_key_bytes,
 * and one too long), times that move on by up to 65 s, jump years, or
 * stand near 2^63.
 *
 * Checked: sanitizers (ASan, UBSan: no read or write outside the region or
 * a buffer, no undefined behaviour); libFuzzer's -timeout and -rss_limit_mb
 * (no hang, no growth); and FUZZ_CHECK: answers are answers (a decision's
 * return value is res.allowed, errors are SLUICE_E codes; a scan hands out
 * no key longer than max_key_bytes and ends; a burst admits at most its
 * requests).  Wrong answers are not checked: a damaged region may give
 * them (that is the contract).
 *
 * One thing the damage never does here: name a live process, at its true
 * start time, as the holder of a lock (a shard's, the changes', the init
 * word).  Such a word is a live holder by every test the library can make
 * -- a co-tenant that holds a lock for ever stalls that shard as any lock
 * would (include/sluice.h) -- so a patch that would forge one is turned
 * into one naming a pid no process has (a dead holder, taken over).
 */
#define _GNU_SOURCE
#include <sluice.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"

static const char *const SPECS[] = {
    "token-bucket 10/s burst=5",          "leaky-bucket 5/s capacity=3",
    "leaky-bucket 5/s capacity=3 nodelay", "fixed-window 4/s",
    "sliding-approx 6/s",                 "sliding-log 5/s",
    "sliding-wheel 6/s slots=4",          "token-bucket 1000000000000/d",
};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])
/* changes of spec: one of the same algorithm, then one refused */
static const char *const CHANGES[NSPECS][2] = {
    {"token-bucket 20/s burst=7", "fixed-window 1/s"},
    {"leaky-bucket 9/s capacity=2", "leaky-bucket 5/s capacity=3 nodelay"},
    {"leaky-bucket 1/s capacity=4 nodelay", "token-bucket 1/s"},
    {"fixed-window 9/2s", "sliding-log 1/s"},
    {"sliding-approx 2/s", "sliding-approx 0/s"},
    {"sliding-log 7/2s", "sliding-log 100000/s"},
    {"sliding-wheel 2/s slots=4", "sliding-wheel 6/s slots=2"},
    {"token-bucket 5/h", "token-bucket 1/s burst=100000000000000"},
};

#define KEY_BYTES 24
#define NKEYS 12

typedef struct ctx {
    unsigned char *reg;
    size_t size;
    const char *spec;
    size_t max_keys;
    int alg;
    sluice_table *t;
    sluice_limiter *lim;
    uint64_t now;
    uint32_t nshards, cap, stride; /* the layout, read before any damage */
    sluice_table_reservation rv[4]; /* reservations, open across the damage */
} ctx;

static void key_of(unsigned i, char *buf, size_t *len)
{
    static const size_t lens[NKEYS] = {0, 1, 2, 3, 5, 8, 9, 15, 16, 17, 24, 25};
    *len = lens[i % NKEYS];
    for (size_t j = 0; j < *len; j++) buf[j] = (char)('a' + (i * 7 + j) % 26);
}

static uint64_t next_time(ctx *c, fuzz_in *in)
{
    const uint8_t how = fuzz_u8(in);
    switch (how & 7) {
    case 0: break; /* the same instant */
    case 1: c->now += (uint64_t)(how >> 3) * 1000000; break;
    case 2: c->now += (uint64_t)fuzz_u16(in) * 1000000; break;
    case 3: c->now += (uint64_t)365 * 86400 * 1000000000ull * (how >> 3); break; /* years */
    case 4: return (uint64_t)INT64_MAX - (how >> 3); /* near 2^63, this call only */
    case 5: return c->now - (how >> 3) * 1000000ull; /* earlier */
    default: c->now += how >> 3; break;
    }
    if (c->now > (uint64_t)INT64_MAX / 2) c->now = (uint64_t)INT64_MAX / 2;
    return c->now;
}

static int scan_fn(const void *key, size_t keylen, const sluice_key_state *st, void *arg)
{
    (void)key;
    (void)st;
    FUZZ_CHECK(keylen <= KEY_BYTES, "scan handed out a key of %zu bytes", keylen);
    (*(size_t *)arg)++;
    return 0;
}

static void check_result(bool ok, const sluice_result *r)
{
    FUZZ_CHECK(ok == r->allowed, "returned %d, res.allowed %d", ok, r->allowed);
    FUZZ_CHECK(r->error <= 0 && r->error >= -10, "error %d", r->error);
}

static void command(ctx *c, sluice_table *t, fuzz_in *in)
{
    const uint8_t op = fuzz_u8(in);
    char key[32];
    size_t len;
    key_of(fuzz_u8(in), key, &len);
    const uint64_t permits = fuzz_u8(in) % 6;
    const uint64_t now = next_time(c, in);
    sluice_result r;
    memset(&r, 0, sizeof r);
    switch (op % 12) {
    case 0:
    case 1: check_result(sluice_table_try_acquire_at(t, key, len, permits, now, &r), &r); break;
    case 2: {
        char k[4][32];
        const void *keys[4];
        size_t lens[4];
        uint64_t ps[4];
        sluice_result rs[4];
        for (int i = 0; i < 4; i++) {
            key_of(fuzz_u8(in), k[i], &lens[i]);
            keys[i] = k[i];
            ps[i] = permits;
        }
        const size_t n = sluice_table_try_acquire_burst_at(t, 4, keys, lens, ps, now, rs);
        FUZZ_CHECK(n <= 4, "a burst of 4 admitted %zu", n);
        break;
    }
    case 3: {
        sluice_key_state ks;
        const int rc = sluice_table_peek_at(t, key, len, permits, now, &r, &ks);
        FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT || rc == SLUICE_EINVAL, "peek: %d", rc);
        break;
    }
    case 4: {
        const int rc = sluice_table_remove(t, key, len);
        FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT || rc == SLUICE_EINVAL, "remove: %d", rc);
        break;
    }
    case 5: {
        const int rc = sluice_table_reset(t, key, len);
        FUZZ_CHECK(rc == 0 || rc == SLUICE_EINVAL, "reset: %d", rc);
        break;
    }
    case 6: {
        uint64_t cursor = 0;
        size_t seen = 0;
        int rounds = 0;
        do {
            const int rc = sluice_table_scan(t, cursor, 1 + permits * 50, scan_fn, &seen, &cursor);
            FUZZ_CHECK(rc == 0, "scan: %d", rc);
        } while (cursor && ++rounds < 100000);
        FUZZ_CHECK(cursor == 0, "a scan that does not end");
        break;
    }
    case 7: {
        sluice_table_stats st;
        sluice_table_stats_get(t, &st);
        break;
    }
    case 8: {
        char err[256];
        const int rc = sluice_table_reconfigure_at(t, CHANGES[c->alg][permits & 1], now, err,
                                                   sizeof err);
        FUZZ_CHECK(rc <= 0, "reconfigure: %d", rc);
        break;
    }
    case 10: { /* a reservation, left open */
        sluice_table_reservation *rv = &c->rv[fuzz_u8(in) & 3];
        if (rv->table) break;
        const uint64_t wait = (uint64_t)fuzz_u16(in) * 1000000;
        check_result(sluice_table_reserve_at(t, key, len, permits, now, wait, rv, &r), &r);
        FUZZ_CHECK(r.allowed || rv->table == NULL, "a refused reservation holds its table");
        break;
    }
    case 11: { /* one settled or cancelled, perhaps after the damage */
        sluice_table_reservation *rv = &c->rv[fuzz_u8(in) & 3];
        const uint8_t a = fuzz_u8(in);
        if (!rv->table) break;
        const int rc = a & 1 ? sluice_table_reservation_cancel_at(rv, now)
                             : sluice_table_reservation_settle_at(rv, a >> 1, now);
        FUZZ_CHECK(rc == 0 || rc == SLUICE_ENOENT || rc == SLUICE_EINVAL || rc == SLUICE_ENOMEM,
                   "settle or cancel: %d", rc);
        break;
    }
    default: {
        char k2[32];
        size_t len2;
        key_of(fuzz_u8(in), k2, &len2);
        if (len2 == len && memcmp(k2, key, len) == 0) break; /* one key twice: a bad call */
        sluice_limit_ref refs[3] = {sluice_ref_key(t, key, len), sluice_ref_key(t, k2, len2),
                                    sluice_ref_limiter(c->lim)};
        sluice_result per[3];
        check_result(sluice_composite_try_acquire_at(refs, 3, permits, now, &r, per), &r);
        break;
    }
    }
}

/* A lock word that would name a live process other than as a dead or
 * start-less holder (the file's head comment): its pid made one no process
 * has. */
static void defuse(_Atomic uint64_t *w, uint64_t busy)
{
    uint64_t v = atomic_load(w);
    if (v == 0 || v == 1 || (busy && !(v & busy))) return;
    const uint64_t id = v & ~busy;
    const pid_t pid = (pid_t)(uint32_t)id;
    if (pid <= 0 || (id >> 32 & 0x7fffffff) == 0) return; /* taken over at once */
    if (kill(pid, 0) == 0 || pid == getpid())
        atomic_store(w, (v & ~(uint64_t)0xffffffff) | 0x3ffffff0u); /* above pid_max */
}

static void patch(ctx *c, fuzz_in *in)
{
    const uint8_t area = fuzz_u8(in);
    const uint32_t off = fuzz_u32(in);
    const unsigned width = 1u << (fuzz_u8(in) & 3);
    const uint64_t val = fuzz_u64(in);
    const uint32_t nshards = c->nshards, cap = c->cap, stride = c->stride;
    const size_t shards = 512, slots = shards + (size_t)nshards * 128;
    const size_t cfgs = slots + (size_t)nshards * cap * stride, stripes = c->size - 129 * 64;
    size_t at;
    switch (area % 7) {
    case 0: at = off % 512; break;
    case 1: at = shards + off % ((size_t)nshards * 128); break;
    case 2: /* a slot's header word, epochs or copies */
        at = slots + (size_t)(off >> 8) % ((size_t)nshards * cap) * stride + (off & 0xff) % stride;
        break;
    case 3: at = slots + off % (cfgs - slots); break;
    case 4: /* the configurations, the slots' generations */
        at = cfgs + off % (stripes - cfgs);
        break;
    case 5: at = stripes + off % (129 * 64); break;
    default: at = off % c->size; break;
    }
    at &= ~(size_t)(width - 1); /* aligned: as a store of that width would be */
    if (at + width > c->size) return;
    memcpy(c->reg + at, &val, width);
    /* the lock words: the init word, the changes' lock, each shard's */
    defuse((_Atomic uint64_t *)(void *)c->reg, (uint64_t)1 << 63);
    defuse((_Atomic uint64_t *)(void *)(c->reg + 328), 0);
    for (uint32_t k = 0; k < 64 && shards + (size_t)k * 128 < slots; k++)
        defuse((_Atomic uint64_t *)(void *)(c->reg + shards + (size_t)k * 128), 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    ctx c = {0};
    const uint8_t head = fuzz_u8(&in);
    c.alg = (int)(head % NSPECS);
    c.spec = SPECS[c.alg];
    c.max_keys = head & 0x80 ? 300 : 8;
    c.now = 1000000000;
    char err[256];
    c.size = sluice_table_region_size(c.spec, c.max_keys, KEY_BYTES, err, sizeof err);
    FUZZ_CHECK(c.size > 0, "region size of %s: %s", c.spec, err);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t body = (c.size + page - 1) / page * page;
    unsigned char *m = mmap(NULL, body + 2 * page, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    FUZZ_CHECK(m != MAP_FAILED, "mmap");
    mprotect(m, page, PROT_NONE); /* guards: a write outside faults */
    mprotect(m + page + body, page, PROT_NONE);
    c.reg = m + page;
    c.t = sluice_table_attach(c.reg, c.size, c.spec, c.max_keys, KEY_BYTES, 0, err, sizeof err);
    FUZZ_CHECK(c.t != NULL, "attach %s: %s", c.spec, err);
    memcpy(&c.nshards, c.reg + 64, 4);
    memcpy(&c.cap, c.reg + 68, 4);
    memcpy(&c.stride, c.reg + 76, 4);
    c.lim = sluice_limiter_new("token-bucket 100/s", err, sizeof err);
    FUZZ_CHECK(c.lim != NULL, "limiter: %s", err);

    for (int n = 0; n < 64 && in.n && in.p[0] != 0xff; n++) command(&c, c.t, &in);
    (void)fuzz_u8(&in);
    for (int n = 0; n < 64 && in.n && in.p[0] != 0xfe; n++) patch(&c, &in);
    (void)fuzz_u8(&in);
    sluice_table *t2 = sluice_table_attach(c.reg, c.size, c.spec, c.max_keys, KEY_BYTES, 0,
                                           err, sizeof err); /* may be refused: named */
    if (!t2) FUZZ_CHECK(err[0] && fuzz_one_line(err, fuzz_strnlen(err, sizeof err)),
                        "a refusal without a one-line reason");
    for (int n = 0; n < 256 && in.n; n++) command(&c, (n & 1) && t2 ? t2 : c.t, &in);

    sluice_table_free(t2);
    sluice_table_free(c.t);
    /* the open reservations outlive their handles' frees, not the region:
     * each closed at its own permits, which always settles */
    for (int i = 0; i < 4; i++) {
        if (!c.rv[i].table) continue;
        const int rc = sluice_table_reservation_settle_at(&c.rv[i], c.rv[i].permits, c.now);
        FUZZ_CHECK(rc == 0 && c.rv[i].table == NULL, "closing a reservation: %d", rc);
    }
    sluice_limiter_free(c.lim);
    munmap(m, body + 2 * page);
    return 0;
}
