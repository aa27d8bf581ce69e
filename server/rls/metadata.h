/* metadata.h -- sluice-rls: the answer's dynamic_metadata (metadata.c). */
#ifndef SLUICE_RLS_METADATA_H
#define SLUICE_RLS_METADATA_H

#include "config.h"
#include "rls.h"
#include "google/protobuf/struct.pb-c.h"

/* envoyproxy/ratelimit's ratelimitToMetadata for `req` and its answer:
 * domain; descriptors (entries as "key=value", limit, hitsAddend); the
 * request's hitsAddend when not 0; metadata, merged over the descriptors
 * answered OK whose limit (dl[i], NULL for none) has `metadata`.  A new
 * tree the caller frees (rls_answer_release, once it is in the answer), or
 * NULL when memory runs out.  Thread-safe. */
Google__Protobuf__Struct *rls_dynamic_metadata(const Envoy__Service__Ratelimit__V3__RateLimitRequest *req,
                                               const rls_answer *ans, const rls_limit *const dl[]);

#endif
