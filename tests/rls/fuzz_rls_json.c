/* fuzz_rls_json.c -- libFuzzer target: POST /json's reader and writer
 * (server/rls/json.c).
 *
 * The input is a body a client could POST.  It is read by rls_json_parse;
 * a refusal must carry a one-line reason.  An accepted request must be a
 * well-formed message: it is packed by protobuf-c and decoded again, and
 * the copy must hold the same domain, descriptors, entries (bytes
 * compared) and hits -- so every pointer the reader set is valid and
 * every string ends where its length says.  Then it is decided on a fixed
 * config and the answer written as JSON, which must be one NUL-terminated
 * object.  The corpus replays as the ctest rls_fuzz_rls_json_corpus.
 */
#include <string.h>

#include "config.h"
#include "fuzz.h"
#include "json.h"
#include "rls.h"

static const char CFG[] = "domain: d\n"
                          "descriptors:\n"
                          "  - {key: a, metadata: {t: 1, m: {x: [1, s, true, null]}},\n"
                          "     rate_limit: {unit: second, requests_per_unit: 2, name: \"q\\\"n\"}}\n"
                          "  - {key: b, value: \"x*\", metadata: {t: 2, m: {y: 0.5}, z: \"\\u00e9\"},\n"
                          "     rate_limit: {unit: minute, requests_per_unit: 1}}\n"
                          "  - {key: s, shadow_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}\n";

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
    static rls_json_req jr;
    char msg[300];
    msg[0] = 0;
    if (rls_json_parse((const char *)data, size, &jr, msg, sizeof msg) < 0) {
        FUZZ_CHECK(msg[0] != 0 && strchr(msg, '\n') == NULL, "a refusal without a one-line reason");
        rls_json_req_free(&jr);
        return 0;
    }
    const Envoy__Service__Ratelimit__V3__RateLimitRequest *rq = &jr.req;
    size_t n = protobuf_c_message_get_packed_size(&rq->base);
    unsigned char *buf = malloc(n ? n : 1);
    FUZZ_CHECK(buf != NULL, "malloc");
    FUZZ_CHECK(protobuf_c_message_pack(&rq->base, buf) == n, "pack");
    Envoy__Service__Ratelimit__V3__RateLimitRequest *back =
        envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, n, buf);
    FUZZ_CHECK(back != NULL, "the request read from JSON does not decode once packed");
    FUZZ_CHECK(strcmp(back->domain, rq->domain) == 0 && back->hits_addend == rq->hits_addend, "domain or hits");
    FUZZ_CHECK(back->n_descriptors == rq->n_descriptors && rq->n_descriptors <= RLS_MAX_DESCRIPTORS, "descriptors");
    for (size_t i = 0; i < rq->n_descriptors; i++) {
        const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *a = rq->descriptors[i], *b = back->descriptors[i];
        FUZZ_CHECK(a->n_entries == b->n_entries && a->n_entries <= RLS_MAX_ENTRIES, "entries of %zu", i);
        FUZZ_CHECK((a->hits_addend == NULL) == (b->hits_addend == NULL) &&
                       (!a->hits_addend || a->hits_addend->value == b->hits_addend->value),
                   "hits of %zu", i);
        FUZZ_CHECK((a->limit == NULL) == (b->limit == NULL), "limit of %zu", i);
        for (size_t e = 0; e < a->n_entries; e++)
            FUZZ_CHECK(strcmp(a->entries[e]->key, b->entries[e]->key) == 0 &&
                           strcmp(a->entries[e]->value, b->entries[e]->value) == 0,
                       "entry %zu of %zu", e, i);
    }
    envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(back, NULL);
    free(buf);

    rls_answer ans;
    rls_counts counts = {0};
    uint64_t now = (uint64_t)size * 999999937ull;
    int code = rls_should_rate_limit(cfg, rq, now, RLS_HEADERS_DRAFT | RLS_HEADERS_LEGACY | RLS_DYNAMIC_METADATA,
                                     scratch, &ans, &counts, msg, sizeof msg);
    if (code == RLS_GRPC_OK) {
        static char out[1 << 20];
        size_t w = rls_json_response(&ans.resp, out, sizeof out);
        FUZZ_CHECK(w < sizeof out, "the answer does not fit 1 MiB");
        FUZZ_CHECK(strlen(out) == w && w >= 2 && out[0] == '{' && out[w - 1] == '}', "the answer: %.80s", out);
        rls_answer_release(&ans);
    } else {
        FUZZ_CHECK(msg[0] != 0, "status %d without a message", code);
    }
    rls_json_req_free(&jr);
    return 0;
}
