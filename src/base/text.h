/* text.h -- text in and out: the one decimal reader (sluice_parse_u64,
 * declared in sluice.h: the spec grammar, the rule files and the CLI's
 * traces all read numbers with it), the one reader of a spec's words (the
 * rate specs in alg/spec.c and the concurrency spec in alg/concurrency.c)
 * and the one bounded output cursor (the Prometheus exposition in
 * metrics.c and the RateLimit fields in http.c).
 *
 * The cursor writes into a caller's buffer of `cap` bytes.  It counts every
 * byte asked for (saturating at SIZE_MAX: the length the whole output
 * needs) and stores those that fit.  An output is a sequence of items
 * (a line, a field value); sluice__out_end() closes one: when the item
 * fits with room for its NUL, the NUL goes after it and it becomes the
 * mark, else the buffer is cut back to the mark, the end of the last item
 * that fitted whole.  So a short buffer never ends in half an item, and
 * overflow is remembered: once an item did not fit, none after it does.
 *
 * Entry points: sluice__out_init, _put, _str, _u64, _escaped, _end,
 * sluice__out_fits.  Not thread-safe: one cursor per writer.
 */
#ifndef SLUICE_TEXT_H
#define SLUICE_TEXT_H

#include "base/internal.h"

#include <string.h>

/* ---- a spec's words ------------------------------------------------------ */

/* A word of a spec: the bytes between spaces and tabs.  Its name is the
 * part before its first '=' (all of it when it has none), its value the
 * part after (val NULL when it has no '='). */
typedef struct sluice__word {
    const char *p;   /* the word */
    size_t n;        /* its bytes */
    size_t nname;    /* the bytes of its name */
    const char *val; /* its value, after the '=', or NULL */
    size_t nval;     /* the bytes of its value (0 without '=') */
} sluice__word;

/* The next word at *s, and *s moved past it; false, *w unset, when only
 * spaces and tabs are left. */
static inline bool sluice__next_word(const char **s, sluice__word *w)
{
    const char *q = *s;
    while (*q == ' ' || *q == '\t') q++;
    const char *b = q;
    while (*q && *q != ' ' && *q != '\t') q++;
    *s = q;
    if (q == b) return false;
    const char *eq = memchr(b, '=', (size_t)(q - b));
    w->p = b;
    w->n = (size_t)(q - b);
    w->nname = eq ? (size_t)(eq - b) : w->n;
    w->val = eq ? eq + 1 : NULL;
    w->nval = eq ? w->n - w->nname - 1 : 0;
    return true;
}

/* Whether the n bytes at s are the string lit. */
static inline bool sluice__word_is(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* A word in a message, for "%.*s": at most 48 bytes of it, so that the
 * message stays one short line. */
#define SLUICE__TOK(s, n) (int)((n) > 48 ? 48 : (n)), (s)

typedef struct sluice__out {
    char *buf;   /* the caller's buffer (NULL when cap is 0) */
    size_t cap;  /* bytes of buf */
    size_t len;  /* bytes asked for so far, saturating at SIZE_MAX */
    size_t mark; /* end of the last whole item stored with room for its NUL */
} sluice__out;

/* A cursor over buf[0, cap) whose output starts at offset `at` (bytes
 * before it are the caller's and kept; at is also the first mark). */
static inline void sluice__out_init(sluice__out *o, char *buf, size_t cap, size_t at)
{
    o->buf = buf;
    o->cap = cap;
    o->len = at;
    o->mark = at;
}

/* Append the n bytes at s. */
SLUICE__INTERNAL void sluice__out_put(sluice__out *o, const void *s, size_t n);
/* Append the NUL-terminated s. */
SLUICE__INTERNAL void sluice__out_str(sluice__out *o, const char *s);
/* Append v in decimal. */
SLUICE__INTERNAL void sluice__out_u64(sluice__out *o, uint64_t v);
/* Append the NUL-terminated s with backslash and double quote escaped by
 * a backslash and newline written as \n (Prometheus label values; an
 * sf-string's printable ASCII). */
SLUICE__INTERNAL void sluice__out_escaped(sluice__out *o, const char *s);
/* Close an item: NUL after it and true when it fits whole with its NUL;
 * else the buffer cut back to the mark (when the mark is inside it) and
 * false. */
SLUICE__INTERNAL bool sluice__out_end(sluice__out *o);

/* Whether everything asked for so far fits with its NUL. */
static inline bool sluice__out_fits(const sluice__out *o) { return o->len < o->cap; }

#endif /* SLUICE_TEXT_H */
