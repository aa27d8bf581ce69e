/* fuzz_redis_reply.c -- the Redis tier's reading of the all-or-nothing
 * script's reply (sluice__redis_all_reply, src/redis/redis.c), from any
 * integers: what a hostile or damaged Redis could answer.
 *
 * Input: byte 0 picks n (1 .. SLUICE_COMPOSITE_MAX); then per limit one byte
 * picks its spec from the table below and one its permits (0 .. 255, so
 * some exceed the capacity); then the reply, 8 bytes per integer
 * (little-endian, missing bytes 0), as many as the specs' fields (the
 * length conn.c has checked), or, when the first spare byte is odd, one
 * fewer or more.  Properties: the answer is 1, 0 or SLUICE_EBACKEND, never
 * a read beyond the reply (ASan); when it is 1 or 0 every limit's answer is
 * in range: remaining at most its capacity, retry_after_ns 0 for a limit
 * that allowed, -1 exactly when the permits exceed the capacity, else
 * positive and at most two periods; 1 only when every limit allowed, 0 only
 * when one refused.  Built as a libFuzzer target with SLUICE_FUZZ, and
 * always as fuzz_redis_reply_replay (ctest fuzz_redis_reply_corpus).
 */
#include "redis_internal.h"
#include "alg/held.h"
#include "fuzz.h"

#include <string.h>

static const char *const specs[] = {
    "fixed-window 10/s",        "fixed-window 3/36500d",         "token-bucket 100/s burst=5",
    "token-bucket 7/10ms",      "token-bucket 1/d burst=2",      "sliding-approx 10/100ms",
    "sliding-approx 7/1500us",  "sliding-approx 1000000000000/s", "fixed-window 1000000000000/d",
};
#define NSPECS (sizeof specs / sizeof specs[0])

static sr_params params[NSPECS];
static int ready;

static void setup(void)
{
    for (size_t i = 0; i < NSPECS; i++) {
        char err[256];
        FUZZ_CHECK(sluice__redis_params(specs[i], &params[i], err, sizeof err) == 0, "%s: %s", specs[i], err);
    }
    ready = 1;
}

static int fields(int script) { return script == SR_SCRIPT_TB ? SR_TB_FIELDS : script == SR_SCRIPT_FW ? SR_FW_FIELDS : SR_SA_FIELDS; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ready) setup();
    if (size < 1) return 0;
    size_t n = 1 + data[0] % SLUICE_COMPOSITE_MAX, at = 1;
    const sr_params *pps[SLUICE_COMPOSITE_MAX];
    uint64_t permits[SLUICE_COMPOSITE_MAX];
    size_t nv = 1;
    for (size_t i = 0; i < n; i++) {
        uint8_t s = at < size ? data[at] : 0, p = at + 1 < size ? data[at + 1] : 0;
        at += 2;
        pps[i] = &params[s % NSPECS];
        permits[i] = p;
        nv += (size_t)fields(pps[i]->script);
    }
    if (at < size && (data[at] & 1)) nv = data[at] & 2 ? nv + 1 : nv - 1;
    at++;
    long long v[1 + SLUICE_COMPOSITE_MAX * SR_SA_FIELDS + 1];
    for (size_t j = 0; j < nv; j++) {
        uint64_t x = 0;
        for (int b = 0; b < 8; b++, at++) x |= (uint64_t)(at < size ? data[at] : 0) << (8 * b);
        memcpy(&v[j], &x, sizeof x);
    }
    /* an exact copy on the heap: ASan sees any read past nv */
    long long *hv = malloc(nv * sizeof *hv);
    FUZZ_CHECK(hv != NULL, "out of memory");
    memcpy(hv, v, nv * sizeof *hv);
    sluice__answer a[SLUICE_COMPOSITE_MAX];
    int rc = sluice__redis_all_reply(pps, permits, n, hv, nv, a);
    free(hv);
    FUZZ_CHECK(rc == 1 || rc == 0 || rc == SLUICE_EBACKEND, "answer %d", rc);
    if (rc < 0) return 0;
    bool any_refused = false;
    for (size_t i = 0; i < n; i++) {
        const sr_params *pp = pps[i];
        const sluice_result *r = &a[i].r;
        FUZZ_CHECK(r->remaining <= pp->capacity, "limit %zu: remaining %llu > %llu", i,
                   (unsigned long long)r->remaining, (unsigned long long)pp->capacity);
        if (a[i].ok) {
            FUZZ_CHECK(r->retry_after_ns == 0, "limit %zu allowed, retry %lld", i, (long long)r->retry_after_ns);
        } else {
            any_refused = true;
            if (permits[i] > pp->capacity)
                FUZZ_CHECK(r->retry_after_ns == -1, "limit %zu: retry %lld", i, (long long)r->retry_after_ns);
            else
                FUZZ_CHECK(r->retry_after_ns > 0 && (uint64_t)r->retry_after_ns <= 2 * pp->period_ns +
                                                       (pp->script == SR_SCRIPT_TB ? pp->capacity * pp->period_ns : 0),
                           "limit %zu: retry %lld", i, (long long)r->retry_after_ns);
        }
    }
    FUZZ_CHECK((rc == 1) == !any_refused, "verdict %d, a refusal %d", rc, any_refused);
    return 0;
}
