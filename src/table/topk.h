/* topk.h -- the sketch of the keys a table refuses most (topk.c): Space-
 * Saving heavy hitters, one sketch per table shard, each under a spin lock
 * of its own, fed by a pending record per thread (a thread's refusals of
 * one key gather there without a shared write, and go into the sketch in
 * one weighted step; a key refused once goes into the sketch at once).
 *
 * Bound, for every read: with N refusals counted before the read began and
 * m counters per shard, each reported count c and error e of a key refused
 * f times satisfy c - e <= f <= c and e <= N/m, and every key with f > N/m
 * is reported -- the read first moves every thread's pending refusals into
 * the sketch, so the bound is Space-Saving's, with no term for the records.
 * Refusals made while a read runs may or may not be in it.  Between reads
 * the sketch itself lags by at most 255 refusals per thread (topk.c's
 * PEND_MAX - 1), which only a read would see, and a read folds them in. */
#ifndef SLUICE_TOPK_H
#define SLUICE_TOPK_H

#include "base/internal.h"

typedef struct sluice__topk sluice__topk;

/* Make the sketches of a table of 2^shard_bits shards: `counters` counters
 * each (1 .. SLUICE_TOP_COUNTERS_MAX), keys kept to their first
 * `max_key_bytes` bytes (1 .. SLUICE_TOP_KEY_MAX); `seed` is the table's
 * hash seed (copied).  All the memory it will ever use is allocated here.
 * Returns NULL when memory runs out. */
SLUICE__INTERNAL sluice__topk *sluice__topk_new(unsigned shard_bits, size_t counters,
                                                size_t max_key_bytes, const uint64_t seed[2]);
/* NULL is a no-op.  No other call may be using k. */
SLUICE__INTERNAL void sluice__topk_free(sluice__topk *k);

/* Count one refusal of `key` (keylen bytes; key not NULL), whose table hash
 * (SipHash-1-3 under the table's seed) is h.  Never allocates.  Thread-safe;
 * once the calling thread has refused a key twice in a row, its refusals
 * of that key are one store each to the thread's own record (until it
 * refuses another key twice in a row); any other refusal is one step under
 * the sketch's lock. */
SLUICE__INTERNAL void sluice__topk_note(sluice__topk *k, const void *key, size_t keylen,
                                        uint64_t h);

/* The `max` keys counted most, most first (ties by key bytes), into out;
 * *n receives how many, every refusal made before the call counted
 * (pending ones are moved into the sketch first).  Thread-safe. */
SLUICE__INTERNAL void sluice__topk_read(sluice__topk *k, sluice_top_entry *out, size_t max,
                                        size_t *n);

#endif /* SLUICE_TOPK_H */
