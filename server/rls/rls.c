/* rls.c -- sluice-rls: the ShouldRateLimit decision.
 *
 * Each descriptor is matched to a limit of the config (config.c).  The
 * descriptors that match an enforced limit are then decided as ONE
 * sluice composite (sluice_composite_try_acquire_at): the request is
 * allowed iff every limit allows it, and only then charged to all of them;
 * a refusal by one charges none (envoyproxy/ratelimit charges every
 * descriptor, even when another refuses: its issue #1060).
 *
 *   descriptor              status
 *   no limit matches        OK, no current_limit, limit_remaining 0
 *   unlimited               OK, no current_limit, limit_remaining 2^32-1
 *   requests_per_unit 0     OVER_LIMIT (nothing can pass)
 *   hits 0 (check only)     a probe: OK, its remaining; charges nothing
 *   quota_mode              probed first; OVER_LIMIT refuses the request
 *                           only when every quota descriptor is; charged
 *                           after the composite allowed (envoyproxy's)
 *   shadow mode             decided after the composite, alone, and only
 *                           if the request was allowed; a refusal is
 *                           counted and answered OK
 *   otherwise               the composite's answer for that limit
 *
 * A table key is the descriptor's entries (an entry matched by a
 * share_threshold wildcard gives the pattern, not its value: one counter
 * for all the values it matches), each key and value preceded by
 * its length (4 bytes), so no two descriptors share a key by accident.  The
 * table is the limit's own: the same values under two rules are two keys.
 * Two descriptors of one request that reach the same key are charged once
 * (the composite takes each limit once), with the larger of their hits,
 * and both get its answer.
 *
 * A descriptor's `limit` override (Envoy's RateLimitOverride) replaces the
 * config's limit, in a domain the config has, never in shadow mode (as
 * envoyproxy/ratelimit): its table is shared by all overrides of that
 * (requests_per_unit, unit) and its keys start with the domain.
 *
 * A limit's algorithm is fixed-window unless the config says otherwise
 * (config_yaml.c); its duration_until_reset is then the RateLimit field's t.
 *
 * Each limit of the composite is charged its own descriptor's hits
 * (sluice_composite_try_acquire_n_at): 3 of one limit and 1 of another,
 * all or nothing.
 *
 * RLS_DYNAMIC_METADATA (RESPONSE_DYNAMIC_METADATA): the answer's
 * dynamic_metadata is built last, as envoyproxy/ratelimit's
 * ratelimitToMetadata (metadata.c), a tree that rls_answer_release() frees.
 *
 * Limits in Redis (REDIS_URL, redis_backend.c) are not in the in-process
 * composite.  Their enforced descriptors are decided as one composite, all
 * or nothing (rls_redis_decide_all: one Redis script, or with leases the
 * process's leases first; each key once, with its largest hits).
 * When that cannot be (keys in several slots of a Redis Cluster: with
 * SLUICE_RLS_REDIS_HASH_TAG=domain every key begins with rls_redis_tag,
 * so they share one; or Redis failed), one after the other in request order: after a refusal the
 * later ones are probed (reported, not charged), the earlier ones stay
 * charged.  Their hits may differ.  When Redis cannot
 * decide and SLUICE_RLS_REDIS_FAILURE is `error`, the call is answered
 * UNAVAILABLE (Envoy's failure_mode_deny then decides).
 */
#include "rls.h"
#include "metadata.h"
#include "redis_backend.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t cap_u32(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

static void add_header(rls_answer *ans, size_t *nh, const char *key)
{
    Envoy__Config__Core__V3__HeaderValue *h = &ans->hv[*nh];
    envoy__config__core__v3__header_value__init(h);
    h->key = (char *)key;
    h->value = ans->hval[*nh];
    ans->hvp[*nh] = h;
    (*nh)++;
}

/* response_headers_to_add.  Draft: RateLimit-Policy and RateLimit with one
 * item per descriptor that a table decided (sluice/http.h formats them),
 * and for a refusal Retry-After, the largest of the refusing enforced
 * limits' waits (none when one of them can never pass, or a
 * requests_per_unit 0 limit refused).  Legacy: envoyproxy/ratelimit's
 * X-RateLimit-Limit, -Remaining and -Reset (seconds, rounded up) of the
 * descriptor with a limit and the least remaining. */
static void add_headers(rls_answer *ans, unsigned flags, size_t n, const rls_limit *const dl[],
                        const sluice_result dr[], const bool denforced[], bool allowed, bool refuse_all,
                        uint64_t now_ns)
{
    size_t nh = 0;
    if (flags & RLS_HEADERS_DRAFT) {
        char *pol = ans->hval[nh], *rl = ans->hval[nh + 1];
        size_t pl = 0, rll = 0;
        pol[0] = rl[0] = 0;
        int64_t retry = 0;
        bool retry_ok = !allowed && !refuse_all;
        for (size_t i = 0; i < n; i++) {
            if (!dl[i] || !dl[i]->has_policy)
                continue;
            /* The policy item never changes: made at load (config.c, config_yaml.c). */
            size_t il = strlen(dl[i]->policy_item);
            if (il == 0)
                sluice_http_policy_value(&dl[i]->policy, NULL, 0, pol, RLS_HEADER_BYTES, &pl);
            else if (pl + il + 3 <= RLS_HEADER_BYTES) {
                if (pl > 0) {
                    memcpy(pol + pl, ", ", 2);
                    pl += 2;
                }
                memcpy(pol + pl, dl[i]->policy_item, il + 1);
                pl += il;
            }
            sluice_http_ratelimit_value(&dl[i]->policy, &dr[i], now_ns, NULL, 0, rl, RLS_HEADER_BYTES, &rll);
            if (!allowed && denforced[i] && !dr[i].allowed) {
                sluice_http_state hs;
                if (sluice_http_state_get(&dl[i]->policy, &dr[i], now_ns, &hs) != 0 || hs.retry_after_s < 0)
                    retry_ok = false;
                else if (hs.retry_after_s > retry)
                    retry = hs.retry_after_s;
            }
        }
        if (pol[0]) {
            add_header(ans, &nh, "RateLimit-Policy");
            add_header(ans, &nh, "RateLimit");
        }
        if (retry_ok && retry > 0) {
            snprintf(ans->hval[nh], RLS_HEADER_BYTES, "%lld", (long long)retry);
            add_header(ans, &nh, "Retry-After");
        }
    }
    if (flags & RLS_HEADERS_LEGACY) {
        const Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *min = NULL;
        for (size_t i = 0; i < n; i++) {
            const Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st = ans->resp.statuses[i];
            if (st->current_limit && (!min || st->limit_remaining < min->limit_remaining))
                min = st;
        }
        if (min) {
            const Google__Protobuf__Duration *d = min->duration_until_reset;
            snprintf(ans->hval[nh], RLS_HEADER_BYTES, "%" PRIu32, min->current_limit->requests_per_unit);
            add_header(ans, &nh, "X-RateLimit-Limit");
            snprintf(ans->hval[nh], RLS_HEADER_BYTES, "%" PRIu32, min->limit_remaining);
            add_header(ans, &nh, "X-RateLimit-Remaining");
            snprintf(ans->hval[nh], RLS_HEADER_BYTES, "%lld",
                     d ? (long long)d->seconds + (d->nanos > 0) : 0LL);
            add_header(ans, &nh, "X-RateLimit-Reset");
        }
    }
    ans->resp.n_response_headers_to_add = nh;
    ans->resp.response_headers_to_add = ans->hvp;
}

typedef struct pending {
    size_t desc;              /* index of the descriptor */
    const rls_limit *lim;
    const unsigned char *key;
    size_t keylen;
    uint64_t hits;
    size_t ref;               /* composite slot (enforced ones) */
    const char *mname;        /* value_to_metric's name of the descriptor, or NULL */
} pending;

/* detailed_metric: count decision `which` (0 allowed, 1 denied, 2
 * shadow_denied) under the descriptor's value, rendered from its table key
 * (u32 length, bytes; key then value per entry). */
/* Append bytes to a metric name, not printable ASCII as \xNN, cut to fit. */
static size_t put_name(char *k, size_t o, const char *p, size_t n)
{
    for (size_t i = 0; i < n && o + 5 < RLS_DETAIL_KEY_BYTES; i++) {
        unsigned char ch = (unsigned char)p[i];
        o += ch >= 0x20 && ch < 0x7f ? (size_t)snprintf(k + o, RLS_DETAIL_KEY_BYTES - o, "%c", ch)
                                     : (size_t)snprintf(k + o, RLS_DETAIL_KEY_BYTES - o, "\\x%02x", ch);
    }
    return o;
}

/* value_to_metric's name: domain.key[_value].key[_value]... as
 * envoyproxy/ratelimit makes it (rls_match_entry.mval). */
static void metric_name(char k[RLS_DETAIL_KEY_BYTES], const char *domain, const char *const keys[], const size_t kl[],
                        const rls_match_entry me[], size_t n)
{
    size_t o = put_name(k, 0, domain, strlen(domain));
    for (size_t e = 0; e < n; e++) {
        o = put_name(k, o, ".", 1);
        o = put_name(k, o, keys[e], kl[e]);
        if (me[e].mval) {
            o = put_name(k, o, "_", 1);
            o = put_name(k, o, me[e].mval, me[e].mvallen);
        }
    }
    k[o < RLS_DETAIL_KEY_BYTES ? o : RLS_DETAIL_KEY_BYTES - 1] = 0;
}

static void count_detail(const rls_limit *lim, const char *domain, const unsigned char *key, size_t keylen,
                         const char *name, int which)
{
    rls_detail *d = lim->detail;
    char k[RLS_DETAIL_KEY_BYTES];
    size_t o = 0;
    if (name) { /* value_to_metric: the name made at matching */
        snprintf(k, sizeof k, "%s", name);
        o = strlen(k);
        keylen = 0;
        domain = "";
    }
    for (const char *p = domain; *p && o + 5 < sizeof k; p++)
        o += (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f
                 ? (size_t)snprintf(k + o, sizeof k - o, "%c", *p)
                 : (size_t)snprintf(k + o, sizeof k - o, "\\x%02x", (unsigned char)*p);
    size_t off = 0;
    for (int part = 0; off + 4 <= keylen && o + 5 < sizeof k; part ^= 1) {
        uint32_t n = (uint32_t)key[off] << 24 | (uint32_t)key[off + 1] << 16 | (uint32_t)key[off + 2] << 8 |
                     (uint32_t)key[off + 3]; /* put_u32's order */
        off += 4;
        if (n > keylen - off)
            break;
        k[o++] = part ? '_' : '.';
        for (uint32_t i = 0; i < n && o + 5 < sizeof k; i++) {
            unsigned char ch = key[off + i];
            o += ch >= 0x20 && ch < 0x7f ? (size_t)snprintf(k + o, sizeof k - o, "%c", ch)
                                         : (size_t)snprintf(k + o, sizeof k - o, "\\x%02x", ch);
        }
        off += n;
    }
    k[o < sizeof k ? o : sizeof k - 1] = 0;
    pthread_mutex_lock(&d->mu);
    size_t i = 0;
    while (i < d->n && strcmp(d->e[i].key, k) != 0)
        i++;
    if (i == d->n && d->n < RLS_DETAIL_MAX)
        memcpy(d->e[d->n++].key, k, sizeof k);
    if (i < d->n)
        d->e[i].v[which]++;
    else
        d->dropped++;
    pthread_mutex_unlock(&d->mu);
}

/* Is `lim` named in the `replaces` of one of the replacers? */
static bool replaced(const rls_limit *lim, const rls_limit *const *replacers, size_t nrepl)
{
    if (!lim->name || !lim->name[0])
        return false;
    for (size_t r = 0; r < nrepl; r++) {
        const char *p = replacers[r]->replaces;
        for (size_t k = 0; k < replacers[r]->nreplaces; k++) {
            if (strcmp(p, lim->name) == 0)
                return true;
            p += strlen(p) + 1;
        }
    }
    return false;
}

/* Protobuf wire walking for rls_request_check_strings: a varint (at most
 * 10 bytes) at *p below end, or false. */
static bool wire_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 70 && *p < end; shift += 7) {
        unsigned char b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* The next field of [*p, end): its number, and for a length-delimited one
 * its bytes; other wire types are skipped.  False at the end or on a
 * malformed field (protobuf-c has judged the message already). */
static bool wire_field(const unsigned char **p, const unsigned char *end, uint64_t *field,
                       const unsigned char **data, size_t *dlen)
{
    uint64_t tag, v;
    if (*p >= end || !wire_varint(p, end, &tag))
        return false;
    *field = tag >> 3;
    *data = NULL;
    *dlen = 0;
    switch (tag & 7) {
    case 0:
        return wire_varint(p, end, &v);
    case 1:
        if (end - *p < 8)
            return false;
        *p += 8;
        return true;
    case 5:
        if (end - *p < 4)
            return false;
        *p += 4;
        return true;
    case 2:
        if (!wire_varint(p, end, &v) || v > (uint64_t)(end - *p))
            return false;
        *data = *p;
        *dlen = (size_t)v;
        *p += v;
        return true;
    default:
        return false;
    }
}

int rls_request_check_strings(const unsigned char *msg, size_t len, char *err, size_t errlen)
{
    const unsigned char *p = msg, *end = msg + len, *d;
    uint64_t f;
    size_t dl, di = 0;
    while (wire_field(&p, end, &f, &d, &dl)) {
        if (d && f == 1 && memchr(d, 0, dl)) {
            snprintf(err, errlen, "the domain holds a NUL byte");
            return RLS_GRPC_INVALID_ARGUMENT;
        }
        if (!d || f != 2)
            continue;
        const unsigned char *q = d, *qend = d + dl, *e;
        size_t el, ei = 0;
        while (wire_field(&q, qend, &f, &e, &el)) {
            if (!e || f != 1)
                continue;
            const unsigned char *r = e, *rend = e + el, *s;
            size_t sl;
            while (wire_field(&r, rend, &f, &s, &sl)) {
                if (s && (f == 1 || f == 2) && memchr(s, 0, sl)) {
                    snprintf(err, errlen, "descriptor %zu entry %zu: the %s holds a NUL byte (at byte %zu)", di, ei,
                             f == 1 ? "key" : "value", (size_t)((const unsigned char *)memchr(s, 0, sl) - s));
                    return RLS_GRPC_INVALID_ARGUMENT;
                }
            }
            ei++;
        }
        di++;
    }
    return RLS_GRPC_OK;
}

/* Redis could not decide and SLUICE_RLS_REDIS_FAILURE=error: UNAVAILABLE. */
static int redis_failed(char *msg, size_t msglen, const rls_limit *lim)
{
    snprintf(msg, msglen, "Redis could not decide limit '%.200s' (unreachable, timed out or an error reply)",
             lim->full_key);
    return RLS_GRPC_UNAVAILABLE;
}

int rls_should_rate_limit(const rls_config *cfg, const Envoy__Service__Ratelimit__V3__RateLimitRequest *req,
                          uint64_t now_ns, unsigned flags, unsigned char *scratch, rls_answer *ans,
                          rls_counts *counts, char *msg, size_t msglen)
{
    size_t n = req->n_descriptors;
    if (req->domain == NULL || req->domain[0] == 0) {
        snprintf(msg, msglen, "rate limit domain must not be empty");
        return RLS_GRPC_INVALID_ARGUMENT;
    }
    if (n == 0) {
        snprintf(msg, msglen, "rate limit descriptor list must not be empty");
        return RLS_GRPC_INVALID_ARGUMENT;
    }
    if (n > RLS_MAX_DESCRIPTORS) {
        snprintf(msg, msglen, "%zu descriptors in one request; at most %d", n, RLS_MAX_DESCRIPTORS);
        return RLS_GRPC_INVALID_ARGUMENT;
    }
    envoy__service__ratelimit__v3__rate_limit_response__init(&ans->resp);
    ans->resp.n_statuses = n;
    ans->resp.statuses = ans->stp;

    const uint64_t req_hits = req->hits_addend > 0 ? req->hits_addend : 1;
    /* Up to SLUICE_COMPOSITE_MAX distinct limits, but every descriptor may
     * be enforced: several may share one (found by fuzz_rls_request). */
    pending enforced[RLS_MAX_DESCRIPTORS], shadow[RLS_MAX_DESCRIPTORS], probes[RLS_MAX_DESCRIPTORS];
    pending renf[RLS_MAX_DESCRIPTORS]; /* enforced, on Redis */
    pending quota[RLS_MAX_DESCRIPTORS]; /* quota_mode */
    char mnames[RLS_MAX_DESCRIPTORS][RLS_DETAIL_KEY_BYTES]; /* value_to_metric's names (p.mname) */
    size_t ne = 0, ns = 0, np = 0, nr = 0, nq = 0;
    sluice_limit_ref refs[SLUICE_COMPOSITE_MAX];
    size_t nrefs = 0;
    uint64_t hits_of[SLUICE_COMPOSITE_MAX]; /* each composite limit's hits */
    bool refuse_all = false; /* a requests_per_unit 0 limit, enforced */
    size_t used = 0;

    /* envoyproxy/ratelimit's `replaces`: first the limits the request's
     * descriptors match that replace others (only when the config has
     * any); a limit whose name one of them lists is then not applied. */
    const rls_limit *replacers[RLS_MAX_DESCRIPTORS];
    size_t nrepl = 0;
    if (rls_config_has_replaces(cfg)) {
        size_t domainlen = strlen(req->domain);
        for (size_t i = 0; i < n; i++) {
            const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d = req->descriptors[i];
            size_t ents = d ? d->n_entries : 0;
            if (ents == 0 || ents > RLS_MAX_ENTRIES || d->limit) /* refused below, or an override */
                continue;
            const char *keys[RLS_MAX_ENTRIES], *values[RLS_MAX_ENTRIES];
            size_t kl[RLS_MAX_ENTRIES], vl[RLS_MAX_ENTRIES];
            for (size_t e = 0; e < ents; e++) {
                keys[e] = d->entries[e]->key ? d->entries[e]->key : "";
                values[e] = d->entries[e]->value ? d->entries[e]->value : "";
                kl[e] = strlen(keys[e]);
                vl[e] = strlen(values[e]);
            }
            const rls_limit *l = rls_config_find(cfg, req->domain, domainlen, keys, kl, values, vl, ents);
            if (l && l->nreplaces)
                replacers[nrepl++] = l;
        }
    }

    for (size_t i = 0; i < n; i++) {
        Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st = &ans->st[i];
        envoy__service__ratelimit__v3__rate_limit_response__descriptor_status__init(st);
        st->code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK;
        ans->stp[i] = st;
        const Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d = req->descriptors[i];
        size_t ents = d ? d->n_entries : 0;
        if (ents == 0) {
            snprintf(msg, msglen, "descriptor %zu has no entries", i);
            return RLS_GRPC_INVALID_ARGUMENT;
        }
        if (ents > RLS_MAX_ENTRIES) {
            snprintf(msg, msglen, "descriptor %zu has %zu entries; at most %d", i, ents, RLS_MAX_ENTRIES);
            return RLS_GRPC_INVALID_ARGUMENT;
        }
        const char *keys[RLS_MAX_ENTRIES], *values[RLS_MAX_ENTRIES];
        size_t kl[RLS_MAX_ENTRIES], vl[RLS_MAX_ENTRIES];
        size_t need = 0;
        for (size_t e = 0; e < ents; e++) {
            keys[e] = d->entries[e]->key ? d->entries[e]->key : "";
            values[e] = d->entries[e]->value ? d->entries[e]->value : "";
            kl[e] = strlen(keys[e]);
            vl[e] = strlen(values[e]);
            need += 8 + kl[e] + vl[e];
        }
        uint64_t hits = d->hits_addend ? d->hits_addend->value : req_hits;
        const rls_limit *lim;
        size_t domainlen = strlen(req->domain);
        bool override = d->limit != NULL;
        const char *mname = NULL;
        if (override) {
            /* Envoy's RateLimitOverride, in a domain the config has. */
            if (!rls_config_has_domain(cfg, req->domain, domainlen))
                continue;
            if (rls_unit_ns((int)d->limit->unit) == 0) {
                snprintf(msg, msglen, "descriptor %zu: limit override with unit %d (want 1..7, SECOND..WEEK)", i,
                         (int)d->limit->unit);
                return RLS_GRPC_INVALID_ARGUMENT;
            }
            lim = rls_config_override(cfg, d->limit->requests_per_unit, (int)d->limit->unit);
            if (!lim) {
                snprintf(msg, msglen, "descriptor %zu: more than %d distinct limit overrides", i, RLS_MAX_OVERRIDES);
                return RLS_GRPC_RESOURCE_EXHAUSTED;
            }
            need += 4 + domainlen; /* one override table serves every domain */
        } else {
            rls_match_entry me[RLS_MAX_ENTRIES];
            lim = rls_config_find_match(cfg, req->domain, domainlen, keys, kl, values, vl, ents, me);
            if (lim && lim->value_to_metric) {
                metric_name(mnames[i], req->domain, keys, kl, me, ents);
                mname = mnames[i];
            }
            for (size_t e = 0; lim && e < ents; e++) {
                if (me[e].share) { /* share_threshold: counted under the pattern */
                    need = need - vl[e] + me[e].sharelen;
                    values[e] = me[e].share;
                    vl[e] = me[e].sharelen;
                }
            }
        }
        if (!lim || (nrepl && replaced(lim, replacers, nrepl)))
            continue; /* answered OK, as a descriptor no limit matches */
        if (lim->unlimited) {
            st->limit_remaining = UINT32_MAX;
            continue;
        }
        Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit *cl = &ans->lim[i];
        envoy__service__ratelimit__v3__rate_limit_response__rate_limit__init(cl);
        cl->name = lim->name;
        cl->requests_per_unit = lim->requests_per_unit;
        cl->unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)lim->unit;
        st->current_limit = cl;
        Google__Protobuf__Duration *rd = &ans->reset[i];
        google__protobuf__duration__init(rd);
        uint64_t left = lim->window_ns - now_ns % lim->window_ns;
        rd->seconds = (int64_t)(left / 1000000000u);
        rd->nanos = (int32_t)(left % 1000000000u);
        st->duration_until_reset = rd;
        bool shadowed = (flags & RLS_SHADOW_ALL) || lim->shadow_mode;
        if (!lim->table && !lim->redis) { /* requests_per_unit 0 */
            if (shadowed) {
                if (hits > 0) {
                    counts->shadow_refusals++;
                    atomic_fetch_add_explicit(&lim->stats->shadow_denied, 1, memory_order_relaxed);
                }
            } else if (hits > 0) {
                atomic_fetch_add_explicit(&lim->stats->denied, 1, memory_order_relaxed);
                st->code = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
                refuse_all = true;
            }
            continue;
        }
        const size_t tag = lim->redis ? rls_redis_tag_len() : 0; /* SLUICE_RLS_REDIS_HASH_TAG=domain */
        need += tag;
        size_t max_key = rls_config_shared() && !lim->redis ? RLS_SHARED_KEY_BYTES : SLUICE_MAX_KEY_BYTES;
        if (need > max_key) {
            snprintf(msg, msglen, "descriptor %zu is %zu bytes long; at most %zu", i, need, max_key);
            return RLS_GRPC_INVALID_ARGUMENT;
        }
        if (used + need > RLS_SCRATCH_BYTES) {
            snprintf(msg, msglen, "the descriptors are %zu bytes long or more; at most %u", used + need,
                     RLS_SCRATCH_BYTES);
            return RLS_GRPC_INVALID_ARGUMENT;
        }
        unsigned char *key = scratch + used;
        size_t off = 0;
        if (tag) {
            rls_redis_tag(req->domain, domainlen, key);
            off = tag;
        }
        if (override) {
            put_u32(key + off, (uint32_t)domainlen);
            memcpy(key + off + 4, req->domain, domainlen);
            off += 4 + domainlen;
        }
        for (size_t e = 0; e < ents; e++) {
            put_u32(key + off, (uint32_t)kl[e]);
            memcpy(key + off + 4, keys[e], kl[e]);
            off += 4 + kl[e];
            put_u32(key + off, (uint32_t)vl[e]);
            memcpy(key + off + 4, values[e], vl[e]);
            off += 4 + vl[e];
        }
        used += off;
        pending p = {i, lim, key, off, hits, 0, mname};
        if (hits == 0) {
            probes[np++] = p;
        } else if (shadowed) {
            shadow[ns++] = p;
        } else if (lim->quota_mode || (flags & RLS_QUOTA_ALL)) {
            quota[nq++] = p;
        } else if (lim->redis) {
            renf[nr++] = p; /* decided after the composite, in request order */
        } else {
            size_t r = nrefs;
            for (size_t j = 0; j < nrefs; j++) {
                if (refs[j].table == lim->table && refs[j].keylen == off && memcmp(refs[j].key, key, off) == 0)
                    r = j;
            }
            if (r == nrefs) {
                if (nrefs == SLUICE_COMPOSITE_MAX) {
                    snprintf(msg, msglen, "more than %d descriptors of one request match a limit",
                             SLUICE_COMPOSITE_MAX);
                    return RLS_GRPC_INVALID_ARGUMENT;
                }
                hits_of[nrefs] = 0;
                refs[nrefs++] = sluice_ref_key(lim->table, key, off);
            }
            if (hits > hits_of[r]) /* one key twice: charged once, the larger hits */
                hits_of[r] = hits;
            p.ref = r;
            enforced[ne++] = p;
        }
    }

    /* quota_mode (envoyproxy/ratelimit): a quota descriptor over its limit
     * refuses the request only when every quota descriptor is.  Each is
     * probed first: if none could pass, the request is refused and charges
     * nothing; else the others decide, and if they allow, each quota
     * descriptor that could pass is charged (one a concurrent call spent
     * in between then answers OVER_LIMIT, and the request stays allowed). */
    sluice_result qres[RLS_MAX_DESCRIPTORS];
    bool qpass[RLS_MAX_DESCRIPTORS];
    size_t nqpass = 0;
    for (size_t j = 0; j < nq; j++) {
        bool failed = false;
        if (quota[j].lim->redis)
            rls_redis_decide(quota[j].lim->redis, quota[j].key, quota[j].keylen, 0, &qres[j], &failed);
        else
            sluice_table_try_acquire_at(quota[j].lim->table, quota[j].key, quota[j].keylen, 0, now_ns, &qres[j]);
        if (failed)
            return redis_failed(msg, msglen, quota[j].lim);
        qpass[j] = qres[j].error == 0 && qres[j].remaining >= quota[j].hits;
        nqpass += qpass[j];
    }
    if (nq > 0 && nqpass == 0)
        refuse_all = true;

    /* Each descriptor's limit and decision, for the header fields. */
    const rls_limit *dl[RLS_MAX_DESCRIPTORS] = {NULL};
    sluice_result dr[RLS_MAX_DESCRIPTORS];
    bool denforced[RLS_MAX_DESCRIPTORS] = {false};
    bool allowed = !refuse_all;
    if (nrefs > 0) {
        sluice_result res, per[SLUICE_COMPOSITE_MAX];
        if (refuse_all) /* a probe of every limit */
            memset(hits_of, 0, sizeof hits_of);
        bool ok = sluice_composite_try_acquire_n_at(refs, hits_of, nrefs, now_ns, &res, per);
        if (res.error == SLUICE_EINVAL) {
            snprintf(msg, msglen, "internal error: a composite of %zu limits was refused as a bad call", nrefs);
            return RLS_GRPC_INTERNAL;
        }
        allowed = allowed && ok;
        for (size_t j = 0; j < ne; j++) {
            const sluice_result *r = &per[enforced[j].ref];
            Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st = &ans->st[enforced[j].desc];
            /* When refused, a limit that would have allowed says OK; one
             * that could not decide (a full table, no memory) refuses. */
            bool own = r->allowed && r->error == 0;
            st->code = own ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
                           : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
            st->limit_remaining = own ? cap_u32(r->remaining) : 0;
            dl[enforced[j].desc] = enforced[j].lim;
            dr[enforced[j].desc] = *r;
            denforced[enforced[j].desc] = true;
            if (own)
                counts->within_limit++;
            else
                counts->over_limit++;
            atomic_fetch_add_explicit(own ? &enforced[j].lim->stats->allowed : &enforced[j].lim->stats->denied, 1,
                                      memory_order_relaxed);
            if (enforced[j].lim->detail)
                count_detail(enforced[j].lim, req->domain, enforced[j].key, enforced[j].keylen, enforced[j].mname,
                             own ? 0 : 1);
        }
    }
    /* On Redis, several descriptors: one all-or-nothing call when the
     * tier can (on a Cluster, the keys it sends in one slot), each key once
     * with its largest hits; else one call per limit, in request order,
     * after a refusal the rest probed, not charged (docs/rls.md, "Redis"). */
    sluice_result rall[RLS_MAX_DESCRIPTORS];
    bool have_all = false;
    if (nr > 1 && allowed) {
        struct sluice_redis *ul[RLS_MAX_DESCRIPTORS];
        const void *uk[RLS_MAX_DESCRIPTORS];
        size_t ukl[RLS_MAX_DESCRIPTORS], ui[RLS_MAX_DESCRIPTORS], nu = 0;
        uint64_t uh[RLS_MAX_DESCRIPTORS];
        for (size_t j = 0; j < nr; j++) {
            size_t u = nu;
            for (size_t v = 0; v < nu; v++) {
                if (ul[v] == renf[j].lim->redis && ukl[v] == renf[j].keylen &&
                    memcmp(uk[v], renf[j].key, renf[j].keylen) == 0)
                    u = v;
            }
            if (u == nu) {
                ul[nu] = renf[j].lim->redis;
                uk[nu] = renf[j].key;
                ukl[nu] = renf[j].keylen;
                uh[nu++] = 0;
            }
            if (renf[j].hits > uh[u])
                uh[u] = renf[j].hits;
            ui[j] = u;
        }
        sluice_result per[RLS_MAX_DESCRIPTORS];
        bool all_ok = false;
        if (nu == 1) { /* one key: one decision */
            bool failed = false;
            all_ok = rls_redis_decide(ul[0], uk[0], ukl[0], uh[0], &per[0], &failed);
            if (failed)
                return redis_failed(msg, msglen, renf[0].lim);
        }
        if (nu == 1 || rls_redis_decide_all(ul, uk, ukl, uh, nu, per, &all_ok) == 0) {
            for (size_t j = 0; j < nr; j++)
                rall[j] = per[ui[j]];
            allowed = all_ok;
            have_all = true;
        }
    }
    for (size_t j = 0; j < nr; j++) {
        sluice_result r;
        bool ok, failed = false;
        if (have_all) {
            r = rall[j];
            ok = r.allowed; /* its own verdict; charged only if all allowed */
        } else {
            ok = rls_redis_decide(renf[j].lim->redis, renf[j].key, renf[j].keylen, allowed ? renf[j].hits : 0, &r,
                                  &failed);
            if (failed)
                return redis_failed(msg, msglen, renf[j].lim);
            if (allowed && !ok)
                allowed = false;
            else if (ok && r.remaining < renf[j].hits && !allowed)
                ok = false; /* a probe: would it have passed? */
        }
        Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st = &ans->st[renf[j].desc];
        st->code = ok ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
                      : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
        st->limit_remaining = ok ? cap_u32(r.remaining) : 0;
        dl[renf[j].desc] = renf[j].lim;
        dr[renf[j].desc] = r;
        denforced[renf[j].desc] = true;
        if (ok)
            counts->within_limit++;
        else
            counts->over_limit++;
        atomic_fetch_add_explicit(ok ? &renf[j].lim->stats->allowed : &renf[j].lim->stats->denied, 1,
                                  memory_order_relaxed);
        if (renf[j].lim->detail)
            count_detail(renf[j].lim, req->domain, renf[j].key, renf[j].keylen, renf[j].mname, ok ? 0 : 1);
    }
    for (size_t j = 0; j < ns; j++) {
        sluice_result r;
        bool ok, failed = false;
        if (shadow[j].lim->redis)
            ok = rls_redis_decide(shadow[j].lim->redis, shadow[j].key, shadow[j].keylen, allowed ? shadow[j].hits : 0,
                                  &r, &failed);
        else
            ok = sluice_table_try_acquire_at(shadow[j].lim->table, shadow[j].key, shadow[j].keylen,
                                             allowed ? shadow[j].hits : 0, now_ns, &r);
        if (failed)
            return redis_failed(msg, msglen, shadow[j].lim);
        Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st = &ans->st[shadow[j].desc];
        st->limit_remaining = ok ? cap_u32(r.remaining) : 0;
        dl[shadow[j].desc] = shadow[j].lim;
        dr[shadow[j].desc] = r;
        if (!ok)
            counts->shadow_refusals++;
        atomic_fetch_add_explicit(ok ? &shadow[j].lim->stats->allowed : &shadow[j].lim->stats->shadow_denied, 1,
                                  memory_order_relaxed);
        if (shadow[j].lim->detail)
            count_detail(shadow[j].lim, req->domain, shadow[j].key, shadow[j].keylen, shadow[j].mname,
                         ok ? 0 : 2);
    }
    for (size_t j = 0; j < nq; j++) {
        sluice_result r = qres[j];
        bool ok = qpass[j], failed = false;
        if (allowed && ok) {
            if (quota[j].lim->redis)
                ok = rls_redis_decide(quota[j].lim->redis, quota[j].key, quota[j].keylen, quota[j].hits, &r, &failed);
            else
                ok = sluice_table_try_acquire_at(quota[j].lim->table, quota[j].key, quota[j].keylen, quota[j].hits,
                                                 now_ns, &r);
            if (failed)
                return redis_failed(msg, msglen, quota[j].lim);
        }
        Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st = &ans->st[quota[j].desc];
        st->code = ok ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
                      : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
        st->limit_remaining = ok ? cap_u32(r.remaining) : 0;
        dl[quota[j].desc] = quota[j].lim;
        dr[quota[j].desc] = r;
        if (ok)
            counts->within_limit++;
        else
            counts->over_limit++;
        atomic_fetch_add_explicit(ok ? &quota[j].lim->stats->allowed : &quota[j].lim->stats->denied, 1,
                                  memory_order_relaxed);
        if (quota[j].lim->detail)
            count_detail(quota[j].lim, req->domain, quota[j].key, quota[j].keylen, quota[j].mname, ok ? 0 : 1);
    }
    for (size_t j = 0; j < np; j++) {
        sluice_result r;
        bool failed = false;
        if (probes[j].lim->redis)
            rls_redis_decide(probes[j].lim->redis, probes[j].key, probes[j].keylen, 0, &r, &failed);
        else
            sluice_table_try_acquire_at(probes[j].lim->table, probes[j].key, probes[j].keylen, 0, now_ns, &r);
        if (failed)
            return redis_failed(msg, msglen, probes[j].lim);
        ans->st[probes[j].desc].limit_remaining = cap_u32(r.remaining);
        dl[probes[j].desc] = probes[j].lim;
        dr[probes[j].desc] = r;
    }
    if (refuse_all)
        counts->over_limit++;
    ans->resp.overall_code = allowed ? ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OK
                                     : ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__CODE__OVER_LIMIT;
    /* duration_until_reset: the window's end for fixed-window (set above);
     * for the other algorithms the time within which a permit comes back,
     * as the RateLimit field's t (sluice/http.h), 0 when the limit is full. */
    for (size_t i = 0; i < n; i++) {
        sluice_http_state hs;
        if (dl[i] && dl[i]->algorithm != SLUICE_ALG_FIXED_WINDOW && dl[i]->has_policy &&
            sluice_http_state_get(&dl[i]->policy, &dr[i], now_ns, &hs) == 0) {
            ans->reset[i].seconds = hs.reset_s > 0 ? hs.reset_s : 0;
            ans->reset[i].nanos = 0;
        }
    }
    if (flags & (RLS_HEADERS_DRAFT | RLS_HEADERS_LEGACY))
        add_headers(ans, flags, n, dl, dr, denforced, allowed, refuse_all, now_ns);
    if (flags & RLS_DYNAMIC_METADATA)
        ans->resp.dynamic_metadata = rls_dynamic_metadata(req, ans, dl);
    return RLS_GRPC_OK;
}
