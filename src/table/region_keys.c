/* region_keys.c -- a shared table's keys, besides decisions: removing
 * one, the statistics (the shards' counts and the counter stripes,
 * region_who.c), and the scan over every slot (region_table.c has the
 * design; region.h the layout).
 *
 * Map:  sluice__rtable_remove; sluice__rtable_stats_get;
 *       sluice__rtable_scan. */
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

int sluice__rtable_remove(sluice__rtable *r, const void *key, size_t keylen)
{
    if (!key_ok(r, key, keylen)) return SLUICE_EINVAL;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    uint64_t hash;
    const uint32_t k = key_place(r, &key, &keylen, dig, &hash);
    bool stolen = false;
    uint32_t fr;
    sluice__rt_shard_lock(r, k, &stolen);
    uint32_t i = sluice__rt_find(r, k, (uint32_t)hash, key, keylen, &fr);
    if (i != NONE) sluice__rt_drop(r, k, i);
    sluice__rt_shard_unlock(r, k);
    if (stolen) sluice__rt_resync(r);
    return i == NONE ? SLUICE_ENOENT : 0;
}
void sluice__rtable_stats_get(const sluice__rtable *r, sluice_table_stats *out)
{
    memset(out, 0, sizeof *out);
    /* every process's: refusals and probes in the stripes, admissions and
     * keys in the shards and the header */
    /* counters.h's summing, over the region's NSTRIPES + 1 */
#define SUM(f) sluice__stripes_sum(stripes_of(r), sizeof(rstripe), NSTRIPES + 1, offsetof(rstripe, f))
    out->decisions.requests_denied = SUM(denied);
    out->decisions.permits_denied = SUM(pdenied);
    out->decisions.probes = SUM(probes);
    out->decisions.requests_denied_elsewhere = SUM(elsewhere);
    out->decisions.permits_denied_elsewhere = SUM(pelsewhere);
    out->refused = SUM(refused);
#undef SUM
    out->keys = atomic_load_explicit(&r->h->keys, memory_order_relaxed);
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        rshard *sh = &r->sh[k];
#define RD(f) atomic_load_explicit(&sh->f, memory_order_relaxed)
        out->reclaimed += RD(reclaimed);
        out->evicted += RD(evicted);
        out->decisions.requests_allowed += RD(allowed);
        out->decisions.permits_allowed = sluice__sat_add(out->decisions.permits_allowed, RD(pallowed));
#undef RD
    }
}

/* The scan: the cursor is shard k << 32 | slot i, the next place to look
 * at; 0 starts and ends a scan.  Keys never move while held (no shifting),
 * so a key held for the whole scan is met at its slot, once. */
int sluice__rtable_scan(sluice__rtable *r, uint64_t cursor, size_t count,
                        sluice_table_scan_fn fn, void *arg, uint64_t *next_cursor,
                        size_t *visited)
{
    if (visited) *visited = 0;
    if (!fn || !next_cursor || count == 0) return SLUICE_EINVAL;
    uint64_t k = cursor >> 32;
    uint32_t i = (uint32_t)cursor;
    if (k >= r->L.nshards || i >= r->L.cap) return SLUICE_EINVAL;
    unsigned char *buf = sluice__malloc(r->L.copy_off - r->L.key_off); /* the key field */
    if (!buf) return SLUICE_ENOMEM;
    size_t work = 0;
    int rc = 0;
    bool stolen = false;
    while (k < r->L.nshards && work < count && rc == 0) {
        sluice_key_state ks;
        size_t len = 0;
        bool found = false;
        sluice__rt_shard_lock(r, (uint32_t)k, &stolen);
        while (i < r->L.cap && work < count && !found) {
            unsigned char *s = slot_at(r, (uint32_t)k, i);
            uint64_t h = hdr_get(s);
            work++;
            i++;
            if (H_KIND(h) != K_LIVE) continue;
            sluice__state st;
            const sluice__profile *pf = sluice__rt_key_load(r, s, &h, &st, epoch_now(r));
            len = H_LEN(h);
            /* damaged: no key is longer than the field (a digest's length
             * code stands for its 16 bytes) */
            if (len != SLUICE__DIGEST_LEN && len > r->L.max_key_bytes) continue;
            len = sluice__key_bytes(len);
            memcpy(buf, s + r->L.key_off, len);
            ks = (sluice_key_state){.last_ns = st.t_last, .rest_ns = sluice__rest_at(pf, &st),
                                    .flags = H_LEN(h) == SLUICE__DIGEST_LEN ? SLUICE_KEY_DIGEST : 0};
            found = true;
        }
        sluice__rt_shard_unlock(r, (uint32_t)k);
        if (i == r->L.cap) {
            k++;
            i = 0;
        }
        if (found) rc = fn(buf, len, &ks, arg); /* unlocked: fn may call the table */
    }
    sluice__free(buf);
    if (stolen) sluice__rt_resync(r);
    *next_cursor = k >= r->L.nshards ? 0 : (k << 32 | i);
    if (visited) *visited = work;
    return rc;
}
