/* json.h -- sluice-rls: RateLimitRequest and RateLimitResponse in the
 * proto's JSON form (protojson), for POST /json on the HTTP port.
 *
 * The parser is strict and bounded: one pass, no recursion (each message
 * level of the schema has its own loop), at most RLS_MAX_DESCRIPTORS
 * descriptors of at most RLS_MAX_ENTRIES entries, unknown or repeated
 * fields refused by name.  Not thread-safe per rls_json_req; separate
 * ones may be used by separate threads.
 */
#ifndef SLUICE_RLS_JSON_H
#define SLUICE_RLS_JSON_H

#include <stddef.h>

#include "rls.h"

/* A decoded request and the storage its pointers point into. */
typedef struct rls_json_req {
    Envoy__Service__Ratelimit__V3__RateLimitRequest req;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d[RLS_MAX_DESCRIPTORS], *dp[RLS_MAX_DESCRIPTORS];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e[RLS_MAX_DESCRIPTORS * RLS_MAX_ENTRIES];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *ep[RLS_MAX_DESCRIPTORS * RLS_MAX_ENTRIES];
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride ov[RLS_MAX_DESCRIPTORS];
    Google__Protobuf__UInt64Value hits[RLS_MAX_DESCRIPTORS];
    char *strings; /* the decoded strings, NUL-terminated; owned */
} rls_json_req;

/* Decode `len` bytes of JSON (a RateLimitRequest object: "domain",
 * "descriptors" [{"entries": [{"key", "value"}], "limit":
 * {"requests_per_unit", "unit"}, "hits_addend"}], "hits_addend"; lowerCamel
 * names too; integers as numbers or decimal strings; a unit by name or
 * number; null for a default) into `out`, whose req is then ready for
 * rls_should_rate_limit().  Returns 0, or -1 with a one-line reason naming
 * the offending token and its byte offset in err.  Either way release the
 * storage with rls_json_req_free(). */
int rls_json_parse(const char *text, size_t len, rls_json_req *out, char *err, size_t errlen);

/* Release what rls_json_parse() allocated in `r` (not `r` itself).  Safe on
 * a zeroed or already released rls_json_req. */
void rls_json_req_free(rls_json_req *r);

/* Write `resp` as protojson writes it (lowerCamel names, enums by name,
 * default values left out, durations as "Ns") into buf.  Returns the
 * bytes written (NUL-terminated), or `cap` when it does not fit. */
size_t rls_json_response(const Envoy__Service__Ratelimit__V3__RateLimitResponse *resp, char *buf, size_t cap);

/* {"error": msg} with msg escaped, into buf; returns the bytes written,
 * or `cap` when it does not fit. */
size_t rls_json_error(const char *msg, char *buf, size_t cap);

#endif
