/* test_text.c -- text in and out (src/base/text.c): the decimal reader
 * sluice_parse_u64() through the public API, and the bounded output cursor
 * (base/text.h) that metrics.c and http.c write through.
 *
 *  - the reader: a table of inputs written out by hand (empty, signs,
 *    spaces, exponents, hex, leading zeros, 2^64 - 1 and 2^64, a hundred
 *    digits), the bound exactly (max, max + 1, max = 0 .. 9), NULL
 *    arguments, *out left alone on every error; then random digit strings
 *    and bounds against a reference that reads the digits into a 128-bit
 *    value and stops at 21 digits (written differently: no overflow test);
 *  - the cursor: one output of items (strings, decimals, escaped text)
 *    written with a buffer of every size from 0 to past its length, against
 *    the reference cut (the longest run of whole items that fits with its
 *    NUL, taken from the output written whole); the needed length is always
 *    the whole one; nothing is written past the buffer (a canary); an append
 *    at an offset keeps the bytes before it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/text.h"
#include "sluice.h"
#include "testutil.h"

/* ---- the reader ---------------------------------------------------------- */

typedef struct want {
    const char *s;
    uint64_t max;
    int rc;
    uint64_t v;
} want;

static void test_parse_table(void **state)
{
    (void)state;
    static const want w[] = {
        {"0", UINT64_MAX, 0, 0},
        {"7", UINT64_MAX, 0, 7},
        {"00000000000000000000000000042", UINT64_MAX, 0, 42},
        {"18446744073709551615", UINT64_MAX, 0, UINT64_MAX},
        {"18446744073709551616", UINT64_MAX, SLUICE_ERANGE, 0},
        {"99999999999999999999", UINT64_MAX, SLUICE_ERANGE, 0},
        {"9223372036854775807", (uint64_t)INT64_MAX, 0, (uint64_t)INT64_MAX},
        {"9223372036854775808", (uint64_t)INT64_MAX, SLUICE_ERANGE, 0},
        {"1000000000000", 1000000000000ULL, 0, 1000000000000ULL},
        {"1000000000001", 1000000000000ULL, SLUICE_ERANGE, 0},
        {"0", 0, 0, 0},
        {"1", 0, SLUICE_ERANGE, 0},
        {"10", 9, SLUICE_ERANGE, 0},
        {"", UINT64_MAX, SLUICE_EINVAL, 0},
        {"+1", UINT64_MAX, SLUICE_EINVAL, 0},
        {"-1", UINT64_MAX, SLUICE_EINVAL, 0},
        {" 1", UINT64_MAX, SLUICE_EINVAL, 0},
        {"1 ", UINT64_MAX, SLUICE_EINVAL, 0},
        {"1e3", UINT64_MAX, SLUICE_EINVAL, 0},
        {"0x10", UINT64_MAX, SLUICE_EINVAL, 0},
        {"1.5", UINT64_MAX, SLUICE_EINVAL, 0},
        {"12a", UINT64_MAX, SLUICE_EINVAL, 0},
        /* a malformed number is EINVAL however long its digits run */
        {"99999999999999999999999999x", UINT64_MAX, SLUICE_EINVAL, 0},
        {"x99999999999999999999999999", 5, SLUICE_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        uint64_t v = 12345;
        int rc = sluice_parse_u64(w[i].s, strlen(w[i].s), w[i].max, &v);
        if (rc != w[i].rc) fail_msg("\"%s\" max %llu: rc %d, want %d", w[i].s,
                                    (unsigned long long)w[i].max, rc, w[i].rc);
        assert_int_equal(v, rc == 0 ? w[i].v : 12345); /* untouched on error */
    }
    /* each bound 0 .. 9: its own digit passes, the next refused */
    for (uint64_t max = 0; max <= 9; max++)
        for (char d = '0'; d <= '9'; d++) {
            uint64_t v;
            int rc = sluice_parse_u64(&d, 1, max, &v);
            assert_int_equal(rc, (uint64_t)(d - '0') <= max ? 0 : SLUICE_ERANGE);
        }
    /* a hundred digits, and the bytes after n are not read */
    char big[101];
    memset(big, '9', 100);
    big[100] = 'x';
    uint64_t v = 1;
    assert_int_equal(sluice_parse_u64(big, 100, UINT64_MAX, &v), SLUICE_ERANGE);
    assert_int_equal(sluice_parse_u64(big, 3, UINT64_MAX, &v), 0);
    assert_int_equal(v, 999);
    /* NULL arguments */
    assert_int_equal(sluice_parse_u64(NULL, 1, UINT64_MAX, &v), SLUICE_EINVAL);
    assert_int_equal(sluice_parse_u64(NULL, 0, UINT64_MAX, &v), SLUICE_EINVAL);
    assert_int_equal(sluice_parse_u64("1", 1, UINT64_MAX, NULL), SLUICE_EINVAL);
}

/* The reference: digits into a 128-bit value, at most 21 of them kept
 * (more than 20 significant digits are above 2^64 anyway). */
static int ref_parse(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    if (n == 0) return SLUICE_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return SLUICE_EINVAL;
    size_t i = 0;
    while (i + 1 < n && s[i] == '0') i++; /* leading zeros */
    if (n - i > 21) return SLUICE_ERANGE;
    unsigned __int128 v = 0;
    for (; i < n; i++) v = v * 10 + (unsigned)(s[i] - '0');
    if (v > max) return SLUICE_ERANGE;
    *out = (uint64_t)v;
    return 0;
}

static void test_parse_random(void **state)
{
    (void)state;
    uint64_t rng = tu_env_seed();
    char s[40];
    for (int it = 0; it < 200000; it++) {
        size_t n = (size_t)tu_splitmix64_below(&rng, 26);
        for (size_t i = 0; i < n; i++) s[i] = (char)('0' + tu_splitmix64_below(&rng, 10));
        if (n && tu_splitmix64_below(&rng, 8) == 0) /* one byte that is not a digit */
            s[tu_splitmix64_below(&rng, n)] = "+- x./:\0"[tu_splitmix64_below(&rng, 8)];
        uint64_t max;
        switch (tu_splitmix64_below(&rng, 4)) {
        case 0: max = UINT64_MAX; break;
        case 1: max = tu_splitmix64(&rng); break;
        case 2: max = tu_splitmix64(&rng) >> tu_splitmix64_below(&rng, 64); break;
        default: { /* exactly the value read, or one less */
            uint64_t r = 0;
            max = ref_parse(s, n, UINT64_MAX, &r) == 0 ? r - (r && (rng & 1)) : 0;
        }
        }
        uint64_t a = 1, b = 1;
        int ra = sluice_parse_u64(s, n, max, &a), rb = ref_parse(s, n, max, &b);
        if (ra != rb || a != b)
            fail_msg("\"%.*s\" max %llu: rc %d value %llu, reference rc %d value %llu", (int)n, s,
                     (unsigned long long)max, ra, (unsigned long long)a, rb,
                     (unsigned long long)b);
    }
}

/* ---- the cursor ---------------------------------------------------------- */

/* One output of six items (a bare item, decimals at the edges, escapes);
 * the item ends into ends[] (at most 8), the count returned. */
static size_t write_items(sluice__out *o, size_t *ends)
{
    size_t k = 0;
    sluice__out_str(o, "# HELP x\n");
    sluice__out_end(o);
    ends[k++] = o->len;
    sluice__out_put(o, "a{l=\"", 5);
    sluice__out_escaped(o, "q\"b\\s\nz");
    sluice__out_str(o, "\"} ");
    sluice__out_u64(o, 0);
    sluice__out_put(o, "\n", 1);
    sluice__out_end(o);
    ends[k++] = o->len;
    sluice__out_u64(o, UINT64_MAX);
    sluice__out_put(o, "\n", 1);
    sluice__out_end(o);
    ends[k++] = o->len;
    sluice__out_escaped(o, "");
    sluice__out_end(o); /* an empty item */
    ends[k++] = o->len;
    sluice__out_escaped(o, "\\\\\n\"");
    sluice__out_u64(o, 1000000007);
    sluice__out_end(o);
    ends[k++] = o->len;
    sluice__out_str(o, "end");
    sluice__out_end(o);
    ends[k++] = o->len;
    return k;
}

static void test_cursor_cuts(void **state)
{
    (void)state;
    static const char whole[] = "# HELP x\n"
                                "a{l=\"q\\\"b\\\\s\\nz\"} 0\n"
                                "18446744073709551615\n"
                                "\\\\\\\\\\n\\\"1000000007"
                                "end";
    const size_t total = sizeof whole - 1;
    char buf[128];
    size_t ends[8];
    for (size_t cap = 0; cap <= total + 3; cap++) {
        memset(buf, 'Z', sizeof buf);
        sluice__out o;
        sluice__out_init(&o, cap ? buf : NULL, cap, 0);
        size_t k = write_items(&o, ends);
        assert_int_equal(o.len, total);
        assert_int_equal(sluice__out_fits(&o), total < cap);
        size_t cut = 0; /* the reference: whole items that fit with their NUL */
        for (size_t i = 0; i < k && ends[i] < cap; i++) cut = ends[i];
        if (cap > 0) {
            assert_memory_equal(buf, whole, cut);
            assert_int_equal(buf[cut], '\0');
        }
        for (size_t i = cap; i < sizeof buf; i++) assert_int_equal(buf[i], 'Z');
    }
}

static void test_cursor_append(void **state)
{
    (void)state;
    char buf[16];
    memset(buf, 'Z', sizeof buf);
    memcpy(buf, "abc", 4);
    sluice__out o;
    sluice__out_init(&o, buf, 8, 3);
    sluice__out_str(&o, ", 12");
    assert_true(sluice__out_end(&o));
    assert_string_equal(buf, "abc, 12");
    sluice__out_str(&o, "3");
    assert_false(sluice__out_end(&o)); /* "abc, 123" needs 9 bytes */
    assert_string_equal(buf, "abc, 12");
    assert_int_equal(o.len, 8);
    assert_int_equal(buf[8], 'Z');
    /* an append that does not fit from the start keeps what was there */
    memcpy(buf, "abc", 4);
    sluice__out_init(&o, buf, 5, 3);
    sluice__out_str(&o, "defg");
    assert_false(sluice__out_end(&o));
    assert_string_equal(buf, "abc");
    /* the length saturates */
    sluice__out_init(&o, NULL, 0, SIZE_MAX - 2);
    sluice__out_str(&o, "abcd");
    assert_int_equal(o.len, SIZE_MAX);
    assert_false(sluice__out_end(&o));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_table),
        cmocka_unit_test(test_parse_random),
        cmocka_unit_test(test_cursor_cuts),
        cmocka_unit_test(test_cursor_append),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
