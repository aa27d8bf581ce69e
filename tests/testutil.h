/* testutil.h -- the helpers the tests share: the resident set, a counting
 * and failing allocator for the library's hook, seeded random numbers, the
 * stress tests' environment (scale, seed), a sleep, errors from worker
 * threads, and whether a sanitizer is on.
 *
 * Built once as the static library sluice_testutil (tests/CMakeLists.txt)
 * and linked into every test that needs it.  Starting a private
 * redis-server is tests/redis/redis_server.h's job, not this file's.
 * Nothing here uses cmocka: a helper that finds a broken invariant prints
 * one line on stderr and aborts.
 */
#ifndef SLUICE_TESTUTIL_H
#define SLUICE_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* Sanitizers                                                                */

/* TU_SANITIZED is 1 under AddressSanitizer or ThreadSanitizer (shadow
 * memory and quarantines distort resident-memory figures, so tests assert
 * them only when it is 0); TU_UNDER_TSAN is 1 under ThreadSanitizer alone
 * (whose mutexes are slow, so some tests run shorter). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TU_SANITIZED 1
#endif
#endif
#ifndef TU_SANITIZED
#define TU_SANITIZED 0
#endif

#if defined(__SANITIZE_THREAD__)
#define TU_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TU_UNDER_TSAN 1
#endif
#endif
#ifndef TU_UNDER_TSAN
#define TU_UNDER_TSAN 0
#endif

/* ------------------------------------------------------------------------ */
/* Memory and time                                                           */

/* The process's resident set now, in bytes, from /proc/self/statm (pages
 * times the page size); 0 when it cannot be read.  Thread-safe. */
size_t tu_rss_bytes(void);

/* Sleep `ns` nanoseconds on the real clock (nanosleep; an interrupted sleep
 * ends early).  Only for the tests that run real threads or a real server:
 * the others inject time through the `_at` functions.  Thread-safe. */
void tu_sleep_ns(uint64_t ns);

/* ------------------------------------------------------------------------ */
/* The stress tests' environment                                             */

/* SLUICE_STRESS_SCALE, the factor on a stress test's keys and phases: its
 * value when it is a number in (0, 1e6), else `deflt` (unset, empty, or
 * not such a number).  Call it from the main thread, before any other. */
double tu_env_scale(double deflt);

/* round(base * scale), at least 1: a repetition count under
 * SLUICE_STRESS_SCALE. */
size_t tu_scaled(double base, double scale);

/* SLUICE_TEST_SEED, a random seed (decimal, or 0x... hex, as strtoull
 * reads it), or the monotonic clock's nanoseconds when it is unset or
 * empty: print the seed, so a failing run can be repeated.  Call it from
 * the main thread, before any other. */
uint64_t tu_env_seed(void);

/* ------------------------------------------------------------------------ */
/* Seeded random numbers (deterministic: the same seed, the same sequence)  */

/* Marsaglia's xorshift64 (13, 7, 17): advances *state and returns the new
 * state.  *state must not be 0 (it would stay 0).  Thread-safe on distinct
 * states. */
uint64_t tu_xorshift64(uint64_t *state);

/* splitmix64: adds the golden-ratio increment to *state and returns its
 * mixed value; any *state, 0 included, is fine.  Thread-safe on distinct
 * states. */
uint64_t tu_splitmix64(uint64_t *state);

/* tu_splitmix64(state) % n, or 0 when n is 0 (and then the state does not
 * move).  The modulo's bias is below n / 2^64. */
uint64_t tu_splitmix64_below(uint64_t *state, uint64_t n);

/* ------------------------------------------------------------------------ */
/* Errors seen by worker threads                                             */

/* cmocka's checks may be used from the main thread only: a worker records
 * what went wrong in a tu_errs of its own (zero-initialised), and the main
 * thread fails the test when `n` is not 0 after joining it. */
typedef struct tu_errs {
    unsigned n;    /* bad results seen */
    char msg[320]; /* the first one, formatted (truncated to fit) */
} tu_errs;

/* Count one bad result; the first is kept in e->msg, printf-formatted.
 * Thread-safe on distinct `e`. */
void tu_errs_add(tu_errs *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------ */
/* The test allocator                                                        */

/* An allocator for sluice_set_allocator() that counts, and fails on
 * request:
 *  - calls: malloc_fn and calloc_fn calls since the last tu_alloc_arm()
 *    (or tu_alloc_install());
 *  - failures: those of them made to fail;
 *  - live, live_bytes: blocks (and the bytes asked for in them) handed out
 *    and not yet freed;
 *  - bytes: all the bytes asked for since tu_alloc_install().
 * Every block carries a header with a magic number: freeing a block this
 * allocator did not hand out (libc's, or one already freed) prints a line
 * and aborts.  calloc_fn asks libc's calloc for header and block together,
 * so a large block's pages stay untouched but the header's.  free_fn
 * accepts NULL.
 *
 * The counters are atomic: threads may allocate and free at once, and a
 * test may read the counters while they do.  Arming is not meant to race
 * with allocations: arm between them. */

/* The three functions, for a test that checks what is installed. */
void *tu_malloc(size_t size);
void *tu_calloc(size_t count, size_t size);
void tu_free(void *ptr);

/* Install the test allocator with every counter at zero and nothing armed,
 * first saving the allocator installed now (unless it is this one) for
 * tu_alloc_uninstall().  Returns sluice_set_allocator()'s answer: 0, or a
 * negative SLUICE_E... code with nothing changed.  Not thread-safe (as
 * sluice_set_allocator): call it while no sluice object exists. */
int tu_alloc_install(void);

/* Disarm, and reinstall the allocator that tu_alloc_install() found (libc's
 * if it was never called).  Returns sluice_set_allocator()'s answer.  The
 * counters keep their values.  Not thread-safe; every block made through
 * the test allocator must have been freed. */
int tu_alloc_uninstall(void);

/* Zero `calls` and `failures`, then fail the allocation call number `n`
 * from now on (0: the next one), and when `persistent` every later call
 * too; n < 0 fails nothing. */
void tu_alloc_arm(long n, bool persistent);

/* Fail nothing from now on; the counters keep their values. */
void tu_alloc_disarm(void);

long tu_alloc_calls(void);
long tu_alloc_failures(void);
long tu_alloc_live(void);
size_t tu_alloc_live_bytes(void);
size_t tu_alloc_bytes(void);

/* ------------------------------------------------------------------------ */
/* Prometheus tools                                                          */

/* Check an exposition with the tools operators use: `promtool check
 * metrics` must accept it with no complaint (exit status 0, nothing
 * printed), and python3-prometheus-client's parser must read it back with
 * the same samples, in order: each sample line's metric name and value
 * (compared as doubles) as the parser reports them.  Returns 0 when both
 * pass, 1 with a one-line reason in msg when one fails, 2 when promtool or
 * the Python client is missing (msg says which: the caller says so and
 * goes on).  Runs the tools as child processes on a temporary file. */
int tu_check_exposition(const char *text, char *msg, size_t msglen);

#endif
