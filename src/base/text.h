/* text.h -- text in and out: the one decimal reader (sluice_parse_u64,
 * declared in sluice.h: the spec grammar, the rule files and the CLI's
 * traces all read numbers with it) and the one bounded output cursor (the
 * Prometheus exposition in metrics.c and the RateLimit fields in http.c).
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
