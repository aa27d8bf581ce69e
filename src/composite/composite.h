/* composite.h -- what composite decisions (composite.c) need from the
 * limiter (limiter.c) and the table (table.c): one limit held, decided,
 * committed or not, released.  And reconfiguration's generic part
 * (reconfigure.c), which limiter.c calls. */
#ifndef SLUICE_COMPOSITE_H
#define SLUICE_COMPOSITE_H

#include "base/internal.h"

/* Decide a request on *st without writing *st or anything it points to
 * (the row's judge, or sluice__decide on *tmp, a copy, which then holds the
 * state after the admission, ready to be stored).  limiter.c. */
SLUICE__INTERNAL bool sluice__judge(const sluice__profile *pf, const sluice__state *st,
                                    sluice__state *tmp, uint64_t now_ns, uint64_t permits,
                                    sluice_result *res);

/* reconfigure.c: whether `to` may replace `from` on a running limiter (0,
 * or a negative code with the reason in err); the state of a limiter of
 * profile `from`, changed at now_ns into one of profile `to` (docs/c-api.md,
 * "Changing a limit while it runs"); whether a state fits the packed word
 * of its profile. */
SLUICE__INTERNAL int sluice__reconfigure_check(const sluice__profile *from,
                                               const sluice__profile *to, char *err,
                                               size_t errlen);
SLUICE__INTERNAL void sluice__reconfigure_state(const sluice__profile *from,
                                                const sluice__profile *to,
                                                sluice__state *st, uint64_t now_ns);
SLUICE__INTERNAL bool sluice__state_packable(const sluice__profile *pf,
                                             const sluice__state *st);
/* reconfigure.c: the spec of profile `cur` with one knob changed, into
 * buf -- LIMIT and PERIOD (SLUICE__KNOB_LIMIT: a = limit, b = period_ns;
 * sliding-wheel keeps its slot width, the windows' capacity follows L) or a
 * bucket's burst or capacity (SLUICE__KNOB_BURST: a); 0 or SLUICE_EINVAL
 * with the reason in err.  And a state that does not pack under its packed
 * profile, cut to what packs (a table's entries keep 16 bytes): a bucket's
 * level to 2^64 - 1 units (more than the full bucket), sliding-approx's
 * counts to 2^32 - 1 (more than its L) -- it refuses while they would, and
 * drains a little sooner. */
enum { SLUICE__KNOB_LIMIT = 1, SLUICE__KNOB_BURST = 2 };
SLUICE__INTERNAL int sluice__reconfigure_knob(const sluice__profile *cur, int knob, uint64_t a,
                                              uint64_t b, char *buf, size_t buflen, char *err,
                                              size_t errlen);
SLUICE__INTERNAL void sluice__reconfigure_fit(const sluice__profile *pf, sluice__state *st);

/* One limit of a composite decision, as composite.c holds it.  The limiter
 * and table modules fill the middle part when they hold it. */
typedef struct sluice__part {
    /* the request */
    sluice_limiter *lim;      /* or NULL for a table key */
    sluice_table *t;
    const void *key;
    size_t keylen;
    const void *skey;         /* the key as its table stores it (table.c, */
    size_t skeylen;           /* sluice__part_key: a long one's digest) */
    unsigned char dig[16];    /* that digest */
    uint64_t hash;
    const void *order;        /* lock order: the limiter, or the key's shard */
    struct sluice__rtable *rt; /* a key of a table in a shared region, or NULL */
    uint64_t rid[2];          /* rt: the region's identity (its random seed) */
    uint32_t rk;              /* rt: the key's shard */
    uint64_t repoch;          /* rt: the configuration decided under */
    bool stolen;              /* rt: a dead holder's lock was taken (resync) */
    bool first_of_lock;       /* the first part of its lock (shards are shared) */
    /* held */
    const sluice__profile *pf;
    sluice__state *st;        /* the state to decide on */
    sluice__state base;       /* limiter, lock-free: the word's state */
    sluice__state tmp;        /* a copy, or the state after the admission */
    void *where;              /* limiter: its configuration; table: its shard */
    uint32_t entry;           /* table: the key's slot, UINT32_MAX when absent */
    uint32_t gen;             /* table: the shard's moves when entry was found */
    bool lockfree;            /* limiter: a frozen word is held, not the mutex */
    bool created;             /* table: the entry was made for this request */
    u128 snap;                /* limiter: the frozen word's value */
    /* the decision */
    bool ok;
    sluice_result r;
} sluice__part;

/* One limit's answer to a composite call, as the combination reads it. */
typedef struct sluice__answer {
    bool ok;
    sluice_result r;
} sluice__answer;

/* limiter.c: hold a limiter for a composite (its mutex, or its frozen
 * word), fill pf and st; release it, storing part->tmp first if `commit`
 * and the state is not on the heap.  A limiter in the locked path commits
 * a window log by deciding on its real state before the release. */
SLUICE__INTERNAL void sluice__limiter_hold(sluice__part *part);
SLUICE__INTERNAL void sluice__limiter_release(sluice__part *part, bool commit);
SLUICE__INTERNAL void sluice__limiter_count(sluice_limiter *lim, uint64_t permits, bool ok);
/* After the count of a refused composite: this limit would have admitted
 * (sluice__count_elsewhere). */
SLUICE__INTERNAL void sluice__limiter_count_elsewhere(sluice_limiter *lim, uint64_t permits);
/* limiter.c: the whole composite when the refs are 1 to
 * SLUICE_COMPOSITE_MAX distinct lock-free limiters, without holding
 * anything while deciding, counted in each limiter.  sluice__limiters_try:
 * without per_limit, the public call itself -- whether admitted (or a probe
 * every limit allows), the combination of the limits' answers (composite.c's
 * rule) into *res unless res is NULL; any other call (a bad one, a table
 * key, a limiter twice or in the locked path) goes, with nothing decided or
 * counted, to sluice__composite_rest.  sluice__limiters_each: each limit's
 * answer into ans; 1 admitted (or a probe every limit
 * allows), 0 refused, -1 for any other call, nothing decided or counted. */
SLUICE__INTERNAL bool sluice__limiters_try(const sluice_limit_ref *refs, size_t n,
                                           uint64_t permits, uint64_t now_ns,
                                           sluice_result *res);
SLUICE__INTERNAL int sluice__limiters_each(const sluice_limit_ref *refs, size_t n,
                                           uint64_t permits, uint64_t now_ns,
                                           sluice__answer *ans);
/* composite.c: sluice_composite_try_acquire_at for every call but those
 * sluice__limiters_try decides: keys of in-process tables (table.c), each
 * limiter's answer, the general path, bad calls. */
SLUICE__INTERNAL bool sluice__composite_rest(const sluice_limit_ref *refs, size_t n,
                                             uint64_t permits, uint64_t now_ns,
                                             sluice_result *res, sluice_result *per_limit);

/* table.c: the whole composite when the refs are 1 to SLUICE_COMPOSITE_MAX
 * distinct keys already held by in-process tables, read without locks as a
 * single decision reads them and committed by upgrading each shard's
 * sequence (table.c), counted in each table: 1 admitted (or a probe every
 * limit allows), 0 refused; -1 with nothing decided or counted otherwise
 * (use the general path).  `ans` NULL: no details; else every limit's
 * answer. */
SLUICE__INTERNAL int sluice__tables_decide(const sluice_limit_ref *refs, size_t n,
                                           uint64_t permits, uint64_t now_ns,
                                           sluice__answer *ans);

/* table.c: the shard of a key (composite lock order), locking a shard and
 * its upkeep at now_ns; looking a key up in its locked shard (fills pf, st,
 * entry); making the key's entry when an admission needs it (0, or
 * SLUICE_EFULL with *retry set, or SLUICE_ENOMEM; `alone`: no other part
 * holds an entry of the shard, so keys at rest may be reclaimed and the
 * policy may evict); finding the key's slot (and st) again after entries of
 * its shard moved (a key made or dropped by another part); storing part->tmp
 * into the entry; undoing a made entry; reclaiming keys at rest in every shard
 * (with no lock held); counting (`full`: refused for want of room). */
SLUICE__INTERNAL void sluice__part_key(sluice__part *part); /* skey, skeylen from key, keylen, t, rt */
SLUICE__INTERNAL void *sluice__table_shard_of(sluice_table *t, const void *key, size_t keylen,
                                              uint64_t *hash);
SLUICE__INTERNAL void sluice__table_lock(sluice_table *t, void *shard, uint64_t now_ns);
SLUICE__INTERNAL void sluice__table_unlock(sluice_table *t, void *shard);
SLUICE__INTERNAL void sluice__table_find(sluice__part *part);
SLUICE__INTERNAL int sluice__table_make(sluice__part *part, bool alone, int64_t *retry);
SLUICE__INTERNAL void sluice__table_refind(sluice__part *part);
SLUICE__INTERNAL void sluice__table_store(sluice__part *part);
SLUICE__INTERNAL void sluice__table_unmake(sluice__part *part);
SLUICE__INTERNAL void sluice__table_reclaim(sluice_table *t, uint64_t now_ns);
SLUICE__INTERNAL void sluice__table_count(sluice_table *t, uint64_t permits, bool ok, bool full);
SLUICE__INTERNAL void sluice__table_count_elsewhere(sluice_table *t, uint64_t permits);
/* table.c: count a refusal of `key` in the table's sketch of the keys
 * refused most, if it has one; h is the key's hash under the table's seed
 * (0: unknown, computed).  Takes no shard lock. */
SLUICE__INTERNAL void sluice__table_note(sluice_table *t, const void *key, size_t keylen,
                                         uint64_t h);

#endif /* SLUICE_COMPOSITE_H */
