/* fuzz.h -- what the fuzz targets in tests/fuzz/ share.
 *
 * Each target defines LLVMFuzzerTestOneInput(data, size) and checks its
 * properties with FUZZ_CHECK: a failed check prints one line naming the
 * target, the source line and the values involved, then aborts, so that
 * libFuzzer saves the input as a crash and the corpus replayer
 * (replay_main.c) exits non-zero.  Nothing here depends on libFuzzer: the
 * same files build as plain programs.
 */
#ifndef SLUICE_FUZZ_H
#define SLUICE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4), noreturn))
#endif
static inline void fuzz_fail(const char *file, int line, const char *fmt, ...);

#include <stdarg.h>

static inline void fuzz_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "FUZZ CHECK FAILED at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

/* FUZZ_CHECK(cond, "format", args...): abort with a message unless cond. */
#define FUZZ_CHECK(cond, ...)                                \
    do {                                                     \
        if (!(cond)) fuzz_fail(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

/* A byte reader over the fuzzer's input: every read succeeds, returning
 * zeros once the input is used up (so every input is a valid program). */
typedef struct fuzz_in {
    const uint8_t *p;
    size_t n;
} fuzz_in;

static inline uint8_t fuzz_u8(fuzz_in *in)
{
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

static inline uint16_t fuzz_u16(fuzz_in *in)
{
    uint16_t a = fuzz_u8(in);
    return (uint16_t)(a | (uint16_t)fuzz_u8(in) << 8);
}

static inline uint32_t fuzz_u32(fuzz_in *in)
{
    uint32_t a = fuzz_u16(in);
    return a | (uint32_t)fuzz_u16(in) << 16;
}

static inline uint64_t fuzz_u64(fuzz_in *in)
{
    uint64_t a = fuzz_u32(in);
    return a | (uint64_t)fuzz_u32(in) << 32;
}

/* The length of the string in s[0..max), or max when no NUL is there. */
static inline size_t fuzz_strnlen(const char *s, size_t max)
{
    size_t n = 0;
    while (n < max && s[n]) n++;
    return n;
}

/* Is s[0..n) free of control bytes (one printable line)? */
static inline int fuzz_one_line(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) return 0;
    }
    return 1;
}

#endif /* SLUICE_FUZZ_H */
