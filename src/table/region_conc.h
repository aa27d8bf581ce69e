/* region_conc.h -- what the two files of the shared concurrency region
 * share (internal): the layout of a key's slot, the handle, and the calls
 * of region_conc.c (the region: slots, holders, the shard's lock, a key's
 * wait line) that region_conc_async.c (the queued acquires, called back
 * from a timing wheel) builds on, and the three calls it gives back
 * (the handle's free, a release through the handle).  The design notes
 * are the head comments of the two files. */
#ifndef SLUICE_TABLE_REGION_CONC_H
#define SLUICE_TABLE_REGION_CONC_H

#include "table/region.h"
#include "alg/concurrency.h"
#include "base/siphash.h"

#include <sluice/concurrency.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct chead chead;   /* the region's header (region_conc.c) */
typedef struct cshard cshard; /* a shard's line (region_conc.c) */

typedef struct cslot {
    _Atomic uint64_t state; /* S_EMPTY, S_LIVE, S_TOMB */
    uint64_t held;          /* permits held: the sum of its counting entries */
    uint64_t t_last;        /* the latest time of a call on the key */
    uint64_t next_exp;      /* <= the earliest lease end; UINT64_MAX: none */
    uint32_t cursor, hint;  /* the sweep's next entry; the free search's */
    uint64_t sweep_next;    /* the earliest time of the key's next sweep */
    unsigned char dig[SLUICE__DIGEST_BYTES];
} cslot;
_Static_assert(sizeof(cslot) == 64, "a line a slot's head");

typedef struct cholder {
    _Atomic uint64_t who; /* 0 free, else the holder's identity */
    uint64_t ns;          /* its pid namespace */
    uint64_t expiry;      /* its lease's end; 0 without a lease */
    uint32_t permits, gen;
} cholder;
_Static_assert(sizeof(cholder) == 32, "32 bytes an entry");

/* A key's waiters (sluice_concurrency_region_acquire): after its H holder
 * entries.  `seq` is the futex word they sleep on: bumped, under the
 * shard's lock, by each wake; the kernel wakes the sleepers of one word
 * in the order they slept. */
typedef struct cwait {
    _Atomic uint32_t seq;     /* the futex word */
    uint32_t waiters;         /* blocked and queued acquirers (a hint: a dead one stays counted) */
    uint32_t passes;          /* wakes passed on by waiters since the last release */
    uint32_t woken;           /* waiters the kernel woke, wrapping (the tests count them) */
    _Atomic uint64_t sweeper; /* the waiter that polls for dead holders and leases, 0 none */
    uint64_t unused2;
} cwait;
_Static_assert(sizeof(cwait) == 32, "32 bytes a key's wait line");

typedef struct clayout {
    sluice__conc_profile cp;
    uint64_t max_keys, ecap;
    uint32_t nshards, shard_bits, cap, holders;
    size_t stride, slots_off, need;
    char spec[SLUICE_SPEC_MAX];
} clayout;

struct sluice_concurrency_region {
    clayout L; /* the handle's own copy: bounds never re-read from the region */
    chead *h;
    cshard *sh;
    unsigned char *slots;
    uint64_t dseed[2];
    uint64_t pidns;
    void *map; /* sluice_concurrency_region_open's mapping, unmapped on free */
    size_t map_len;
    /* queued acquires (sluice_concurrency_region_acquire_async_at): this
     * process's, in arrival order, under qmu */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;      /* a dropped request's callback finished (free waits) */
    struct rqnode *qhead, *qtail;
    struct rqbind *binds;    /* one per wheel used: told of the wheel's free */
    uint64_t next_id;
    unsigned inflight;       /* callbacks running, outside qmu */
    bool closing;            /* the handle is being freed */
    pid_t qpid;              /* the process whose queue it is */
    _Atomic uint32_t nqueued; /* requests in the queue (a release looks without qmu) */
};

static inline cslot *cslot_at(const sluice_concurrency_region *r, uint32_t k, uint32_t i)
{
    return (cslot *)(void *)(r->slots + ((size_t)k * r->L.cap + i) * r->L.stride);
}
static inline cholder *holder_at(cslot *s, uint32_t j)
{
    return (cholder *)(void *)((unsigned char *)s + sizeof(cslot)) + j;
}
static inline cwait *wait_of(const sluice_concurrency_region *r, cslot *s)
{
    return (cwait *)(void *)((unsigned char *)s + sizeof(cslot) +
                             (size_t)r->L.holders * sizeof(cholder));
}

/* ---- region_conc.c: every call with the shard's lock held unless said --- */

/* Lock, unlock shard k (a lock taken from a dead holder repairs it). */
void sluice__cr_lock(sluice_concurrency_region *r, uint32_t k);
void sluice__cr_unlock(sluice_concurrency_region *r, uint32_t k);
/* The digest of a key, its shard (returned) and its home slot.  No lock. */
uint32_t sluice__cr_place(const sluice_concurrency_region *r, const void *key, size_t keylen,
                          unsigned char dig[SLUICE__DIGEST_BYTES], uint32_t *home);
/* The slot of key dig in shard k, made when `make` (NONE: none, no room). */
uint32_t sluice__cr_find(sluice_concurrency_region *r, uint32_t k, uint32_t home,
                         const unsigned char *dig, bool make, uint64_t now_ns);
/* The key's clock at now_ns (never before its latest call), moved there. */
uint64_t sluice__cr_key_time(cslot *s, uint64_t now_ns);
/* Leases ended by t back and, when `permits` (> 0) do not fit, a sweep for
 * dead holders: whether permits were freed. */
bool sluice__cr_expire_sweep(const sluice_concurrency_region *r, cslot *s, uint64_t t,
                             uint64_t permits);
/* Record `permits` held by this process in a free entry of s: its index
 * (its generation in *gen), NONE when every entry is taken (damage). */
uint32_t sluice__cr_take(sluice_concurrency_region *r, cslot *s, uint64_t t, uint64_t permits,
                         uint32_t *gen);
/* Leave slot i's wait line (unless the slot went to another key). */
void sluice__cr_wait_leave(sluice_concurrency_region *r, uint32_t k, uint32_t i,
                           const unsigned char *dig);
/* After permits were freed on s: the word to wake one waiter on, or NULL. */
_Atomic uint32_t *sluice__cr_wake_freed(const sluice_concurrency_region *r, cslot *s);
/* Wake up to n sleepers of word w.  After unlocking. */
void sluice__cr_futex_wake(_Atomic uint32_t *w, int n);

/* ---- region_conc_async.c: no lock held --------------------------------- */

/* Whether requests wait in this process's queue of the handle. */
bool sluice__cr_queue_mine(const sluice_concurrency_region *r);
/* A release through the handle freed permits of key dig (shard k): serve
 * its queued requests of the key first. */
void sluice__cr_queue_released(sluice_concurrency_region *r, const unsigned char *dig, uint32_t k,
                               uint64_t now);
/* The handle's free: drop its queued requests (no callback), wait for the
 * callbacks that have them or run. */
void sluice__cr_queue_drop(sluice_concurrency_region *r);

#endif /* SLUICE_TABLE_REGION_CONC_H */
