/* rls.h -- sluice-rls: ShouldRateLimit, decided on a config.
 *
 * rls_should_rate_limit() decodes nothing and sends nothing: it takes a
 * decoded RateLimitRequest and fills a RateLimitResponse whose storage is
 * an rls_answer.  Thread-safe (the config is read-only, its tables are
 * thread-safe).
 */
#ifndef SLUICE_RLS_RLS_H
#define SLUICE_RLS_RLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "envoy/service/ratelimit/v3/rls.pb-c.h"

/* The most descriptors one request may carry; of them at most
 * SLUICE_COMPOSITE_MAX (16) may match a limit. */
#define RLS_MAX_DESCRIPTORS 64
/* The most entries one descriptor may carry. */
#define RLS_MAX_ENTRIES 32

/* gRPC status codes used here. */
enum { RLS_GRPC_OK = 0, RLS_GRPC_INVALID_ARGUMENT = 3, RLS_GRPC_DEADLINE_EXCEEDED = 4, RLS_GRPC_RESOURCE_EXHAUSTED = 8,
       RLS_GRPC_UNIMPLEMENTED = 12, RLS_GRPC_INTERNAL = 13, RLS_GRPC_UNAVAILABLE = 14 };

/* The most response headers, and the bytes of each value. */
#define RLS_MAX_HEADERS 6
#define RLS_HEADER_BYTES 2048

/* Storage of one response: `resp` points into the arrays. */
typedef struct rls_answer {
    Envoy__Service__Ratelimit__V3__RateLimitResponse resp;
    Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus st[RLS_MAX_DESCRIPTORS];
    Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *stp[RLS_MAX_DESCRIPTORS];
    Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit lim[RLS_MAX_DESCRIPTORS];
    Google__Protobuf__Duration reset[RLS_MAX_DESCRIPTORS];
    Envoy__Config__Core__V3__HeaderValue hv[RLS_MAX_HEADERS], *hvp[RLS_MAX_HEADERS];
    char hval[RLS_MAX_HEADERS][RLS_HEADER_BYTES];
} rls_answer;

/* Flags of rls_should_rate_limit(). */
#define RLS_SHADOW_ALL 1u     /* every limit in shadow mode (SHADOW_MODE) */
#define RLS_QUOTA_ALL 8u      /* every limit in quota mode (QUOTA_MODE) */
#define RLS_DYNAMIC_METADATA 16u /* dynamic_metadata, as envoyproxy/ratelimit's
                                  * RESPONSE_DYNAMIC_METADATA: the domain, the
                                  * descriptors, hitsAddend, and the `metadata`
                                  * of the limits that passed, merged; allocated:
                                  * release with rls_answer_release() */
#define RLS_HEADERS_DRAFT 2u  /* response_headers_to_add: RateLimit-Policy,
                               * RateLimit (one item per limited descriptor),
                               * Retry-After on a refusal (sluice/http.h) */
#define RLS_HEADERS_LEGACY 4u /* and envoyproxy/ratelimit's X-RateLimit-Limit,
                               * -Remaining, -Reset, of the descriptor with
                               * the least remaining */


/* Counters a caller may keep (per worker, summed when read). */
typedef struct rls_counts {
    uint64_t over_limit;      /* descriptors answered OVER_LIMIT */
    uint64_t shadow_refusals; /* refusals that shadow mode turned into OK */
    uint64_t within_limit;    /* descriptors with a limit answered OK */
} rls_counts;

/* Decide `req` at `now_ns` (CLOCK_REALTIME nanoseconds: fixed windows
 * start on multiples of their unit since the Unix epoch) and fill `ans`.
 * All descriptors that match a limit are decided as one composite: the
 * request is charged to every limit or to none.  hits: a descriptor's
 * hits_addend when set (0 = check only), else max(1, the request's).
 * `flags`: RLS_SHADOW_ALL, RLS_QUOTA_ALL, RLS_DYNAMIC_METADATA, RLS_HEADERS_*.  `scratch` holds at
 * least RLS_SCRATCH_BYTES bytes (the keys).  Returns a gRPC status: 0 with
 * the answer, or a non-zero code with a one-line reason in msg. */
#define RLS_SCRATCH_BYTES (16u * 65536u + 4096u)
int rls_should_rate_limit(const rls_config *cfg, const Envoy__Service__Ratelimit__V3__RateLimitRequest *req,
                          uint64_t now_ns, unsigned flags, unsigned char *scratch, rls_answer *ans,
                          rls_counts *counts, char *msg, size_t msglen);

/* Check the strings of a RateLimitRequest on the wire (`len` bytes at
 * `msg`, the message that protobuf-c decoded): the domain and every entry's
 * key and value must hold no NUL byte.  protobuf-c hands strings over as C
 * strings, cut at the first NUL, so "a\0b" would be decided as "a" -- two
 * values on one counter; such a request is refused instead.  Returns 0, or
 * RLS_GRPC_INVALID_ARGUMENT with a one-line reason naming the descriptor
 * and entry in err.  Bounded: one pass over the bytes, no recursion; a
 * malformed part is left to the decoder's verdict.  Thread-safe. */
int rls_request_check_strings(const unsigned char *msg, size_t len, char *err, size_t errlen);

/* Free what an answer allocated (its dynamic_metadata), once it has been
 * packed or written.  Safe on any answer rls_should_rate_limit() filled. */
void rls_answer_release(rls_answer *ans);

#endif
