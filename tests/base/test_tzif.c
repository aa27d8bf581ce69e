/* test_tzif.c -- the TZif reader (base/tzif.c): RFC 8536 files, their
 * footer rules, and damaged files.
 *
 *  - footer rules (POSIX TZ, with RFC 8536's extensions): Mm.w.d, Jn, n,
 *    a negative and a 25-hour rule time, <+0330>-style names, DST all
 *    year, a fixed offset: the offset one second before and at each change,
 *    computed here by hand from the calendar;
 *  - damaged images: every truncation of a real zone file (Europe/Paris)
 *    is refused or, past the data, read without harm; version 1, leap
 *    seconds, zero types, counts past the end, an index past the types,
 *    transitions out of order, offsets out of range, bad footers: each
 *    refused with its own one-line message;
 *  - sluice__tz_load: an unknown zone and a malformed name are refused with
 *    the name; a damaged file under $TZDIR too; the same zone twice is one
 *    object;
 *  - the civil calendar against a day-by-day count from 1970.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/tzif.h"

/* A version-2 TZif image: an empty version-1 block, then `nt` transitions
 * (times t, type indices idx), `nty` types (offsets off, isdst dst), and
 * the footer. Returns its length. */
static size_t image(unsigned char *b, int nt, const int64_t *t, const unsigned char *idx, int nty,
                    const int32_t *off, const unsigned char *dst, const char *footer)
{
    size_t n = 0;
    memset(b, 0, 44);
    memcpy(b, "TZif2", 5);
    n = 44;
    memcpy(b + n, "TZif2", 5);
    memset(b + n + 5, 0, 39);
    const uint32_t c[6] = {0, 0, 0, (uint32_t)nt, (uint32_t)nty, 4};
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 4; k++) b[n + 20 + 4 * i + k] = (unsigned char)(c[i] >> (24 - 8 * k));
    n += 44;
    for (int i = 0; i < nt; i++, n += 8)
        for (int k = 0; k < 8; k++) b[n + k] = (unsigned char)((uint64_t)t[i] >> (56 - 8 * k));
    for (int i = 0; i < nt; i++) b[n++] = idx[i];
    for (int i = 0; i < nty; i++, n += 6) {
        for (int k = 0; k < 4; k++) b[n + k] = (unsigned char)((uint32_t)off[i] >> (24 - 8 * k));
        b[n + 4] = dst[i];
        b[n + 5] = 0;
    }
    memcpy(b + n, "ABC", 4);
    n += 4;
    n += (size_t)sprintf((char *)b + n, "\n%s\n", footer);
    return n;
}

static sluice__tz *footer_zone(const char *footer)
{
    unsigned char b[512];
    const int32_t off[1] = {0};
    const unsigned char dst[1] = {0};
    char err[200];
    sluice__tz *z = sluice__tz_parse(b, image(b, 0, NULL, NULL, 1, off, dst, footer), err, sizeof err);
    if (!z) fail_msg("footer \"%s\": %s", footer, err);
    return z;
}

/* The offset is `before` one second before u and `after` at u. */
static void change(const sluice__tz *z, int64_t u, int32_t before, int32_t after)
{
    if (sluice__tz_offset(z, u - 1) != before || sluice__tz_offset(z, u) != after)
        fail_msg("at %lld: %d then %d, expected %d then %d", (long long)u,
                 sluice__tz_offset(z, u - 1), sluice__tz_offset(z, u), before, after);
    assert_true(sluice__tz_next_change(z, u - 1) == u);
}

#define DAYS(y, m, d) (sluice__days_from_civil(y, m, d) * 86400)

static void test_footer_rules(void **state)
{
    (void)state;
    /* New York 2024: 10 March 02:00 EST = 07:00 UTC; 3 November 02:00 EDT
     * = 06:00 UTC (second Sunday of March, first of November) */
    sluice__tz *z = footer_zone("EST5EDT,M3.2.0,M11.1.0");
    change(z, DAYS(2024, 3, 10) + 7 * 3600, -18000, -14400);
    change(z, DAYS(2024, 11, 3) + 6 * 3600, -14400, -18000);
    change(z, DAYS(2261, 3, 10) + 7 * 3600, -18000, -14400); /* 10 March 2261: its second Sunday */
    sluice__tz_free(z);
    /* Tehran's old rule: J79/24 is 20 March 24:00 (+03:30) = 20:30 UTC */
    z = footer_zone("<+0330>-3:30<+0430>,J79/24,J263/24");
    change(z, DAYS(2021, 3, 20) + 20 * 3600 + 1800, 12600, 16200);
    change(z, DAYS(2024, 3, 20) + 20 * 3600 + 1800, 12600, 16200); /* J skips 29 Feb */
    sluice__tz_free(z);
    /* zero-based days count 29 February: day 59 is 29 February in 2024,
     * 1 March in 2023 */
    z = footer_zone("AAA-1BBB,59/0,300/0");
    change(z, DAYS(2024, 2, 29) - 3600, 3600, 7200);
    change(z, DAYS(2023, 3, 1) - 3600, 3600, 7200);
    sluice__tz_free(z);
    /* Nuuk: last Sunday of March at -2:00 local (-03) = 31 March 2024
     * 01:00 UTC; last Sunday of October at -1:00 (-02) = 27 October 01:00 UTC */
    z = footer_zone("<-03>3<-02>,M3.5.0/-2,M10.5.0/-1");
    change(z, DAYS(2024, 3, 31) + 3600, -10800, -7200);
    change(z, DAYS(2024, 10, 27) + 3600, -7200, -10800);
    sluice__tz_free(z);
    /* daylight time all year */
    z = footer_zone("EST5EDT,0/0,J365/25");
    for (int64_t u = DAYS(2020, 1, 1); u < DAYS(2021, 1, 2); u += 3 * 3600)
        assert_int_equal(sluice__tz_offset(z, u), -14400);
    sluice__tz_free(z);
    /* a fixed offset: no change ever */
    z = footer_zone("<+13>-13");
    assert_int_equal(sluice__tz_offset(z, 0), 46800);
    assert_true(sluice__tz_next_change(z, 0) == INT64_MAX);
    sluice__tz_free(z);
}

static void refused(const unsigned char *b, size_t n, const char *want)
{
    char err[200] = "";
    sluice__tz *z = sluice__tz_parse(b, n, err, sizeof err);
    if (z) fail_msg("accepted, expected \"%s\"", want);
    if (!strstr(err, want)) fail_msg("message \"%s\" lacks \"%s\"", err, want);
    assert_null(strchr(err, '\n'));
}

static void test_damaged(void **state)
{
    (void)state;
    unsigned char b[1024];
    const int64_t t[3] = {100, 200, 300};
    const unsigned char idx[3] = {1, 0, 1}, dst[2] = {0, 1};
    const int32_t off[2] = {3600, 7200};
    size_t n = image(b, 3, t, idx, 2, off, dst, "CET-1CEST,M3.5.0,M10.5.0/3");
    char err[200];
    sluice__tz *z = sluice__tz_parse(b, n, err, sizeof err);
    assert_non_null(z);
    assert_int_equal(sluice__tz_offset(z, 99), 3600);
    assert_int_equal(sluice__tz_offset(z, 100), 7200);
    assert_int_equal(sluice__tz_offset(z, 250), 3600);
    sluice__tz_free(z);
    /* every truncation that cuts the data */
    const size_t data_end = n - strlen("\nCET-1CEST,M3.5.0,M10.5.0/3\n");
    for (size_t k = 0; k < data_end; k++) refused(b, k, k < 44 ? "not a TZif" : "TZif");
    for (size_t k = data_end + 1; k < n; k++) refused(b, k, "footer");
    unsigned char c[1024];
    memcpy(c, b, n), c[4] = 0, refused(c, n, "version 1");
    memcpy(c, b, n), c[44 + 4] = '1', refused(c, n, "version-2 header");
    memcpy(c, b, n), c[44 + 28 + 3] = 1, refused(c, n, "leap seconds");
    memcpy(c, b, n), c[44 + 36 + 3] = 0, refused(c, n, "bad counts");
    memcpy(c, b, n), memset(c + 44 + 32, 0xff, 4), refused(c, n, "truncated");
    memcpy(c, b, n), memset(c + 20, 0x7f, 24), refused(c, n, "truncated"); /* v1 counts */
    memcpy(c, b, n), c[88 + 24 + 1] = 2, refused(c, n, "type index");
    memcpy(c, b, n), c[88 + 8 + 6] = 1, refused(c, n, "out of order");
    memcpy(c, b, n), c[88 + 27] = 0x7f, refused(c, n, "local time type"); /* offset 2^31-ish */
    memcpy(c, b, n), c[88 + 27 + 4] = 3, refused(c, n, "local time type"); /* isdst 3 */
    static const char *const bad_footers[] = {"CET-1CEST", "CET-1CEST,M3.5.0,M13.5.0/3", "X5",
                                              "CET-1CEST,M3.5.0,M10.5.0/168", "<+03-3",
                                              "CET-25", "CET-1CEST,J0,J365", "CET-1 junk"};
    for (size_t i = 0; i < sizeof bad_footers / sizeof bad_footers[0]; i++)
        refused(b, image(b, 3, t, idx, 2, off, dst, bad_footers[i]), "footer");
    /* 60 transitions an hour apart: more than a two-day span may hold */
    int64_t many[60];
    unsigned char mi[60];
    for (int i = 0; i < 60; i++) many[i] = 3600 * i, mi[i] = (unsigned char)(i & 1);
    refused(b, image(b, 60, many, mi, 2, off, dst, ""), "too many");
}

static void test_load(void **state)
{
    (void)state;
    char err[200];
    assert_null(sluice__tz_load("Nowhere/Atlantis", 16, err, sizeof err));
    assert_non_null(strstr(err, "Nowhere/Atlantis"));
    assert_null(sluice__tz_load("../../etc/passwd", 16, err, sizeof err));
    assert_non_null(strstr(err, "../../etc/passwd"));
    const sluice__tz *a = sluice__tz_load("Europe/Paris", 12, err, sizeof err);
    assert_non_null(a);
    assert_ptr_equal(a, sluice__tz_load("Europe/Paris", 12, err, sizeof err));
    assert_string_equal(sluice__tz_name(a), "Europe/Paris");
    /* a damaged file under $TZDIR */
    char dir[] = "/tmp/sluice-tz.XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/Broken", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("TZif2 but short", f);
    fclose(f);
    const char *old = getenv("TZDIR");
    setenv("TZDIR", dir, 1);
    assert_null(sluice__tz_load("Broken", 6, err, sizeof err));
    assert_non_null(strstr(err, "Broken"));
    if (old) setenv("TZDIR", old, 1);
    else unsetenv("TZDIR");
    unlink(path);
    rmdir(dir);
}

static void test_civil(void **state)
{
    (void)state;
    static const unsigned md[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int64_t days = 0;
    for (int64_t y = 1970; y < 2400; y++)
        for (unsigned m = 1; m <= 12; m++) {
            const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            for (unsigned d = 1; d <= md[m - 1] + (m == 2 && leap); d++, days++) {
                assert_true(sluice__days_from_civil(y, m, d) == days);
                int64_t yy;
                unsigned mm, dd;
                sluice__civil_from_days(days, &yy, &mm, &dd);
                assert_true(yy == y && mm == m && dd == d);
            }
        }
    assert_true(sluice__days_from_civil(1969, 12, 31) == -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_footer_rules),
        cmocka_unit_test(test_damaged),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_civil),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
