/* region_attach.c -- making and joining a shared table: the layout every
 * process computes alike from the arguments, the region's initialisation,
 * the checks at attach, sluice_table_open's object, and the placement's ops
 * table (skeleton.h) that the public table functions call through.
 * region_table.c has the design; region.h the layout's types.
 *
 * Map:  layout (make_layout, sluice_table_region_size); attaching
 *       (initialise, check_header, the ops table, attach,
 *       sluice_table_attach, sluice__rtable_close); named regions
 *       (sluice__rt_map_named, which region_conc.c's open shares;
 *       sluice_table_open, sluice_table_unlink).
 *
 * Initialisation: the header's init word goes 0 (a zeroed region) -> busy
 * (holder's identity; a compare-and-swap, so one process wins) -> ready,
 * after every field and shard is written.  Others wait (bounded as above);
 * if the initialiser dies, a waiter takes the word from it and initialises
 * again (only the header, the shards and the configurations are written:
 * idempotent on a zeroed region).  Attaching to a ready region compares
 * magic, layout version, the current canonical spec (region_table.c,
 * "Changing the spec"), max_keys, max_key_bytes, the policy and the size,
 * and refuses any difference with a message naming both values; and the boot
 * id: a file outlives a reboot, the monotonic clock its times are on does
 * not.
 *
 * Attaching compares the caller's spec with the region's CURRENT one (so a
 * process started after a change -- nginx after a reload -- attaches with
 * the new spec, and one with the old spec is refused, naming both), and the
 * sizes with the layout of the spec the region was made with.  A changer
 * killed after publishing leaves the rest-time bounds as they were: a full
 * region may refuse a new key that a sweep would have made room for, until
 * those keys' old rest times pass.
 */
#define _GNU_SOURCE
#include "table/region.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- layout ------------------------------------------------------------- */


static int make_layout(const char *spec, size_t max_keys, size_t max_key_bytes, layout *L,
                       char *err, size_t errlen)
{
    memset(L, 0, sizeof *L);
    if (sluice__spec_parse(spec, &L->pf, err, errlen) != 0) return SLUICE_EINVAL;
    if (max_keys < 1 || max_keys > ((size_t)1 << 32)) {
        sluice__errf(err, errlen, "bad max_keys %zu: expected 1 .. 2^32", max_keys);
        return SLUICE_EINVAL;
    }
    if (max_key_bytes > SLUICE_MAX_KEY_BYTES) {
        sluice__errf(err, errlen, "bad max_key_bytes %zu: expected 0 .. %d", max_key_bytes,
                     SLUICE_MAX_KEY_BYTES);
        return SLUICE_EINVAL;
    }
    const sluice__profile *pf = &L->pf;
    L->max_keys = max_keys;
    L->max_key_bytes = max_key_bytes;
    L->ring = pf->alg == SLUICE__SLIDING_LOG || pf->alg == SLUICE__SLIDING_WHEEL;
    if (L->ring) {
        const uint64_t bound = sluice__min_u64(pf->slots, pf->limit);
        if (bound >= RING_MAX) {
            sluice__errf(err, errlen,
                         "%s keeps up to min(N, L) = %llu ring entries per key; a shared table "
                         "holds at most %u (1 MiB per key): lower LIMIT or slots",
                         pf->ops->name, (unsigned long long)bound, RING_MAX - 1);
            return SLUICE_EINVAL;
        }
        uint32_t c = 4;
        while (c < bound + 1) c *= 2; /* room beyond the most held: crash argument 1 */
        L->ring_cap = c;
        L->cb = sizeof(rring);
    } else {
        L->cb = pf->packed ? 16 : (uint32_t)round16(sizeof(sluice__state));
    }
    L->key_off = 16; /* beside the header: a short key's read is one line */
    /* a key longer than max_key_bytes is held by its 16-byte digest */
    L->copy_off = L->key_off + round16(max_key_bytes > SLUICE__DIGEST_BYTES ? max_key_bytes
                                                                            : SLUICE__DIGEST_BYTES);
    L->ring_off = L->copy_off + 2 * (size_t)L->cb;
    L->stride = L->ring_off + (size_t)L->ring_cap * sizeof(sluice__log_entry);
    uint64_t ecap; /* skeleton.h: as in process, at a load of at most 0.75 */
    sluice__table_sizing(max_keys, &L->shard_bits, &ecap);
    L->nshards = 1u << L->shard_bits;
    L->ecap = (uint32_t)ecap;
    L->cap = sluice__table_cap(ecap, 3);
    L->slots_off = HEAD_BYTES + (size_t)L->nshards * sizeof(rshard);
    const u128 cfg_end = (u128)L->slots_off + (u128)L->nshards * L->cap * L->stride +
                         (u128)CFG_K * sizeof(rcfg);
    const u128 gens_end = cfg_end + (u128)L->nshards * L->cap * sizeof(uint32_t);
    const u128 need = ((gens_end + 63) & ~(u128)63) + (u128)(NSTRIPES + 1) * sizeof(rstripe);
    if (need > ((u128)1 << 46)) {
        sluice__errf(err, errlen,
                     "a region for %zu keys of %zu bytes under \"%s\" would take more than 64 TiB",
                     max_keys, max_key_bytes, spec);
        return SLUICE_EINVAL;
    }
    L->need = (size_t)need;
    L->stripes_off = L->need - (size_t)(NSTRIPES + 1) * sizeof(rstripe);
    L->cfg_off = (size_t)cfg_end - (size_t)CFG_K * sizeof(rcfg);
    L->gens_off = (size_t)cfg_end;
    if (sluice__spec_format(pf, L->spec, sizeof L->spec) < 0) {
        sluice__errf(err, errlen, "cannot format the spec \"%s\"", spec);
        return SLUICE_EINVAL;
    }
    return 0;
}

size_t sluice_table_region_size(const char *spec, size_t max_keys, size_t max_key_bytes,
                                char *err, size_t errlen)
{
    layout L;
    if (make_layout(spec, max_keys, max_key_bytes, &L, err, errlen) != 0) return 0;
    return L.need;
}

/* ---- attaching ---------------------------------------------------------- */

/* Whether the header after the init word and the first shard are zero, as
 * in a region never initialised (a cheap check: not every byte). */
static bool zeroed_head(const void *region)
{
    const unsigned char *p = region;
    for (size_t i = 8; i < HEAD_BYTES + sizeof(rshard); i++)
        if (p[i]) return false;
    return true;
}

/* Write the header and the shards of a zeroed region (init word held). */
static void initialise(void *region, const layout *L, unsigned flags)
{
    rhead *h = region;
    h->magic = MAGIC;
    h->version = VERSION;
    h->flags = flags;
    h->need = L->need;
    h->max_keys = L->max_keys;
    h->max_key_bytes = L->max_key_bytes;
    sluice__random_seed(h->seed);
    h->nshards = L->nshards;
    h->cap = L->cap;
    h->ecap = L->ecap;
    h->stride = (uint32_t)L->stride;
    h->cb = L->cb;
    h->ring_cap = L->ring_cap;
    memcpy(h->spec, L->spec, sizeof h->spec);
    sluice__rt_boot_id(h->boot);
    atomic_store_explicit(&h->keys, 0, memory_order_relaxed);
    atomic_store_explicit(&h->epoch, 0, memory_order_relaxed);
    atomic_store_explicit(&h->cfg_lock, 0, memory_order_relaxed);
    h->floor = 0;
    h->cfg_off = L->cfg_off;
    h->pidns = sluice__rt_pid_ns();
    rcfg *c = (rcfg *)(void *)((unsigned char *)region + L->cfg_off);
    memset(c, 0, CFG_K * sizeof *c);
    memcpy(c[0].spec, L->spec, sizeof c[0].spec);
    rshard *sh = (rshard *)(void *)((unsigned char *)region + HEAD_BYTES);
    for (uint32_t k = 0; k < L->nshards; k++) {
        memset(&sh[k], 0, sizeof sh[k]);
        atomic_store_explicit(&sh[k].due, UINT64_MAX, (memory_order)SLUICE__SEQ_STORE);
        sh[k].rng = h->seed[0] ^ (0x9e3779b97f4a7c15ULL * (k + 1)) ^ 1;
    }
}

/* The difference between an initialised header and the layout, as a
 * message; 0 when they agree. */
/* The region's current spec (as the latest change, if any, made it) into
 * out; its origin's when the configurations lie beyond `size`. */
static void current_spec(const rhead *h, size_t size, char out[SLUICE_SPEC_MAX])
{
    const char *src = h->spec;
    if (h->cfg_off >= HEAD_BYTES && h->cfg_off % _Alignof(rcfg) == 0 && h->cfg_off <= size &&
        size - h->cfg_off >= CFG_K * sizeof(rcfg)) {
        const rcfg *c = (const rcfg *)(const void *)((const unsigned char *)h + h->cfg_off);
        /* an entry is written again only CFG_K changes later */
        src = c[atomic_load_explicit(&((rhead *)h)->epoch, memory_order_acquire) & (CFG_K - 1)].spec;
    }
    memcpy(out, src, SLUICE_SPEC_MAX);
    out[SLUICE_SPEC_MAX - 1] = 0;
}

/* The difference between an initialised header and the layout L of the
 * caller's arguments, as a message; 0 when they agree.  The caller's spec
 * must be the region's current one; the layout is the one of the spec the
 * region was made with (its origin; into *O), which a change of spec keeps. */
static int check_header(const rhead *h, const layout *L, unsigned flags, size_t size,
                        layout *O, char *err, size_t errlen)
{
    if (h->magic != MAGIC) {
        sluice__errf(err, errlen, "the region does not hold a sluice table (bad magic)");
        return SLUICE_EINVAL;
    }
    if (h->version != VERSION) {
        sluice__errf(err, errlen,
                     "the region holds a table of layout version %u; this library reads version %u",
                     h->version, VERSION);
        return SLUICE_EINVAL;
    }
    char boot[40], now[40];
    memcpy(boot, h->boot, sizeof boot);
    boot[sizeof boot - 1] = 0;
    sluice__rt_boot_id(now);
    if (boot[0] && now[0] && strcmp(boot, now) != 0) {
        sluice__errf(err, errlen,
                     "the region was made in another boot (%s), its times on that boot's "
                     "monotonic clock: unlink it and start afresh", boot);
        return SLUICE_EINVAL;
    }
    const uint64_t ns = sluice__rt_pid_ns();
    if (h->pidns && ns && h->pidns != ns) {
        sluice__errf(err, errlen,
                     "the region was made in another pid namespace (pid:[%llu], this process's "
                     "pid:[%llu]): its lock words would name pids this process cannot see",
                     (unsigned long long)h->pidns, (unsigned long long)ns);
        return SLUICE_EINVAL;
    }
    char spec[SLUICE_SPEC_MAX];
    current_spec(h, size, spec);
    if (strcmp(spec, L->spec) != 0) {
        sluice__errf(err, errlen, "the region holds a table of spec \"%s\", not \"%s\"", spec,
                     L->spec);
        return SLUICE_EINVAL;
    }
    memcpy(spec, h->spec, sizeof spec);
    spec[sizeof spec - 1] = 0;
    if (make_layout(spec, L->max_keys, L->max_key_bytes, O, NULL, 0) != 0 ||
        O->pf.ops != L->pf.ops) {
        sluice__errf(err, errlen, "the region's table was made with spec \"%s\", which this "
                     "library cannot take for \"%s\"", spec, L->spec);
        return SLUICE_EINVAL;
    }
    L = O; /* the layout: the origin's */
    if (h->max_keys != L->max_keys || h->max_key_bytes != L->max_key_bytes) {
        sluice__errf(err, errlen,
                     "the region holds a table of max_keys %llu and max_key_bytes %llu, not %llu and %llu",
                     (unsigned long long)h->max_keys, (unsigned long long)h->max_key_bytes,
                     (unsigned long long)L->max_keys, (unsigned long long)L->max_key_bytes);
        return SLUICE_EINVAL;
    }
    if (h->flags != flags) {
        sluice__errf(err, errlen, "the region's table %s when full, not %s",
                     h->flags ? "evicts (evict-lru)" : "refuses",
                     flags ? "evicts (evict-lru)" : "refuses");
        return SLUICE_EINVAL;
    }
    if (h->need != L->need || h->nshards != L->nshards || h->cap != L->cap ||
        h->stride != L->stride || h->ring_cap != L->ring_cap || h->cfg_off != L->cfg_off) {
        sluice__errf(err, errlen, "the region's layout (%llu bytes) differs from this one's (%zu)",
                     (unsigned long long)h->need, L->need);
        return SLUICE_EINVAL;
    }
    if (size < L->need) {
        sluice__errf(err, errlen, "a region of %zu bytes is too small: this table needs %zu",
                     size, L->need);
        return SLUICE_EINVAL;
    }
    return 0;
}

/* The public table functions on a handle of a region (skeleton.h's
 * dispatch): the handle's `place` is the region's view, r. */
static bool ops_try(void *r, const void *key, size_t keylen, uint64_t permits, uint64_t now_ns,
                    sluice_result *res)
{
    return sluice__rtable_try_acquire_at(r, key, keylen, permits, now_ns, res);
}
static size_t ops_burst(void *r, size_t n, const void *const keys[], const size_t keylens[],
                        const uint64_t permits[], uint64_t now_ns, sluice_result results[])
{
    return sluice__table_burst_each(r, ops_try, n, keys, keylens, permits, now_ns, results);
}
static int ops_remove(void *r, const void *key, size_t keylen)
{
    return sluice__rtable_remove(r, key, keylen);
}
static int ops_peek(void *r, const void *key, size_t keylen, uint64_t permits, uint64_t now_ns,
                    sluice_result *res, sluice_key_state *state)
{
    return sluice__rtable_peek_at(r, key, keylen, permits, now_ns, res, state);
}
static void ops_stats(const void *r, sluice_table_stats *out) { sluice__rtable_stats_get(r, out); }
static int ops_scan(void *r, uint64_t cursor, size_t count, sluice_table_scan_fn fn, void *arg,
                    uint64_t *next_cursor, size_t *visited)
{
    return sluice__rtable_scan(r, cursor, count, fn, arg, next_cursor, visited);
}
static int ops_reconfigure(void *r, const char *spec, int knob, uint64_t a, uint64_t b,
                           uint64_t now_ns, char *err, size_t errlen)
{
    return sluice__rtable_reconfigure_at(r, spec, knob, a, b, now_ns, err, errlen);
}
static bool ops_reserve(void *r, const void *key, size_t keylen, uint64_t permits,
                        uint64_t now_ns, uint64_t max_wait_ns, sluice_table_reservation *rv,
                        sluice_result *res)
{
    return sluice__rtable_reserve_at(r, key, keylen, permits, now_ns, max_wait_ns, rv, res);
}
static int ops_cancel(void *r, const sluice_table_reservation *rv, uint64_t now_ns)
{
    return sluice__rtable_cancel_at(r, rv, now_ns);
}
static int ops_settle(void *r, const sluice_table_reservation *rv, uint64_t actual_permits,
                      uint64_t now_ns)
{
    return sluice__rtable_settle_at(r, rv, actual_permits, now_ns);
}
static void ops_close(void *r) { sluice__rtable_close(r); }

/* Overrides and the refused-keys sketch live in one process's heap: a
 * region's keys are decided by every process that maps it, and the other
 * processes would not see them (docs/decisions.md, "What a shared table
 * does not do"). */
static const sluice__table_ops region_ops = {
    .name = "shared region",
    .try_acquire_at = ops_try,
    .burst_at = ops_burst,
    .remove = ops_remove,
    .peek_at = ops_peek,
    .stats_get = ops_stats,
    .scan = ops_scan,
    .reconfigure_at = ops_reconfigure,
    .reserve_at = ops_reserve,
    .cancel_at = ops_cancel,
    .settle_at = ops_settle,
    .close = ops_close,
    .lacks = "a table in a shared region has no overrides",
};

static sluice_table *attach(void *region, size_t size, const char *spec, size_t max_keys,
                            size_t max_key_bytes, unsigned flags, void *map, size_t map_len,
                            char *err, size_t errlen)
{
    layout L;
    if (make_layout(spec, max_keys, max_key_bytes, &L, err, errlen) != 0) return NULL;
    if (flags & ~(SLUICE_TABLE_EVICT_LRU | SLUICE_TABLE_RECLAIM_WHEN_FULL)) {
        sluice__errf(err, errlen, "bad flags 0x%x", flags);
        return NULL;
    }
    flags &= SLUICE_TABLE_EVICT_LRU; /* a region table always reclaims when full */
    if (!region || ((uintptr_t)region & 63) != 0) {
        sluice__errf(err, errlen, "the region must be 64-byte aligned (a mapping is)");
        return NULL;
    }
    if (size < HEAD_BYTES) {
        sluice__errf(err, errlen, "a region of %zu bytes is too small: this table needs %zu",
                     size, L.need);
        return NULL;
    }
    rhead *h = region;
    layout O; /* the layout of the spec the region was made with */
    const uint64_t me = sluice__rt_self();
    for (unsigned n = 0;; n++) {
        uint64_t v = atomic_load_explicit(&h->init, memory_order_acquire);
        if (v == INIT_READY) break;
        if (v != 0 && !(v & BUSY)) {
            sluice__errf(err, errlen, "the region is neither zeroed nor a sluice table");
            return NULL;
        }
        bool mine = false;
        if (size < L.need) { /* ours to make, and too small for it */
            sluice__errf(err, errlen, "a region of %zu bytes is too small: this table needs %zu",
                         size, L.need);
            return NULL;
        }
        if (v == 0) /* a zeroed region: one process wins the right to initialise */
            mine = atomic_compare_exchange_strong_explicit(&h->init, &v, BUSY | me,
                                                           memory_order_acquire,
                                                           memory_order_relaxed);
        else if (n >= 64 && sluice__rt_gone(v & ~BUSY, (n & 3) == 3)) /* its initialiser died */
            mine = atomic_compare_exchange_strong_explicit(&h->init, &v, BUSY | me,
                                                           memory_order_acquire,
                                                           memory_order_relaxed);
        if (mine && v == 0 && !zeroed_head(region)) { /* not ours to write over */
            atomic_store_explicit(&h->init, 0, memory_order_release);
            sluice__errf(err, errlen, "the region is not zeroed: its init word is 0 but its "
                         "header is not (a region must be all zero bytes before its first attach)");
            return NULL;
        }
        if (mine) {
            initialise(region, &L, flags);
            atomic_store_explicit(&h->init, INIT_READY, memory_order_release);
            break;
        }
        sluice__backoff(n);
    }
    if (check_header(h, &L, flags, size, &O, err, errlen) != 0) return NULL;
    sluice__rtable *r = sluice__calloc64(sizeof *r);
    if (!r) goto oom;
    sluice__rd_setup(); /* before any read of this handle runs */
    if (pthread_mutex_init(&r->prof_mu, NULL) != 0) {
        sluice__free64(r);
        r = NULL;
        goto oom;
    }
    r->L = O;
    r->flags = flags;
    r->h = h;
    sluice__digest_seed(h->seed, r->dseed);
    r->sh = (rshard *)(void *)((unsigned char *)region + HEAD_BYTES);
    r->slots = (unsigned char *)region + O.slots_off;
    sluice_table *t = sluice__table_wrap(&region_ops, &L.pf, flags, max_keys, r);
    if (!t) {
        pthread_mutex_destroy(&r->prof_mu);
        goto oom;
    }
    r->map = map;
    r->map_len = map_len;
    /* parse the current configuration now, under a shard's lock (which
     * keeps it remembered), so that refusals read from the first on */
    bool stolen = false;
    sluice__rt_shard_lock(r, 0, &stolen);
    (void)sluice__rt_prof(r, epoch_now(r));
    sluice__rt_shard_unlock(r, 0);
    if (stolen) sluice__rt_resync(r);
    return t;
oom:
    sluice__free64(r);
    sluice__errf(err, errlen, "out of memory");
    return NULL;
}

sluice_table *sluice_table_attach(void *region, size_t size, const char *spec, size_t max_keys,
                                  size_t max_key_bytes, unsigned flags, char *err,
                                  size_t errlen)
{
    return attach(region, size, spec, max_keys, max_key_bytes, flags, NULL, 0, err, errlen);
}

void sluice__rtable_close(sluice__rtable *r)
{
    if (!r) return;
    if (r->map) munmap(r->map, r->map_len);
    for (unsigned j = 0; j < CFG_K; j++) {
        rprof *p = atomic_load_explicit(&r->prof[j], memory_order_relaxed);
        if (p && p != &r->spare[j]) sluice__free64(p);
    }
    sluice__retired_free(&r->retired, offsetof(rprof, ret), sluice__free64, true);
    pthread_mutex_destroy(&r->prof_mu);
    sluice__free64(r);
}

/* "/name" (one slash, at the start) is a POSIX shared memory object. */
static bool is_shm_name(const char *path)
{
    return path[0] == '/' && path[1] != 0 && strchr(path + 1, '/') == NULL;
}

/* Open the object at path, making it (mode 0600) when there is none: made
 * exclusively (O_EXCL), never through a symbolic link (O_NOFOLLOW: errno
 * ELOOP), so that a name another user planted is refused, not followed.
 * Returns the descriptor, or -1 with errno. */
static int open_object(const char *path, bool shm)
{
    const int fl = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
    for (int n = 0; n < 16; n++) { /* bounded: made, removed, made again... */
        int fd = shm ? shm_open(path, fl | O_CREAT | O_EXCL, 0600)
                     : open(path, fl | O_CREAT | O_EXCL, 0600);
        if (fd >= 0 || errno != EEXIST) return fd;
        fd = shm ? shm_open(path, fl, 0) : open(path, fl, 0);
        if (fd >= 0 || errno != ENOENT) return fd; /* ENOENT: removed since */
    }
    errno = EEXIST;
    return -1;
}

/* Whether an opened object may be used: a regular file (a shared memory
 * object is one), owned by this process's effective uid, writable by no
 * one else; else false with the reason, naming path, in err. */
static bool object_ok(const struct stat *sb, const char *path, const char *what, char *err,
                      size_t errlen)
{
    if (!S_ISREG(sb->st_mode)) {
        sluice__errf(err, errlen, "refused %s \"%s\": not a regular file", what, path);
        return false;
    }
    if (sb->st_uid != geteuid()) {
        sluice__errf(err, errlen, "refused %s \"%s\": owned by uid %u, not by this process's %u",
                     what, path, (unsigned)sb->st_uid, (unsigned)geteuid());
        return false;
    }
    if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
        sluice__errf(err, errlen,
                     "refused %s \"%s\": writable by its group or others (mode %04o; want "
                     "0600 or 0644)", what, path, (unsigned)(sb->st_mode & 07777));
        return false;
    }
    return true;
}

/* flock(fd, LOCK_EX), waiting at most 10 s (a millisecond between tries):
 * 0, ETIMEDOUT, or another errno. */
static int lock_object(int fd)
{
    const uint64_t start = sluice_now_ns();
    for (unsigned n = 0;; n++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
        if (errno != EWOULDBLOCK && errno != EINTR) return errno;
        if (sluice_now_ns() - start > 10 * (uint64_t)1000000000 || n >= 100000) return ETIMEDOUT;
        const struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

int sluice__rt_map_named(const char *path, size_t need, void **mapp, size_t *lenp, char *err,
                         size_t errlen)
{
    if (!path || !*path) {
        sluice__errf(err, errlen, "no path");
        return SLUICE_EINVAL;
    }
    const bool shm = is_shm_name(path);
    const char *what = shm ? "shared memory" : "file";
    int fd = open_object(path, shm);
    if (fd < 0) {
        if (errno == ELOOP)
            sluice__errf(err, errlen, "cannot open %s \"%s\": it is a symbolic link (refused)",
                         what, path);
        else
            sluice__errf(err, errlen, "cannot open %s \"%s\": %s", what, path, strerror(errno));
        return SLUICE_EINVAL;
    }
    /* the size is set once, by whoever finds the object empty; the lock
     * (released by the kernel if its holder dies) keeps two from racing */
    struct stat sb;
    void *map = MAP_FAILED;
    size_t len = 0;
    int e = 0;
    if (fstat(fd, &sb) != 0) {
        e = errno;
        sluice__errf(err, errlen, "cannot stat %s \"%s\": %s", what, path, strerror(e));
        close(fd);
        return SLUICE_EINVAL;
    }
    if (!object_ok(&sb, path, what, err, errlen)) {
        close(fd);
        return SLUICE_EINVAL;
    }
    e = lock_object(fd);
    if (!e && fstat(fd, &sb) != 0) e = errno;
    if (!e && sb.st_size == 0 && ftruncate(fd, (off_t)need) != 0) e = errno;
    if (!e && sb.st_size == 0) sb.st_size = (off_t)need;
    if (e != ETIMEDOUT) (void)flock(fd, LOCK_UN);
    if (e) {
        sluice__errf(err, errlen, "cannot size \"%s\": %s", path,
                     e == ETIMEDOUT ? "another process held its lock (flock) for more than 10 s"
                                    : strerror(e));
        close(fd);
        return SLUICE_EINVAL;
    }
    len = (size_t)sb.st_size;
    if ((off_t)len != sb.st_size || len < HEAD_BYTES) {
        sluice__errf(err, errlen, "\"%s\" has %lld bytes; this table needs %zu", path,
                     (long long)sb.st_size, need);
        close(fd);
        return SLUICE_EINVAL;
    }
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        sluice__errf(err, errlen, "cannot map \"%s\": %s", path, strerror(e));
        return SLUICE_EINVAL;
    }
    *mapp = map;
    *lenp = len;
    return 0;
}

void sluice__rt_name_error(const char *path, char *err, size_t errlen)
{
    if (err && errlen) {
        char why[256];
        snprintf(why, sizeof why, "%s", err);
        sluice__errf(err, errlen, "\"%s\": %s", path, why);
    }
}

sluice_table *sluice_table_open(const char *path, const char *spec, size_t max_keys,
                                size_t max_key_bytes, unsigned flags, char *err, size_t errlen)
{
    if (!path || !*path) {
        sluice__errf(err, errlen, "no path");
        return NULL;
    }
    layout L;
    if (make_layout(spec, max_keys, max_key_bytes, &L, err, errlen) != 0) return NULL;
    void *map;
    size_t len;
    if (sluice__rt_map_named(path, L.need, &map, &len, err, errlen) != 0) return NULL;
    sluice_table *t = attach(map, len, spec, max_keys, max_key_bytes, flags, map, len, err, errlen);
    if (!t) {
        munmap(map, len);
        sluice__rt_name_error(path, err, errlen); /* name the object in the reason */
    }
    return t;
}

int sluice_table_unlink(const char *path)
{
    if (!path || !*path) return SLUICE_EINVAL;
    int rc = is_shm_name(path) ? shm_unlink(path) : unlink(path);
    if (rc == 0) return 0;
    switch (errno) {
    case ENOENT: return SLUICE_ENOENT; /* no such object */
    case EACCES:
    case EPERM:
    case EROFS:
    case EBUSY: return SLUICE_EBUSY; /* not ours to remove */
    default: return SLUICE_EINVAL; /* a bad name (ENAMETOOLONG, ENOTDIR, EISDIR...) */
    }
}
