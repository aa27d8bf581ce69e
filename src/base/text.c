/* text.c -- the decimal reader and the bounded output cursor (text.h).
 *
 * A number is plain decimal digits: no sign, no space, no exponent, no
 * leading "+" or "0x".  Every byte is checked to be a digit before the
 * value is formed, so the two errors are told apart whatever the length:
 * SLUICE_EINVAL for empty input or any other byte, SLUICE_ERANGE for
 * digits whose value passes the caller's maximum.  The value is formed
 * with the overflow test v > (max - d) / 10 before each step, so it never
 * wraps.
 *
 * Sections: the decimal reader (sluice_parse_u64); the cursor
 * (sluice__out_put, _str, _u64, _escaped, _end).
 */
#include "base/text.h"

#include <string.h>

/* ---- the decimal reader -------------------------------------------------- */

int sluice_parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (!out || !s || n == 0) return SLUICE_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return SLUICE_EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (d > max || v > (max - d) / 10) return SLUICE_ERANGE;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* ---- the cursor ---------------------------------------------------------- */

void sluice__out_put(sluice__out *o, const void *s, size_t n)
{
    if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->buf + o->len, s, n < room ? n : room);
    }
    o->len = n > SIZE_MAX - o->len ? SIZE_MAX : o->len + n;
}

void sluice__out_str(sluice__out *o, const char *s) { sluice__out_put(o, s, strlen(s)); }

void sluice__out_u64(sluice__out *o, uint64_t v)
{
    char d[20]; /* 2^64 - 1 has 20 digits */
    size_t i = sizeof d;
    do {
        d[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    sluice__out_put(o, d + i, sizeof d - i);
}

void sluice__out_escaped(sluice__out *o, const char *s)
{
    while (*s) {
        size_t run = strcspn(s, "\\\"\n");
        sluice__out_put(o, s, run);
        s += run;
        if (!*s) break;
        char e[2] = {'\\', *s == '\n' ? 'n' : *s};
        sluice__out_put(o, e, 2);
        s++;
    }
}

bool sluice__out_end(sluice__out *o)
{
    if (o->len < o->cap) {
        o->buf[o->len] = '\0';
        o->mark = o->len;
        return true;
    }
    if (o->mark < o->cap) o->buf[o->mark] = '\0';
    return false;
}
