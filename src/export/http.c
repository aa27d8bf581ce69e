/* http.c -- a decision as the RateLimit header fields of
 * draft-ietf-httpapi-ratelimit-headers-10 (docs/http-headers.md).
 *
 * A policy is made once from a parsed spec (sluice_spec_parse() of a
 * table's spec, or sluice_limiter_spec_get() of a limiter: the same answer
 * for the same limit) and keeps what the fields need: q and w, the burst,
 * and which bound applies to t.  Formatting a decision is then integer arithmetic and
 * byte copies, no allocation, no lock.
 *
 * q and w: the draft wants w a whole number of seconds >= 1.  With
 * w = ceil(W / 1 s) and q = floor(L * w / W) (in ns), q/w <= L/W: the
 * advertised rate is never above the real one, and it is the real one
 * whenever W is a whole number of seconds or divides one.  L * w * 10^9 is
 * below 10^12 * 3.2 * 10^18 < 2^128.
 *
 * t: the least time after which the decision guarantees one more permit.
 * Each algorithm gives an upper bound that needs no state (the result
 * carries none): the end of the fixed window; PERIOD for the sliding
 * windows, by when everything counted now has left (for the wheel an
 * admission in slot s leaves at (s + N) * tick <= now + W); the end of the
 * next window for the two-window estimate, when `prev` has become the window
 * before and weighs nothing; PERIOD/LIMIT for the buckets, one permit's time
 * at the rate.  A refusal's retry_after_ns, when shorter, is a tighter
 * bound (the request it was computed for needs at least one more permit
 * than there is).  Seconds are ns / 10^9 rounded up, so Retry-After, which
 * is ceil(retry_after_ns), is never below t.
 *
 * Output is written through the library's cursor (base/text.h), which
 * counts every byte asked for and stores those that fit; at the end of each
 * field value or line it either NUL-terminates after it or, when it did not
 * fit whole, cuts the buffer back to where the item started -- so a short
 * buffer never holds a partial field value.
 *
 * Sections and entry points:
 *   output         sf-string and sf-binary through the cursor
 *   policy         sluice_http_policy_init, sluice_http_policy_from_limiter
 *   one decision   sluice_http_state_get (reset and retry in seconds)
 *   field values   sluice_http_policy_value, sluice_http_ratelimit_value
 *   header block   sluice_http_headers (RateLimit-Policy, RateLimit,
 *                  Retry-After, the legacy X-RateLimit-* lines)
 */
#include "alg/alg.h"
#include "base/text.h"
#include "alg/calendar.h"

#include <stdio.h>
#include <string.h>

#define NS_PER_S 1000000000ULL

enum { KIND_FIXED, KIND_SLIDING, KIND_APPROX, KIND_BUCKET, KIND_CALENDAR };

/* ---- output ------------------------------------------------------------ */

/* sf-string: printable ASCII in double quotes, `"` and `\` escaped. */
static void put_sf_string(sluice__out *c, const char *s)
{
    sluice__out_put(c, "\"", 1);
    sluice__out_escaped(c, s); /* name_ok: no newline to escape */
    sluice__out_put(c, "\"", 1);
}

/* sf-binary: base64 (RFC 4648 section 4, with padding) between colons. */
static void put_sf_binary(sluice__out *c, const unsigned char *p, size_t n)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    sluice__out_put(c, ":", 1);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n) v |= p[i + 2];
        char q[4] = {b64[v >> 18 & 63], b64[v >> 12 & 63],
                     i + 1 < n ? b64[v >> 6 & 63] : '=', i + 2 < n ? b64[v & 63] : '='};
        sluice__out_put(c, q, 4);
    }
    sluice__out_put(c, ":", 1);
}

/* ---- policy ------------------------------------------------------------- */

static uint64_t ceil_s(uint64_t ns) { return ns / NS_PER_S + (ns % NS_PER_S != 0); }

static bool name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > SLUICE_HTTP_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e) return false;
    return true;
}

/* Fill p from a parsed spec (the name already checked); pf, when not NULL,
 * is its profile: a calendar quota's windows come from there. */
static void policy_set(sluice_http_policy *p, const char *name, const sluice_spec_info *in,
                       const sluice__profile *pf)
{
    memset(p, 0, sizeof *p);
    memcpy(p->name, name, strlen(name) + 1);
    p->limit = in->limit;
    p->period_ns = in->period_ns;
    p->burst = in->capacity;
    p->window_s = ceil_s(in->period_ns); /* >= 1, as PERIOD >= 1 ns */
    u128 q = (u128)in->limit * p->window_s * NS_PER_S / in->period_ns;
    p->quota = q > SLUICE_HTTP_INT_MAX ? SLUICE_HTTP_INT_MAX : (uint64_t)q;
    switch (in->algorithm) {
    case SLUICE_ALG_FIXED_WINDOW: p->kind_ = KIND_FIXED; break;
    case SLUICE_ALG_SLIDING_APPROX: p->kind_ = KIND_APPROX; break;
    case SLUICE_ALG_TOKEN_BUCKET:
    case SLUICE_ALG_LEAKY_BUCKET: p->kind_ = KIND_BUCKET; break;
    default: p->kind_ = KIND_SLIDING; break; /* sliding-log, sliding-wheel */
    }
    if (pf && pf->tz) {
        p->kind_ = KIND_CALENDAR;
        p->zone_ = pf->tz;
        p->cal_[0] = pf->cal_unit, p->cal_[1] = pf->cal_n, p->cal_[2] = pf->anchor;
    }
}

/* The profile of spec, for its calendar (0 or an error code). */
static int profile_of(const char *spec, sluice__profile *pf, char *err, size_t errlen)
{
    return sluice__spec_parse(spec, pf, err, errlen);
}

int sluice_http_policy_init(sluice_http_policy *p, const char *name, const char *spec,
                            char *err, size_t errlen)
{
    if (errlen > 0 && err) err[0] = '\0';
    if (!p || !name || !spec) {
        sluice__errf(err, errlen, "NULL argument");
        return SLUICE_EINVAL;
    }
    if (!name_ok(name)) {
        sluice__errf(err, errlen,
                     "invalid policy name: want 1 to %d printable ASCII characters",
                     SLUICE_HTTP_NAME_MAX);
        return SLUICE_EINVAL;
    }
    sluice_spec_info in;
    int rc = sluice_spec_parse(spec, &in, err, errlen);
    if (rc != 0) return rc;
    sluice__profile pf;
    if ((rc = profile_of(spec, &pf, err, errlen)) != 0) return rc;
    policy_set(p, name, &in, &pf);
    return 0;
}

int sluice_http_policy_from_limiter(sluice_http_policy *p, const char *name,
                                    const sluice_limiter *lim)
{
    if (!p || !name || !lim || !name_ok(name)) return SLUICE_EINVAL;
    sluice_spec_info in;
    sluice_limiter_spec_get(lim, &in);
    sluice__profile pf;
    char spec[SLUICE_SPEC_MAX];
    const bool cal = in.clock == SLUICE_CLOCK_REALTIME &&
                     sluice_limiter_spec_format(lim, spec, sizeof spec) > 0 &&
                     profile_of(spec, &pf, NULL, 0) == 0;
    policy_set(p, name, &in, cal ? &pf : NULL);
    return 0;
}

/* ---- one decision ------------------------------------------------------- */

int sluice_http_state_get(const sluice_http_policy *p, const sluice_result *res,
                          uint64_t now_ns, sluice_http_state *out)
{
    if (!p || !res || !out) return SLUICE_EINVAL;
    const uint64_t W = p->period_ns;
    const uint64_t now = now_ns > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : now_ns;
    const bool retry = !res->allowed && res->retry_after_ns >= 0;

    out->remaining = res->remaining > SLUICE_HTTP_INT_MAX ? SLUICE_HTTP_INT_MAX : res->remaining;
    out->reset_s = -1;
    if (res->remaining < p->burst) {
        uint64_t bound;
        switch (p->kind_) {
        case KIND_FIXED: bound = W - now % W; break;
        case KIND_CALENDAR: { /* the exact end of the calendar window */
            sluice__profile pf;
            memset(&pf, 0, sizeof pf);
            pf.tz = p->zone_;
            pf.cal_unit = p->cal_[0], pf.cal_n = p->cal_[1], pf.anchor = p->cal_[2];
            uint64_t s, e;
            sluice__cal_window(&pf, now, &s, &e);
            bound = e - now;
            break;
        }
        case KIND_APPROX: bound = 2 * W - now % W; break; /* 2W < 2^63 */
        case KIND_BUCKET: bound = W / p->limit + (W % p->limit != 0); break;
        default: bound = W; break;
        }
        if (retry && (uint64_t)res->retry_after_ns < bound) bound = (uint64_t)res->retry_after_ns;
        out->reset_s = (int64_t)ceil_s(bound);
    }
    if (res->allowed)
        out->retry_after_s = 0;
    else if (!retry)
        out->retry_after_s = -1;
    else {
        out->retry_after_s = (int64_t)ceil_s((uint64_t)res->retry_after_ns);
        if (out->retry_after_s < out->reset_s) out->retry_after_s = out->reset_s;
    }
    return 0;
}

/* ---- field values ------------------------------------------------------- */

static void put_policy(sluice__out *c, const sluice_http_policy *p, const void *pk, size_t pklen)
{
    put_sf_string(c, p->name);
    sluice__out_str(c, ";q=");
    sluice__out_u64(c, p->quota);
    sluice__out_str(c, ";w=");
    sluice__out_u64(c, p->window_s);
    if (p->burst != p->quota) {
        sluice__out_str(c, ";sluice-burst=");
        sluice__out_u64(c, p->burst > SLUICE_HTTP_INT_MAX ? SLUICE_HTTP_INT_MAX : p->burst);
    }
    if (pklen) {
        sluice__out_str(c, ";pk=");
        put_sf_binary(c, pk, pklen);
    }
}

static void put_ratelimit(sluice__out *c, const sluice_http_policy *p, const sluice_http_state *s,
                          const void *pk, size_t pklen)
{
    put_sf_string(c, p->name);
    sluice__out_str(c, ";r=");
    sluice__out_u64(c, s->remaining);
    if (s->reset_s >= 0) {
        sluice__out_str(c, ";t=");
        sluice__out_u64(c, (uint64_t)s->reset_s);
    }
    if (pklen) {
        sluice__out_str(c, ";pk=");
        put_sf_binary(c, pk, pklen);
    }
}

static bool out_ok(const char *buf, size_t buflen) { return buf || buflen == 0; }

/* The cursor for an append at offset len, with the list separator: what
 * is before len is kept, and an append that does not fit is cut back to
 * it. */
static sluice__out append_at(char *buf, size_t buflen, size_t len)
{
    sluice__out c;
    sluice__out_init(&c, buf, buflen, len);
    if (len > 0) sluice__out_str(&c, ", ");
    return c;
}

/* Finish an append: report the length, and whether everything up to it
 * fits with its NUL. */
static int append_end(sluice__out *c, size_t *len)
{
    bool fit = sluice__out_end(c);
    *len = c->len;
    return fit ? 0 : SLUICE_ENOSPC;
}

int sluice_http_policy_value(const sluice_http_policy *p, const void *pk, size_t pklen,
                             char *buf, size_t buflen, size_t *len)
{
    if (!p || !len || (pklen && !pk) || !out_ok(buf, buflen)) return SLUICE_EINVAL;
    sluice__out c = append_at(buf, buflen, *len);
    put_policy(&c, p, pk, pklen);
    return append_end(&c, len);
}

int sluice_http_ratelimit_value(const sluice_http_policy *p, const sluice_result *res,
                                uint64_t now_ns, const void *pk, size_t pklen, char *buf,
                                size_t buflen, size_t *len)
{
    if (!p || !res || !len || (pklen && !pk) || !out_ok(buf, buflen)) return SLUICE_EINVAL;
    sluice_http_state s;
    sluice_http_state_get(p, res, now_ns, &s);
    sluice__out c = append_at(buf, buflen, *len);
    put_ratelimit(&c, p, &s, pk, pklen);
    return append_end(&c, len);
}

/* ---- the header block --------------------------------------------------- */

/* One `Name: value` line with its CRLF, an item of the cursor: lines
 * after a cut one are not stored (the buffer holds whole lines only, in
 * order). */
static void line_u64(sluice__out *c, const char *name, uint64_t v)
{
    sluice__out_str(c, name);
    sluice__out_str(c, ": ");
    sluice__out_u64(c, v);
    sluice__out_str(c, "\r\n");
    sluice__out_end(c);
}

int sluice_http_headers(const sluice_http_policy *p, const sluice_result *res,
                        uint64_t now_ns, const void *pk, size_t pklen, unsigned flags,
                        char *buf, size_t buflen, size_t *needed)
{
    if (!p || !res || (pklen && !pk) || !out_ok(buf, buflen) ||
        (flags & ~(SLUICE_HTTP_LEGACY | SLUICE_HTTP_NO_POLICY)))
        return SLUICE_EINVAL;
    sluice_http_state s;
    sluice_http_state_get(p, res, now_ns, &s);
    sluice__out c;
    sluice__out_init(&c, buf, buflen, 0);
    if (buflen > 0) buf[0] = '\0';
    if (!(flags & SLUICE_HTTP_NO_POLICY)) {
        sluice__out_str(&c, "RateLimit-Policy: ");
        put_policy(&c, p, pk, pklen);
        sluice__out_str(&c, "\r\n");
        sluice__out_end(&c);
    }
    sluice__out_str(&c, "RateLimit: ");
    put_ratelimit(&c, p, &s, pk, pklen);
    sluice__out_str(&c, "\r\n");
    sluice__out_end(&c);
    if (!res->allowed && s.retry_after_s >= 0)
        line_u64(&c, "Retry-After", (uint64_t)s.retry_after_s);
    if (flags & SLUICE_HTTP_LEGACY) {
        line_u64(&c, "X-RateLimit-Limit", p->quota);
        line_u64(&c, "X-RateLimit-Remaining", s.remaining);
        line_u64(&c, "X-RateLimit-Reset", s.reset_s < 0 ? 0 : (uint64_t)s.reset_s);
    }
    if (needed) *needed = c.len;
    return sluice__out_fits(&c) ? 0 : SLUICE_ENOSPC;
}
