/* concurrency.c -- the concurrency limit's spec and its lease book.
 *
 *     concurrency N [lease=DURATION]
 *
 * At most N permits held at once; a permit is held from its admission
 * until it is released, or, with a lease, until its lease ends, whichever
 * comes first (docs/decisions.md 3.9).  Without a lease the state is a
 * count (limiter/concurrency.c keeps it in one atomic word).  With one, the
 * limit must know when each permit's lease ends, exactly: the book.
 *
 * The book has one entry per handle held (at most N, since a handle holds
 * at least one permit), linked in admission order.  All leases have the
 * same length and the book's clock never goes back, so admission order is
 * expiry order: the head of the list is always the next lease to end, and
 * giving back the ended ones is popping the head while its expiry <= t --
 * O(1) per lease ended, never a scan.  A release unlinks its entry in O(1)
 * and bumps the entry's generation, so a second release through a copy of
 * the handle, or a late release of an ended lease, finds another
 * generation (or a free entry) and changes nothing.
 *
 * A refusal's retry_after_ns is the time until enough leases end: walk the
 * list from the head, summing permits, until the request fits -- at most
 * n entries, and only on a refusal.
 *
 * Entry points: sluice__conc_parse, _format, sluice__is_conc_spec;
 * sluice__leases_init, _fini, _pop (under _expire), _retry_after; _grow and
 * _relet for a limit changed in place (a larger N, another lease).  The
 * calls of every decision (_expire, _take, _give) are inline in the header.
 */
#include "alg/concurrency.h"
#include "base/text.h"

#include <stdio.h>
#include <string.h>

bool sluice__is_conc_spec(const char *spec)
{
    sluice__word w;
    return spec && sluice__next_word(&spec, &w) && sluice__word_is(w.p, w.n, "concurrency");
}

int sluice__conc_parse(const char *spec, sluice__conc_profile *cp, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    memset(cp, 0, sizeof *cp);
    if (!spec) {
        sluice__errf(err, errlen, "no spec (NULL)");
        return SLUICE_EINVAL;
    }
    const char *s = spec;
    int ntok = 0;
    bool seen_lease = false;
    sluice__word w;
    for (; sluice__next_word(&s, &w); ntok++) {
        const char *tok = w.p;
        const size_t n = w.n;
        if (ntok == 0) {
            if (!sluice__word_is(tok, n, "concurrency")) {
                sluice__errf(err, errlen, "unknown algorithm \"%.*s\": expected concurrency", SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
        } else if (ntok == 1) {
            int rc = sluice_parse_u64(tok, n, SLUICE_MAX_LIMIT, &cp->limit);
            if (rc != 0 || cp->limit < 1) {
                sluice__errf(err, errlen, "bad limit \"%.*s\": expected concurrency N with N a whole number from 1 to 10^12",
                             SLUICE__TOK(tok, n));
                return rc == SLUICE_ERANGE ? SLUICE_ERANGE : SLUICE_EINVAL;
            }
        } else {
            if (!sluice__word_is(tok, w.nname, "lease")) {
                sluice__errf(err, errlen, "unknown option \"%.*s\": concurrency takes only lease=DURATION",
                             SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
            if (seen_lease) {
                sluice__errf(err, errlen, "duplicate option \"%.*s\"", SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
            seen_lease = true;
            int rc = w.val ? sluice__parse_duration(w.val, w.nval, &cp->lease_ns) : SLUICE_EINVAL;
            if (rc == SLUICE_ERANGE) {
                sluice__errf(err, errlen, "bad option \"%.*s\": a lease longer than 36500d", SLUICE__TOK(tok, n));
                return SLUICE_ERANGE;
            }
            if (rc != 0) {
                sluice__errf(err, errlen, "bad option \"%.*s\": expected lease=[N]UNIT with N >= 1 and UNIT one of ns us ms s m min h d",
                             SLUICE__TOK(tok, n));
                return SLUICE_EINVAL;
            }
        }
    }
    if (ntok == 0) {
        sluice__errf(err, errlen, "empty spec: expected concurrency N [lease=DURATION]");
        return SLUICE_EINVAL;
    }
    if (ntok == 1) {
        sluice__errf(err, errlen, "missing N after \"concurrency\"");
        return SLUICE_EINVAL;
    }
    if (cp->lease_ns && cp->limit > SLUICE__CONC_MAX_LEASED) {
        sluice__errf(err, errlen, "bad limit \"%llu\": with lease= N is at most %u (one entry per permit held)",
                     (unsigned long long)cp->limit, SLUICE__CONC_MAX_LEASED);
        return SLUICE_ERANGE;
    }
    return 0;
}

int sluice__conc_format(const sluice__conc_profile *cp, char *buf, size_t buflen)
{
    char lease[40] = "";
    if (cp->lease_ns) {
        memcpy(lease, " lease=", 8);
        sluice__format_duration(cp->lease_ns, lease + 7, sizeof lease - 7);
    }
    int n = snprintf(buf, buflen, "concurrency %llu%s", (unsigned long long)cp->limit, lease);
    if (n < 0) return SLUICE_EINVAL;
    if ((size_t)n >= buflen) return SLUICE_ENOSPC;
    return n;
}

/* ---- the lease book ------------------------------------------------------ */

int sluice__leases_init(sluice__leases *b, uint32_t n)
{
    memset(b, 0, sizeof *b);
    b->e = sluice__calloc(n, sizeof *b->e);
    b->free = sluice__calloc(n, sizeof *b->free);
    if (!b->e || !b->free) {
        sluice__leases_fini(b);
        return SLUICE_ENOMEM;
    }
    b->n = b->nfree = n;
    for (uint32_t i = 0; i < n; i++) b->free[i] = n - 1 - i; /* entry 0 first */
    b->head = b->tail = SLUICE__LEASE_NIL;
    return 0;
}

void sluice__leases_fini(sluice__leases *b)
{
    sluice__free(b->e);
    sluice__free(b->free);
    memset(b, 0, sizeof *b);
}

void sluice__leases_pop(sluice__leases *b, uint64_t t)
{
    for (uint32_t k = 0; k < b->n && b->head != SLUICE__LEASE_NIL; k++) {
        if (b->e[b->head].expiry_ns > t) break;
        sluice__leases_unlink(b, b->head);
    }
}

void sluice__leases_grow(sluice__leases *b, sluice__leases *bigger)
{
    uint32_t n = b->n, m = bigger->n;
    memcpy(bigger->e, b->e, (size_t)n * sizeof *b->e);
    /* the free stack: b's free entries, then the new ones */
    memcpy(bigger->free, b->free, (size_t)b->nfree * sizeof *b->free);
    bigger->nfree = b->nfree;
    for (uint32_t i = m; i > n; i--) bigger->free[bigger->nfree++] = i - 1;
    bigger->head = b->head;
    bigger->tail = b->tail;
    bigger->held = b->held;
    bigger->t_last = b->t_last;
    sluice__leases_fini(b);
    *b = *bigger;
    memset(bigger, 0, sizeof *bigger);
}

void sluice__leases_relet(sluice__leases *b, uint64_t old_ns, uint64_t new_ns)
{
    uint32_t i = b->head;
    for (uint32_t k = 0; k < b->n && i != SLUICE__LEASE_NIL; k++, i = b->e[i].next) {
        /* expiry = admission + old_ns, the admission below 2^63 and each
         * lease at most SLUICE_MAX_PERIOD_NS: no wrap either way */
        b->e[i].expiry_ns = b->e[i].expiry_ns - old_ns + new_ns;
    }
}

int64_t sluice__leases_retry_after(const sluice__leases *b, uint64_t t, uint64_t limit,
                                   uint64_t permits)
{
    if (permits > limit) return -1;
    if (b->held + permits <= limit) return 0;
    uint64_t need = b->held + permits - limit, freed = 0;
    uint32_t i = b->head;
    for (uint32_t k = 0; k < b->n && i != SLUICE__LEASE_NIL; k++, i = b->e[i].next) {
        freed += b->e[i].permits;
        if (freed >= need) {
            uint64_t d = b->e[i].expiry_ns - t; /* > 0: ended ones are gone */
            return d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
        }
    }
    return INT64_MAX; /* not reached: the list holds every held permit */
}
