/* leaky_bucket.c -- leaky bucket, as a shaper or (nodelay) as a meter.
 *
 * Contract (docs/decisions.md 3.6): rate r = L/W, volume C; the water drains
 * continuously and never below 0: water(t) = max(0, water(t') - (t - t')r).
 * A request for p is allowed iff water(t) + p <= C, and then adds p.  The
 * shaper makes an allowed request wait water(t)/r (the level before it was
 * added, rounded up to a whole ns), so admitted requests leave at the
 * constant rate r; the meter never makes anyone wait.
 *
 * The water is exactly the token bucket's deficit, so both run on the one
 * machine in token_bucket.c (its head comment has the arithmetic); here is
 * only what the shaper adds: the wait.
 *
 * Note the textbook sample's `water + 1 < capacity`, which grants one permit
 * fewer than the capacity: the test here is `<=`.
 *
 * Entry point: sluice__leaky_bucket_ops, its row: token_bucket.c's bucket
 * functions with the shaper's wait, and its own format and carry.
 */
#include "alg/alg.h"
#include "alg/bucket.h"

#include <stdio.h>

static int format(const sluice__profile *pf, char *buf, size_t buflen)
{
    char cap[40] = "";
    if (pf->capacity != pf->limit)
        snprintf(cap, sizeof cap, " capacity=%llu", (unsigned long long)pf->capacity);
    return snprintf(buf, buflen, "%s%s", cap, pf->nodelay ? " nodelay" : "");
}

static void carry(const sluice__profile *from, const sluice__profile *to, sluice__state *st,
                  uint64_t t)
{
    sluice__bucket_carry(from, to, st, t, false); /* the water is kept */
}

const sluice__alg_ops sluice__leaky_bucket_ops = {
    .name = "leaky-bucket",
    .options = SLUICE__OPT(SLUICE__OPT_CAPACITY) | SLUICE__OPT(SLUICE__OPT_NODELAY) |
               SLUICE__OPT(SLUICE__OPT_CLOCK),
    .setup = sluice__bucket_setup,
    .format = format,
    .decide = sluice__bucket_decide, /* the shaper's wait: pf->shaper */
    .rest_at = sluice__bucket_rest_at,
    .pack = sluice__bucket_pack,
    .unpack = sluice__bucket_unpack,
    .decide_packed = sluice__bucket_decide_packed,
    .refused_until = sluice__bucket_refused_until,
    .bucket = true,
    .carry = carry,
    .fits = sluice__bucket_fits,
    .settle = sluice__bucket_settle,
};
