/* sluice/http.h -- a decision as HTTP rate-limit response header fields.
 *
 * Formats the fields of the IETF draft "RateLimit header fields for HTTP"
 * (draft-ietf-httpapi-ratelimit-headers-10) from a limit and one of its
 * decisions, without allocating, into a caller's buffer:
 *
 *   RateLimit-Policy: "api";q=100;w=60          the limit: quota q per
 *                                               window of w seconds
 *   RateLimit: "api";r=42;t=18                  r permits remaining; more
 *                                               within t seconds
 *   Retry-After: 18                             on a refusal only
 *
 * and, as an option, the legacy X-RateLimit-Limit, X-RateLimit-Remaining and
 * X-RateLimit-Reset.  docs/http-headers.md has the mapping with worked
 * examples; in short:
 *
 *  q, w   The draft's w is a whole number of seconds, at least 1.  w is
 *         PERIOD rounded up to whole seconds (at least 1) and q the permits
 *         the long-run rate LIMIT/PERIOD gives in w seconds, rounded down:
 *         `100/min` is q=100;w=60, `5/250ms` is q=20;w=1, `3/1500ms` is
 *         q=4;w=2.  So q/w never overstates the rate.
 *  sluice-burst
 *         A vendor parameter (the draft allows them as comments): the most
 *         permits one request can get at once -- the token bucket's burst,
 *         the leaky bucket's capacity, LIMIT for the windows -- written only
 *         when it differs from q: `token-bucket 100/s burst=20` is
 *         q=100;w=1;sluice-burst=20, `fixed-window 5/250ms` is
 *         q=20;w=1;sluice-burst=5.
 *  r      The decision's `remaining` (after it): for the buckets the whole
 *         tokens in the bucket, or the room left in the leaky bucket, which
 *         may exceed q when the burst does.
 *  t      Seconds, rounded up, within which at least one more permit comes
 *         back -- the least such time the decision tells: for a refusal its
 *         retry_after_ns when that is sooner than the bound below, else
 *           fixed-window     the end of the current window (exact)
 *           sliding-log,     PERIOD (every permit counted now has left the
 *           sliding-wheel    window by then)
 *           sliding-approx   the end of the next window (the estimate has
 *                            forgotten every permit counted now)
 *           token-bucket,    PERIOD/LIMIT, one permit's time at the rate
 *           leaky-bucket
 *         t is left out when r is the burst already: nothing more can come.
 *  Retry-After
 *         For a refusal whose retry_after_ns >= 0: that wait in whole
 *         seconds, rounded up, so never earlier than the request could pass
 *         and never earlier than t.  A refusal that no wait can help
 *         (retry_after_ns = -1: more permits than the limit can ever grant,
 *         or res.error set) gets no Retry-After: answer it with a status
 *         that does not invite a retry (e.g. 413), not 429.
 *  pk     The draft's partition key, a Byte Sequence: the bytes the caller
 *         passes (a table's key, say), in base64.
 *
 * The leaky-bucket shaper's wait_ns is not a field: the server holds the
 * request for it; r and t describe the bucket as for the meter.
 *
 * Numbers are Structured Field Integers, at most 999999999999999
 * (SLUICE_HTTP_INT_MAX); a larger q or r is written as that bound.
 *
 * Several limits on one request: RateLimit-Policy and RateLimit are lists,
 * one item per limit.  The _value functions append one item to a field
 * value (", " between items), so a caller emits one policy per limit;
 * Retry-After is then the largest of the refusing limits' values (see
 * sluice_http_state_get).
 *
 * Included by sluice.h; it may also be included on its own (C or C++), and
 * then brings in sluice.h for sluice_limiter, sluice_result and the error
 * codes.  Every function here is thread-safe: it reads only its arguments.
 */
#ifndef SLUICE_HTTP_H
#define SLUICE_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "../sluice.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility push(default)
#endif

/* The largest Structured Field Integer (RFC 9651: at most 15 digits). */
#define SLUICE_HTTP_INT_MAX 999999999999999ULL

/* The longest policy name, in bytes (before escaping). */
#define SLUICE_HTTP_NAME_MAX 64

/* A limit as the draft describes it.  Filled by sluice_http_policy_init()
 * or sluice_http_policy_from_limiter(); read-only after that, and the
 * caller's to keep (no pointer into anything else).  Make it once, when the
 * limit is configured, not per request. */
typedef struct sluice_http_policy {
    char name[SLUICE_HTTP_NAME_MAX + 1]; /* the policy name, NUL-terminated */
    uint64_t quota;     /* q, 0 .. SLUICE_HTTP_INT_MAX */
    uint64_t window_s;  /* w, seconds, >= 1 */
    uint64_t burst;     /* the most permits one request can get */
    uint64_t limit;     /* LIMIT of the spec */
    uint64_t period_ns; /* PERIOD of the spec, ns */
    uint32_t kind_;     /* private: how t is bounded */
    /* private: a calendar quota's (tz=) zone, interned by the library for
     * the life of the process, and its unit, months and anchor */
    const void *zone_;
    uint8_t cal_[3];
} sluice_http_policy;

/* Describe the limit `spec` (as sluice_limiter_new takes it; for a table,
 * the table's spec) under the policy name `name`: 1 .. SLUICE_HTTP_NAME_MAX
 * bytes of printable ASCII (0x20 .. 0x7e; `"` and `\` are escaped in the
 * output).  Returns 0, or a negative code with a one-line reason in err
 * (errlen > 0): SLUICE_EINVAL for a NULL argument, a bad name or a bad
 * spec, SLUICE_ERANGE for a spec number out of range. */
int sluice_http_policy_init(sluice_http_policy *p, const char *name, const char *spec,
                            char *err, size_t errlen);

/* The same for the limit of a limiter (sluice_limiter_spec_get).  Returns
 * 0, or SLUICE_EINVAL for a NULL argument or a bad name. */
int sluice_http_policy_from_limiter(sluice_http_policy *p, const char *name,
                                    const sluice_limiter *lim);

/* The numbers of one decision.  retry_after_s: for a refusal, Retry-After
 * in seconds (rounded up, >= reset_s); -1 for a refusal that no wait can
 * help (no Retry-After); 0 for an allowed request. */
typedef struct sluice_http_state {
    uint64_t remaining;    /* r, at most SLUICE_HTTP_INT_MAX */
    int64_t reset_s;       /* t, seconds; -1: left out (r is the burst) */
    int64_t retry_after_s;
    uint64_t reserved_[2]; /* zero: room to grow in a minor version */
} sluice_http_state;

/* Fill `out` for the decision `res` that the limit of `p` made at `now_ns`
 * (the time given to the decision; it matters for the windows' t).
 * Returns 0, or SLUICE_EINVAL for a NULL argument. */
int sluice_http_state_get(const sluice_http_policy *p, const sluice_result *res,
                          uint64_t now_ns, sluice_http_state *out);

/* Append one item to a field value in buf (buflen bytes), at offset *len:
 *   sluice_http_policy_value     "name";q=Q;w=W[;sluice-burst=B][;pk=:K:]
 *                                for RateLimit-Policy
 *   sluice_http_ratelimit_value  "name";r=R[;t=T][;pk=:K:]
 *                                for RateLimit, from the decision `res` made
 *                                at now_ns
 * preceded by ", " when *len > 0, so that calls for several limits build one
 * list.  pk: the partition key, pklen bytes (base64 in the output); none
 * when pklen is 0 (pk may then be NULL).
 * As snprintf, and for a series of calls: *len always advances by the
 * item's length, whether or not it fits, so after the last call *len is
 * the length of the whole value (excluding the NUL) and a buffer of *len + 1
 * bytes holds it.  Returns 0 when everything up to *len fits with its NUL;
 * else SLUICE_ENOSPC, and buf holds the items that fit whole,
 * NUL-terminated (if buflen > 0) -- never a cut item.  buf may be NULL when
 * buflen is 0 (a size query).  SLUICE_EINVAL (nothing written, *len
 * unchanged) for a NULL p, res, len or pk with pklen > 0, or buf NULL with
 * buflen > 0. */
int sluice_http_policy_value(const sluice_http_policy *p, const void *pk, size_t pklen,
                             char *buf, size_t buflen, size_t *len);
int sluice_http_ratelimit_value(const sluice_http_policy *p, const sluice_result *res,
                                uint64_t now_ns, const void *pk, size_t pklen, char *buf,
                                size_t buflen, size_t *len);

/* Flags of sluice_http_headers(). */
#define SLUICE_HTTP_LEGACY 1u    /* also X-RateLimit-Limit (q), -Remaining (r)
                                  * and -Reset (t in seconds; 0 when t is
                                  * left out) */
#define SLUICE_HTTP_NO_POLICY 2u /* leave RateLimit-Policy out (it does not
                                  * change, so a server may send it rarely) */

/* The header fields of one limit and one decision, as lines ending in CRLF:
 *
 *   RateLimit-Policy: "name";q=Q;w=W[;sluice-burst=B][;pk=:K:]
 *   RateLimit: "name";r=R[;t=T][;pk=:K:]
 *   Retry-After: S                     (a refusal with retry_after_ns >= 0)
 *   X-RateLimit-Limit: Q               (SLUICE_HTTP_LEGACY)
 *   X-RateLimit-Remaining: R
 *   X-RateLimit-Reset: T
 *
 * written into buf (buflen bytes).  Returns 0 when they fit with their NUL;
 * else SLUICE_ENOSPC and buf holds the whole lines that fit, NUL-terminated
 * (if buflen > 0).  Either way *needed (may be NULL) receives the length of
 * all the lines, excluding the NUL.  buf may be NULL when buflen is 0.
 * SLUICE_EINVAL for a NULL p or res, pk NULL with pklen > 0, buf NULL with
 * buflen > 0, or an unknown flag. */
int sluice_http_headers(const sluice_http_policy *p, const sluice_result *res,
                        uint64_t now_ns, const void *pk, size_t pklen, unsigned flags,
                        char *buf, size_t buflen, size_t *needed);

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_HTTP_H */
