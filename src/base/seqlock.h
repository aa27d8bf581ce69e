/* seqlock.h -- the read without a lock, written once: the shards of both
 * table placements (table.c's in-process shards through spin.h's lock,
 * region_table.c's shards in shared memory) and the refused-keys sketch's
 * records (topk.c) are read by threads that must not write.
 *
 * Map:  the orders (SLUICE__SEQ_STORE / _LOAD, SLUICE__PUT / _GET);
 *       the writer's side (sluice__seq_hold, sluice__seq_held_fence,
 *       sluice__seq_unhold); the reader's side (sluice__seq_begin,
 *       sluice__seq_valid); the proof.
 *
 * The protocol.  A sequence word guards some fields.  It is odd while a
 * holder (the only kind of thread that stores those fields) runs, and each
 * hold adds 2, so it never takes a value twice (2^63 holds are centuries).
 * A reader:
 *
 *   v = sluice__seq_begin(seq)         odd: a holder runs -- wait, again
 *   its loads, each with SLUICE__GET   (they may mix states: see (4))
 *   sluice__seq_valid(seq, v)          true: the loads are one snapshot
 *
 * under one rule: every store a holder makes to what such readers read is
 * an atomic store of the field's own size with SLUICE__PUT (or another
 * atomic store of order SLUICE__SEQ_STORE), and every such load of a reader
 * is an atomic load of the same size with SLUICE__GET; no store overlaps
 * another field's bytes.
 *
 * Why a read that sluice__seq_valid accepts is one state of the fields,
 * unchanged for the whole read, whatever order its loads ran in:
 * (1) No data race and no torn field: every access is atomic, of the
 * field's own size.  (2) v even was stored by the last hold's
 * sluice__seq_unhold (release; loaded here with acquire): every store of
 * the holds before it is visible to the loads after it.  (3) If a load saw
 * a store of a hold that began after v, that store follows the hold's odd
 * store and a release fence (sluice__seq_hold, or a lock's bit-set then
 * sluice__seq_held_fence), and the load precedes the recheck's acquire
 * fence: the fences synchronise, so the odd store happens before the
 * recheck, which then reads it or a later value, never v (the sequence only
 * grows).  So when the recheck reads v, every load read what the fields
 * held from v's unhold to the recheck.  (4) A read that mixed states is
 * thrown away before anything is decided on it; before the recheck, its
 * user keeps it bounded anyway (a probe run cut at its array's size, a
 * length checked against its bound, nothing loaded used as a pointer).
 *
 * The stores and loads themselves are relaxed (plain moves on x86-64: the
 * reader writes nothing), ordered by the fences.  ThreadSanitizer does not
 * model fences (and gcc's -Werror=tsan refuses atomic_thread_fence), so
 * under it each store is a release and each load an acquire instead, which
 * gives the same edge access by access. */
#ifndef SLUICE_SEQLOCK_H
#define SLUICE_SEQLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__SANITIZE_THREAD__)
#define SLUICE__SEQ_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE__SEQ_TSAN 1
#endif
#endif
#ifndef SLUICE__SEQ_TSAN
#define SLUICE__SEQ_TSAN 0
#endif
#define SLUICE__SEQ_STORE (SLUICE__SEQ_TSAN ? __ATOMIC_RELEASE : __ATOMIC_RELAXED)
#define SLUICE__SEQ_LOAD (SLUICE__SEQ_TSAN ? __ATOMIC_ACQUIRE : __ATOMIC_RELAXED)

/* A holder's store and a reader's load of a guarded field (its own size). */
#define SLUICE__PUT(p, v) __atomic_store_n((p), (v), SLUICE__SEQ_STORE)
#define SLUICE__GET(p) __atomic_load_n((p), SLUICE__SEQ_LOAD)

/* After the store that made the sequence odd, before the hold's stores
 * (proof, (3)).  A lock whose taking makes the word odd (spin.h's bit-set)
 * calls this right after. */
static inline void sluice__seq_held_fence(void)
{
#if !SLUICE__SEQ_TSAN
    atomic_thread_fence(memory_order_release);
#endif
}

/* A hold by a thread that already excludes the other holders (a lock of
 * its own, or the only writer): the sequence odd (it stays so when it
 * already is: a holder that died mid-hold left it odd), then the fence.
 * Returns the value found. */
static inline uint64_t sluice__seq_hold(_Atomic uint64_t *seq)
{
    const uint64_t v = atomic_load_explicit(seq, memory_order_relaxed);
    atomic_store_explicit(seq, v | 1, (memory_order)SLUICE__SEQ_STORE);
    sluice__seq_held_fence();
    return v;
}

/* The end of a hold: even again, 2 past the hold's odd value (release:
 * after the hold's stores). */
static inline void sluice__seq_unhold(_Atomic uint64_t *seq)
{
    const uint64_t v = atomic_load_explicit(seq, memory_order_relaxed);
    atomic_store_explicit(seq, (v | 1) + 1, memory_order_release);
}

/* The start of a read: the sequence (odd: a holder runs; the read cannot
 * succeed -- wait, or lock). */
static inline uint64_t sluice__seq_begin(const _Atomic uint64_t *seq)
{
    return atomic_load_explicit((_Atomic uint64_t *)seq, memory_order_acquire);
}

/* Whether no holder has run since sluice__seq_begin() returned v (even):
 * the read's loads, all before it, were one snapshot. */
static inline bool sluice__seq_valid(const _Atomic uint64_t *seq, uint64_t v)
{
#if !SLUICE__SEQ_TSAN
    atomic_thread_fence(memory_order_acquire); /* the reader's loads before the recheck */
#endif
    return atomic_load_explicit((_Atomic uint64_t *)seq, memory_order_relaxed) == v;
}

#endif /* SLUICE_SEQLOCK_H */
