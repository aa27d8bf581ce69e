/* json.c -- sluice-rls: the proto's JSON form of RateLimitRequest (read)
 * and RateLimitResponse (written), for POST /json.
 *
 * Reading: a cursor over the bytes, never past `end`.  The schema is three
 * message levels deep (request, descriptor, entry / limit), so each level
 * is its own loop and nothing recurses: a value the schema does not expect
 * there (an object where a string goes, an unknown field) is refused by
 * name, never skipped.  Strings are decoded (escapes, \uXXXX with
 * surrogate pairs, to UTF-8) into one buffer as long as the input: a
 * decoded string is never longer than its quoted source, so the buffer
 * cannot overflow.  \u0000 is refused (the strings are C strings).
 * Integers: digits only (as a number or a string), checked against the
 * field's bound before each step.  Counts are bounded by
 * RLS_MAX_DESCRIPTORS and RLS_MAX_ENTRIES.
 *
 * Writing: protojson's output for the response -- lowerCamel names, enums
 * by name, defaults left out, a Duration as "S[.fff[fff[fff]]]s".
 */
#include "json.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/struct.pb-c.h"

typedef struct cur {
    const char *s, *p, *end;
    char *out; /* next free byte of the string buffer */
    char *err;
    size_t errlen;
} cur;

static int bad(cur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(cur *c, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* one line: a control byte of a quoted token is written \xNN */
    char line[160 * 4];
    size_t o = 0;
    for (const char *p = what; *p && o + 5 < sizeof line; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch < 0x20 || ch == 0x7f)
            o += (size_t)snprintf(line + o, sizeof line - o, "\\x%02x", ch);
        else
            line[o++] = (char)ch;
    }
    line[o] = 0;
    snprintf(c->err, c->errlen, "bad JSON at byte %zu: %s", (size_t)(c->p - c->s), line);
    return -1;
}

static void ws(cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Is the next token the literal `lit` (consumed if so)? */
static bool lit(cur *c, const char *lit_)
{
    size_t n = strlen(lit_);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, lit_, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}

static int expect(cur *c, char ch)
{
    ws(c);
    if (c->p >= c->end || *c->p != ch)
        return c->p >= c->end ? bad(c, "'%c' expected, the input ended", ch) : bad(c, "'%c' expected", ch);
    c->p++;
    return 0;
}

static int hex4(cur *c, unsigned *v)
{
    *v = 0;
    if (c->end - c->p < 4)
        return bad(c, "a \\u escape needs 4 hex digits");
    for (int i = 0; i < 4; i++) {
        char h = *c->p++;
        unsigned d = h >= '0' && h <= '9' ? (unsigned)(h - '0')
                   : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
                   : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10) : 16u;
        if (d == 16)
            return bad(c, "'%c' is not a hex digit", h);
        *v = *v << 4 | d;
    }
    return 0;
}

/* A string (the cursor on its opening quote) decoded into c->out; *dst
 * points at it, *dlen is its length. */
static int string(cur *c, char **dst, size_t *dlen)
{
    ws(c);
    if (c->p >= c->end || *c->p != '"')
        return bad(c, "a string expected%s", c->p >= c->end ? ", the input ended" : "");
    c->p++;
    char *o = c->out;
    *dst = o;
    for (;;) {
        if (c->p >= c->end)
            return bad(c, "unterminated string");
        unsigned char ch = (unsigned char)*c->p++;
        if (ch == '"')
            break;
        if (ch < 0x20)
            return bad(c, "control character 0x%02x in a string", ch);
        if (ch != '\\') {
            *o++ = (char)ch;
            continue;
        }
        if (c->p >= c->end)
            return bad(c, "unterminated string");
        char e = *c->p++;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned u;
            if (hex4(c, &u) < 0)
                return -1;
            if (u >= 0xDC00 && u <= 0xDFFF)
                return bad(c, "a lone low surrogate \\u%04x", u);
            if (u >= 0xD800 && u <= 0xDBFF) {
                unsigned lo;
                if (!lit(c, "\\u") || hex4(c, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
                    return bad(c, "a high surrogate \\u%04x without its low half", u);
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (u == 0)
                return bad(c, "\\u0000 in a string");
            /* 6 or 12 source bytes give at most 4 bytes */
            if (u < 0x80) {
                *o++ = (char)u;
            } else if (u < 0x800) {
                *o++ = (char)(0xC0 | u >> 6);
                *o++ = (char)(0x80 | (u & 0x3F));
            } else if (u < 0x10000) {
                *o++ = (char)(0xE0 | u >> 12);
                *o++ = (char)(0x80 | (u >> 6 & 0x3F));
                *o++ = (char)(0x80 | (u & 0x3F));
            } else {
                *o++ = (char)(0xF0 | u >> 18);
                *o++ = (char)(0x80 | (u >> 12 & 0x3F));
                *o++ = (char)(0x80 | (u >> 6 & 0x3F));
                *o++ = (char)(0x80 | (u & 0x3F));
            }
            break;
        }
        default:
            return bad(c, "unknown escape '\\%c'", e);
        }
    }
    *dlen = (size_t)(o - *dst);
    *o++ = 0;
    c->out = o;
    return 0;
}

/* An unsigned integer up to `max`: digits, bare or quoted. */
static int uint_(cur *c, const char *field, uint64_t max, uint64_t *v)
{
    ws(c);
    bool quoted = c->p < c->end && *c->p == '"';
    if (quoted)
        c->p++;
    const char *start = c->p;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        uint64_t d = (uint64_t)(*c->p - '0');
        if (d > max || x > (max - d) / 10)
            return bad(c, "\"%s\" is larger than %" PRIu64, field, max);
        x = x * 10 + d;
        c->p++;
    }
    if (c->p == start)
        return bad(c, "\"%s\" wants an unsigned integer", field);
    if (c->p - start > 1 && *start == '0')
        return bad(c, "\"%s\": a leading zero", field);
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return bad(c, "\"%s\" wants an integer, without fraction or exponent", field);
    if (quoted && (c->p >= c->end || *c->p++ != '"'))
        return bad(c, "\"%s\": a quoted integer holds digits only", field);
    *v = x;
    return 0;
}

/* null (consumed): the field keeps its default. */
static bool null_(cur *c)
{
    ws(c);
    return lit(c, "null");
}

/* Object iteration: call first with *first = true on '{'.  Returns 1 with
 * the next field's name decoded (and its ':' consumed), 0 at '}', -1. */
static int next_field(cur *c, bool *first, char **name, size_t *namelen)
{
    ws(c);
    if (*first) {
        if (expect(c, '{') < 0)
            return -1;
        ws(c);
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return 0;
        }
        *first = false;
    } else {
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return 0;
        }
        if (expect(c, ',') < 0)
            return -1;
    }
    if (string(c, name, namelen) < 0 || expect(c, ':') < 0)
        return -1;
    return 1;
}

/* Array iteration, the same way: 1 before each element, 0 at ']'. */
static int next_elem(cur *c, bool *first)
{
    ws(c);
    if (*first) {
        if (expect(c, '[') < 0)
            return -1;
        ws(c);
        *first = false;
        if (c->p < c->end && *c->p == ']') {
            c->p++;
            return 0;
        }
        return 1;
    }
    if (c->p < c->end && *c->p == ']') {
        c->p++;
        return 0;
    }
    return expect(c, ',') < 0 ? -1 : 1;
}

/* Field `name` is `a` (the proto name) or `b` (lowerCamel); bit `bit` of
 * *seen marks it, a second time is refused. */
static int is_field(cur *c, const char *name, const char *a, const char *b, unsigned bit, unsigned *seen)
{
    if (strcmp(name, a) != 0 && (!b || strcmp(name, b) != 0))
        return 0;
    if (*seen & bit)
        return bad(c, "field \"%s\" given twice", a);
    *seen |= bit;
    return 1;
}

static const char *const UNITS[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK"};

static int limit_override(cur *c, Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride *ov)
{
    envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__rate_limit_override__init(ov);
    bool first = true;
    unsigned seen = 0;
    char *name;
    size_t nl;
    int r;
    while ((r = next_field(c, &first, &name, &nl)) == 1) {
        int f;
        if ((f = is_field(c, name, "requests_per_unit", "requestsPerUnit", 1, &seen)) != 0) {
            uint64_t v = 0;
            if (f < 0 || (!null_(c) && uint_(c, "requests_per_unit", UINT32_MAX, &v) < 0))
                return -1;
            ov->requests_per_unit = (uint32_t)v;
        } else if ((f = is_field(c, name, "unit", NULL, 2, &seen)) != 0) {
            if (f < 0)
                return -1;
            if (null_(c))
                continue;
            ws(c);
            if (c->p < c->end && *c->p == '"') {
                char *u;
                size_t ul;
                if (string(c, &u, &ul) < 0)
                    return -1;
                int k = 0;
                while (k < 8 && strcmp(u, UNITS[k]) != 0)
                    k++;
                if (k == 8)
                    return bad(c, "unknown unit \"%.40s\"", u);
                ov->unit = (Envoy__Extensions__Common__Ratelimit__V3__RateLimitUnit)k;
            } else {
                uint64_t v;
                if (uint_(c, "unit", 7, &v) < 0)
                    return -1;
                ov->unit = (Envoy__Extensions__Common__Ratelimit__V3__RateLimitUnit)v;
            }
        } else {
            return bad(c, "unknown field \"%.40s\" in a limit", name);
        }
    }
    return r;
}

static int descriptor(cur *c, rls_json_req *out, size_t di, size_t *ne)
{
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor *d = &out->d[di];
    envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__init(d);
    d->entries = &out->ep[*ne];
    bool first = true;
    unsigned seen = 0;
    char *name;
    size_t nl;
    int r;
    while ((r = next_field(c, &first, &name, &nl)) == 1) {
        int f;
        if ((f = is_field(c, name, "entries", NULL, 1, &seen)) != 0) {
            if (f < 0)
                return -1;
            if (null_(c))
                continue;
            bool afirst = true;
            int a;
            while ((a = next_elem(c, &afirst)) == 1) {
                if (d->n_entries == RLS_MAX_ENTRIES)
                    return bad(c, "more than %d entries in descriptor %zu", RLS_MAX_ENTRIES, di);
                Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry *e = &out->e[*ne];
                envoy__extensions__common__ratelimit__v3__rate_limit_descriptor__entry__init(e);
                out->ep[(*ne)++] = e;
                d->n_entries++;
                bool efirst = true;
                unsigned eseen = 0;
                int q;
                while ((q = next_field(c, &efirst, &name, &nl)) == 1) {
                    int g;
                    char **dst;
                    if ((g = is_field(c, name, "key", NULL, 1, &eseen)) != 0)
                        dst = &e->key;
                    else if ((g = is_field(c, name, "value", NULL, 2, &eseen)) != 0)
                        dst = &e->value;
                    else
                        return bad(c, "unknown field \"%.40s\" in an entry", name);
                    size_t sl;
                    if (g < 0 || (!null_(c) && string(c, dst, &sl) < 0))
                        return -1;
                }
                if (q < 0)
                    return -1;
            }
            if (a < 0)
                return -1;
        } else if ((f = is_field(c, name, "limit", NULL, 2, &seen)) != 0) {
            if (f < 0)
                return -1;
            if (null_(c))
                continue;
            if (limit_override(c, &out->ov[di]) < 0)
                return -1;
            d->limit = &out->ov[di];
        } else if ((f = is_field(c, name, "hits_addend", "hitsAddend", 4, &seen)) != 0) {
            if (f < 0)
                return -1;
            if (null_(c))
                continue;
            google__protobuf__uint64_value__init(&out->hits[di]);
            if (uint_(c, "hits_addend", UINT64_MAX, &out->hits[di].value) < 0)
                return -1;
            d->hits_addend = &out->hits[di];
        } else {
            return bad(c, "unknown field \"%.40s\" in a descriptor", name);
        }
    }
    return r;
}

int rls_json_parse(const char *text, size_t len, rls_json_req *out, char *err, size_t errlen)
{
    out->strings = malloc(len + 1);
    cur c = {text, text, text + len, out->strings, err, errlen};
    if (!out->strings)
        return bad(&c, "out of memory");
    Envoy__Service__Ratelimit__V3__RateLimitRequest *req = &out->req;
    envoy__service__ratelimit__v3__rate_limit_request__init(req);
    req->descriptors = out->dp;
    size_t ne = 0;
    bool first = true;
    unsigned seen = 0;
    char *name;
    size_t nl;
    int r;
    while ((r = next_field(&c, &first, &name, &nl)) == 1) {
        int f;
        if ((f = is_field(&c, name, "domain", NULL, 1, &seen)) != 0) {
            size_t dl;
            if (f < 0 || (!null_(&c) && string(&c, &req->domain, &dl) < 0))
                return -1;
        } else if ((f = is_field(&c, name, "descriptors", NULL, 2, &seen)) != 0) {
            if (f < 0)
                return -1;
            if (null_(&c))
                continue;
            bool afirst = true;
            int a;
            while ((a = next_elem(&c, &afirst)) == 1) {
                if (req->n_descriptors == RLS_MAX_DESCRIPTORS)
                    return bad(&c, "more than %d descriptors", RLS_MAX_DESCRIPTORS);
                if (descriptor(&c, out, req->n_descriptors, &ne) < 0)
                    return -1;
                out->dp[req->n_descriptors] = &out->d[req->n_descriptors];
                req->n_descriptors++;
            }
            if (a < 0)
                return -1;
        } else if ((f = is_field(&c, name, "hits_addend", "hitsAddend", 4, &seen)) != 0) {
            uint64_t v = 0;
            if (f < 0 || (!null_(&c) && uint_(&c, "hits_addend", UINT32_MAX, &v) < 0))
                return -1;
            req->hits_addend = (uint32_t)v;
        } else {
            return bad(&c, "unknown field \"%.40s\" in the request", name);
        }
    }
    if (r < 0)
        return -1;
    ws(&c);
    if (c.p != c.end)
        return bad(&c, "text after the request object");
    return 0;
}

void rls_json_req_free(rls_json_req *r)
{
    free(r->strings);
    r->strings = NULL;
}

/* ---------------------------------------------------------------- writer */

typedef struct wbuf {
    char *b;
    size_t cap, off; /* off == cap: did not fit */
} wbuf;

static void put(wbuf *w, const char *s, size_t n)
{
    if (w->off == w->cap || w->cap - w->off <= n) {
        w->off = w->cap;
        return;
    }
    memcpy(w->b + w->off, s, n);
    w->off += n;
    w->b[w->off] = 0;
}

static void puts_(wbuf *w, const char *s) { put(w, s, strlen(s)); }

static void putf(wbuf *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void putf(wbuf *w, const char *fmt, ...)
{
    if (w->off == w->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->b + w->off, w->cap - w->off, fmt, ap);
    va_end(ap);
    w->off = n < 0 || (size_t)n >= w->cap - w->off ? w->cap : w->off + (size_t)n;
}

/* A JSON string: quote, backslash and control characters escaped. */
static void put_str(wbuf *w, const char *s)
{
    put(w, "\"", 1);
    for (; *s && w->off < w->cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            put(w, e, 2);
        } else if (ch < 0x20) {
            putf(w, "\\u%04x", ch);
        } else {
            put(w, (const char *)&ch, 1);
        }
    }
    put(w, "\"", 1);
}

/* A google.protobuf.Value as protojson writes it (a Struct is an object,
 * a ListValue an array; a number the shortest of %.15g / %.17g that reads
 * back; NaN and infinities, which JSON lacks, as null).  Depth: bounded by
 * the config's (64) plus 3. */
static void put_value(wbuf *w, const Google__Protobuf__Value *v);

static void put_struct(wbuf *w, const Google__Protobuf__Struct *st)
{
    puts_(w, "{");
    for (size_t i = 0; st && i < st->n_fields; i++) {
        if (i)
            puts_(w, ",");
        put_str(w, st->fields[i]->key ? st->fields[i]->key : "");
        puts_(w, ":");
        put_value(w, st->fields[i]->value);
    }
    puts_(w, "}");
}

static void put_value(wbuf *w, const Google__Protobuf__Value *v)
{
    switch (v ? v->kind_case : GOOGLE__PROTOBUF__VALUE__KIND__NOT_SET) {
    case GOOGLE__PROTOBUF__VALUE__KIND_NUMBER_VALUE: {
        char n[40];
        if (v->number_value != v->number_value || v->number_value > 1.7976931348623157e308 ||
            v->number_value < -1.7976931348623157e308) {
            puts_(w, "null");
            break;
        }
        snprintf(n, sizeof n, "%.15g", v->number_value);
        if (strtod(n, NULL) != v->number_value)
            snprintf(n, sizeof n, "%.17g", v->number_value);
        puts_(w, n);
        break;
    }
    case GOOGLE__PROTOBUF__VALUE__KIND_STRING_VALUE:
        put_str(w, v->string_value ? v->string_value : "");
        break;
    case GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE:
        puts_(w, v->bool_value ? "true" : "false");
        break;
    case GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE:
        put_struct(w, v->struct_value);
        break;
    case GOOGLE__PROTOBUF__VALUE__KIND_LIST_VALUE:
        puts_(w, "[");
        for (size_t i = 0; v->list_value && i < v->list_value->n_values; i++) {
            if (i)
                puts_(w, ",");
            put_value(w, v->list_value->values[i]);
        }
        puts_(w, "]");
        break;
    default:
        puts_(w, "null");
        break;
    }
}

size_t rls_json_response(const Envoy__Service__Ratelimit__V3__RateLimitResponse *resp, char *buf, size_t cap)
{
    static const char *const codes[] = {"UNKNOWN", "OK", "OVER_LIMIT"};
    wbuf w = {buf, cap, 0};
    if (cap == 0)
        return 0;
    buf[0] = 0;
    unsigned oc = (unsigned)resp->overall_code;
    putf(&w, "{\"overallCode\":\"%s\"", codes[oc < 3 ? oc : 0]);
    if (resp->n_statuses) {
        puts_(&w, ",\"statuses\":[");
        for (size_t i = 0; i < resp->n_statuses; i++) {
            const Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus *st = resp->statuses[i];
            unsigned sc = (unsigned)st->code;
            puts_(&w, i ? ",{" : "{");
            const char *sep = "";
            if (sc != 0) {
                putf(&w, "\"code\":\"%s\"", codes[sc < 3 ? sc : 0]);
                sep = ",";
            }
            if (st->current_limit) {
                const Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit *l = st->current_limit;
                putf(&w, "%s\"currentLimit\":{", sep);
                const char *lsep = "";
                if (l->name && l->name[0]) {
                    puts_(&w, "\"name\":");
                    put_str(&w, l->name);
                    lsep = ",";
                }
                if (l->requests_per_unit) {
                    putf(&w, "%s\"requestsPerUnit\":%" PRIu32, lsep, l->requests_per_unit);
                    lsep = ",";
                }
                unsigned u = (unsigned)l->unit;
                if (u != 0)
                    putf(&w, "%s\"unit\":\"%s\"", lsep, UNITS[u < 8 ? u : 0]);
                puts_(&w, "}");
                sep = ",";
            }
            if (st->limit_remaining) {
                putf(&w, "%s\"limitRemaining\":%" PRIu32, sep, st->limit_remaining);
                sep = ",";
            }
            if (st->duration_until_reset) {
                const Google__Protobuf__Duration *d = st->duration_until_reset;
                putf(&w, "%s\"durationUntilReset\":\"%" PRId64, sep, d->seconds);
                int32_t ns = d->nanos;
                if (ns > 0) {
                    if (ns % 1000000 == 0)
                        putf(&w, ".%03" PRId32, ns / 1000000);
                    else if (ns % 1000 == 0)
                        putf(&w, ".%06" PRId32, ns / 1000);
                    else
                        putf(&w, ".%09" PRId32, ns);
                }
                puts_(&w, "s\"");
            }
            puts_(&w, "}");
        }
        puts_(&w, "]");
    }
    if (resp->n_response_headers_to_add) {
        puts_(&w, ",\"responseHeadersToAdd\":[");
        for (size_t i = 0; i < resp->n_response_headers_to_add; i++) {
            const Envoy__Config__Core__V3__HeaderValue *h = resp->response_headers_to_add[i];
            puts_(&w, i ? ",{\"key\":" : "{\"key\":");
            put_str(&w, h->key ? h->key : "");
            puts_(&w, ",\"value\":");
            put_str(&w, h->value ? h->value : "");
            puts_(&w, "}");
        }
        puts_(&w, "]");
    }
    if (resp->dynamic_metadata) {
        puts_(&w, ",\"dynamicMetadata\":");
        put_struct(&w, resp->dynamic_metadata);
    }
    puts_(&w, "}");
    return w.off;
}

size_t rls_json_error(const char *msg, char *buf, size_t cap)
{
    wbuf w = {buf, cap, 0};
    if (cap == 0)
        return 0;
    buf[0] = 0;
    puts_(&w, "{\"error\":");
    put_str(&w, msg);
    puts_(&w, "}");
    return w.off;
}
