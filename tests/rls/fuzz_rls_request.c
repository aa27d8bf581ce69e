/* fuzz_rls_request.c -- libFuzzer target: sluice-rls's request path, from
 * the bytes of a gRPC message to the packed answer.
 *
 * The input is a RateLimitRequest as a client could send it.  It is
 * decoded with protobuf-c and its strings checked on the wire (as server.c
 * does: a refusal must name a descriptor and entry the request has), decided on a fixed config at
 * a time taken from the input's length (so windows vary, and nothing reads
 * the clock), and the answer is packed and decoded again.  Checks: the
 * status is one the server may answer; an OK answer has one status per
 * descriptor, each OK or OVER_LIMIT, and overall OVER_LIMIT iff one of them
 * is; the packed answer decodes.  The corpus replays as the ctest
 * rls_fuzz_request_corpus.
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "fuzz.h"
#include "rls.h"

static const char CFG[] = "domain: d\n"
                          "descriptors:\n"
                          "  - {key: a, rate_limit: {unit: second, requests_per_unit: 2}}\n"
                          "  - {key: b, value: \"x*\", rate_limit: {unit: minute, requests_per_unit: 1}}\n"
                          "  - {key: z, rate_limit: {unit: day, requests_per_unit: 0}}\n"
                          "  - {key: u, rate_limit: {unlimited: true}}\n"
                          "  - key: n\n"
                          "    descriptors:\n"
                          "      - {key: m, shadow_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}\n";

static rls_config *cfg;
static unsigned char *scratch;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!cfg) {
        char err[256];
        cfg = rls_config_new(4096);
        scratch = malloc(RLS_SCRATCH_BYTES);
        FUZZ_CHECK(cfg && scratch, "setup");
        FUZZ_CHECK(rls_config_add_text(cfg, "fuzz.yaml", CFG, sizeof CFG - 1, err, sizeof err) == 0, "%s", err);
    }
    Envoy__Service__Ratelimit__V3__RateLimitRequest *rq =
        envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, size, data);
    if (!rq)
        return 0;
    /* server.c's check of the strings on the wire: a refusal names a
     * descriptor and an entry that the decoded request has, or the domain. */
    char why[300];
    if (rls_request_check_strings(data, size, why, sizeof why) != RLS_GRPC_OK) {
        size_t d = 0, e = 0;
        FUZZ_CHECK(strcmp(why, "the domain holds a NUL byte") == 0 ||
                       (sscanf(why, "descriptor %zu entry %zu:", &d, &e) == 2 && d < rq->n_descriptors &&
                        rq->descriptors[d] && e < rq->descriptors[d]->n_entries),
                   "bad refusal '%s'", why);
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(rq, NULL);
        return 0;
    }
    rls_answer ans;
    rls_counts counts = {0};
    char msg[300];
    msg[0] = 0;
    uint64_t now = (uint64_t)size * 999999937ull;
    int code = rls_should_rate_limit(cfg, rq, now, (size % 7 == 0 ? RLS_SHADOW_ALL : 0) |
                                     (size % 3 == 0 ? RLS_DYNAMIC_METADATA : 0), scratch, &ans, &counts, msg, sizeof msg);
    FUZZ_CHECK(code == RLS_GRPC_OK || code == RLS_GRPC_INVALID_ARGUMENT || code == RLS_GRPC_RESOURCE_EXHAUSTED,
               "status %d", code);
    if (code != RLS_GRPC_OK) {
        FUZZ_CHECK(msg[0] != 0, "status %d without a message", code);
    } else {
        FUZZ_CHECK(ans.resp.n_statuses == rq->n_descriptors, "%zu statuses for %zu descriptors",
                   ans.resp.n_statuses, rq->n_descriptors);
        bool over = false;
        for (size_t i = 0; i < ans.resp.n_statuses; i++) {
            int c = ans.resp.statuses[i]->code;
            FUZZ_CHECK(c == 1 || c == 2, "descriptor %zu code %d", i, c);
            over = over || c == 2;
        }
        FUZZ_CHECK((ans.resp.overall_code == 2) == over, "overall %d", (int)ans.resp.overall_code);
        size_t n = protobuf_c_message_get_packed_size(&ans.resp.base);
        unsigned char *buf = malloc(n ? n : 1);
        FUZZ_CHECK(buf != NULL, "malloc");
        FUZZ_CHECK(protobuf_c_message_pack(&ans.resp.base, buf) == n, "pack");
        Envoy__Service__Ratelimit__V3__RateLimitResponse *back =
            envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, buf);
        FUZZ_CHECK(back && back->n_statuses == ans.resp.n_statuses, "the answer does not decode");
        envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(back, NULL);
        free(buf);
        rls_answer_release(&ans);
    }
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(rq, NULL);
    return 0;
}
