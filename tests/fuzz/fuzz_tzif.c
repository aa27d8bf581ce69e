/* fuzz_tzif.c -- fuzz the TZif reader (base/tzif.c): its input comes from
 * outside the process (a file under $TZDIR or /usr/share/zoneinfo).
 *
 * The input is a TZif image (up to 64 KiB).  For every input:
 *  - sluice__tz_parse accepts it or refuses it with a one-line message
 *    (never reading past the image: the replayer and libFuzzer hand over a
 *    buffer of exactly its size, so ASan sees any overrun);
 *  - on an accepted zone, at instants spread over the int64 range in use
 *    (0 .. 2^33 s, and some taken from the input): the offset lies within
 *    RFC 8536's bounds (-89999 .. 93599 s), the next change is after the
 *    instant, the first instant reaching a local time lies within 26 hours
 *    of it and does reach it (or ends a gap), and the calendar window of
 *    every unit holds the instant (start <= t < end).
 */
#include <string.h>

#include "alg/alg.h"
#include "base/tzif.h"
#include "alg/calendar.h"

#include "fuzz.h"

#define NS 1000000000ULL

static void windows(const sluice__tz *z, uint64_t t)
{
    for (int unit = SLUICE__CAL_DAY; unit <= SLUICE__CAL_YEAR; unit++) {
        sluice__profile pf;
        memset(&pf, 0, sizeof pf);
        pf.tz = z;
        pf.cal_unit = (uint8_t)unit;
        pf.cal_n = unit == SLUICE__CAL_MONTH ? (uint8_t)(1 + t % 3) : 1;
        pf.anchor = (uint8_t)(1 + t % 31);
        uint64_t s, e;
        sluice__cal_window(&pf, t, &s, &e);
        FUZZ_CHECK(s <= t && t < e, "unit %d: window [%llu, %llu) misses %llu", unit,
                   (unsigned long long)s, (unsigned long long)e, (unsigned long long)t);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536) return 0;
    char err[256];
    memset(err, 'X', sizeof err);
    sluice__tz *z = sluice__tz_parse(data, size, err, sizeof err);
    if (!z) {
        const size_t n = fuzz_strnlen(err, sizeof err);
        FUZZ_CHECK(n > 0 && n < sizeof err, "refusal without a message");
        FUZZ_CHECK(fuzz_one_line(err, n), "message not one line: %s", err);
        return 0;
    }
    fuzz_in in = {data + (size > 64 ? size - 64 : 0), size > 64 ? 64 : size};
    for (int i = 0; i < 24; i++) {
        int64_t u = i < 16 ? (int64_t)i * ((int64_t)1 << 29) : (int64_t)(fuzz_u64(&in) % (1ULL << 33));
        const int32_t o = sluice__tz_offset(z, u);
        FUZZ_CHECK(o >= -89999 && o <= 93599, "offset %d at %lld", o, (long long)u);
        const int64_t nx = sluice__tz_next_change(z, u);
        FUZZ_CHECK(nx > u, "next change %lld not after %lld", (long long)nx, (long long)u);
        const int64_t r = sluice__tz_first_reach(z, u);
        FUZZ_CHECK(r >= u - 93600 && r <= u + 93600, "first reach of %lld at %lld", (long long)u,
                   (long long)r);
        FUZZ_CHECK(r + sluice__tz_offset(z, r) >= u, "first reach of %lld at %lld falls short",
                   (long long)u, (long long)r);
        windows(z, (uint64_t)u * NS + (uint64_t)i);
    }
    windows(z, (1ULL << 63) - 1);
    sluice__tz_free(z);
    return 0;
}
