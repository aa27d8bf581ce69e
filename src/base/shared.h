/* shared.h -- the core's internals that libsluice-redis calls too.
 *
 * libsluice-redis (src/redis/) is a second library built from this tree.
 * It needs a few things the public API does not offer: the allocator hook's
 * functions (so its memory goes through sluice_set_allocator() like the
 * core's, aligned blocks included), the keyed hash and the seed source (so
 * its key tables resist hash flooding as the core's do).  They are declared
 * here, once, with default visibility: exported from libsluice.so as well
 * as from libsluice.a, so libsluice-redis links against either and there is
 * one allocator, whichever way the two libraries are linked.
 *
 * These are not API: no header under include/ declares them, and they may
 * change in any release.  libsluice-redis must come from the same build as
 * libsluice.  Everything else internal stays hidden (internal.h).
 *
 * Entry points: the allocator (sluice__malloc, _calloc, _free), the seed
 * (sluice__random_seed) and SipHash (sluice__siphash13, sluice__key_digest).
 */
#ifndef SLUICE_SHARED_H
#define SLUICE_SHARED_H

#include <stddef.h>
#include <stdint.h>

#define SLUICE__SHARED __attribute__((visibility("default")))

/* Allocation through the installed hook (alloc.c).  sluice__malloc(0) and
 * sluice__calloc with a zero count or size return a 1-byte block; calloc
 * returns NULL when count * size overflows.  sluice__calloc64: n zeroed
 * bytes aligned to 64 (a cache line), freed only by sluice__free64. */
SLUICE__SHARED void *sluice__malloc(size_t n);
SLUICE__SHARED void *sluice__calloc(size_t n, size_t size);
SLUICE__SHARED void sluice__free(void *p);
SLUICE__SHARED void *sluice__calloc64(size_t n);
/* Ask for huge pages (2 MB) for the whole 2 MB pages inside the n bytes at
 * p, a block from sluice__calloc: only with the default allocator, and only
 * where the system has them (Linux's transparent huge pages, "madvise"
 * mode or "always"); a hint, never an error. */
SLUICE__SHARED void sluice__advise_huge(void *p, size_t n);
SLUICE__SHARED void sluice__free64(void *p);

/* SipHash-1-3 of data under the 128-bit key (siphash.c). */
SLUICE__SHARED uint64_t sluice__siphash13(const uint64_t key[2], const void *data,
                                          size_t len);

/* 16 unpredictable bytes from getrandom() (or /dev/urandom; as a last
 * resort, clocks and addresses).  Never fails (random.c). */
SLUICE__SHARED void sluice__random_seed(uint64_t out[2]);

#endif /* SLUICE_SHARED_H */
