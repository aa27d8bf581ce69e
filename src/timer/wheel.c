/* wheel.c -- timers on a hierarchical timing wheel (sluice_wheel).
 *
 * Time is counted in ticks of tick_ns.  A timer's due tick is its deadline
 * rounded up to a tick, e = ceil(deadline / tick_ns); it fires when the
 * wheel's tick `cur` reaches e, i.e. in the first advance(now) with
 * floor(now / tick_ns) >= e, hence now >= e * tick_ns >= deadline: never
 * early, and at most one tick late.
 *
 * The level choice, the occupancy words, the next-event search and the
 * cascade step are the core this wheel shares with the tables' reclaimer
 * (src/timer/wheel_core.h); this file holds the timers, their lists, the order of
 * firing and the locking.
 *
 * Levels.  Write a tick in base 64: digit k is bits [6k, 6k+6).  A pending
 * timer (e > cur) is filed on the level of the most significant digit in
 * which e and cur differ, in the slot numbered by e's digit there, as
 * Varghese and Lauck's hierarchical wheel and the Linux timer wheel do.  With
 * 8 levels of 64 slots (6 bits each, 48 bits of ticks):
 *
 *   level  slot width    reach: due in the current aligned block of
 *          (ticks)       (ticks)   with tick = 1 ms    with tick = 1 us
 *     0    1             64        64 ms               64 us
 *     1    64            2^12      4.1 s               4.1 ms
 *     2    2^12          2^18      4 min 22 s          262 ms
 *     3    2^18          2^24      4 h 40 min          16.8 s
 *     4    2^24          2^30      12.4 days           17.9 min
 *     5    2^30          2^36      2.18 years          19.1 h
 *     6    2^36          2^42      139 years           50.9 days
 *     7    2^42          2^48      8919 years          8.92 years
 *   overflow             beyond    (none: 2^64 ns is   (one list, re-filed
 *                                   584 years)          per 2^48 ticks)
 *
 * A timer thus sits on level k when it is due within the current aligned
 * block of 64^(k+1) ticks but not within that of 64^k.  Blocks, not delays,
 * decide: a timer due 1 tick after the end of the current 64^(k+1) block
 * sits on level k + 1, in the slot that starts at its due tick, and fires
 * straight from there when that slot is reached.
 *
 * Firing precision is one tick at every level, unlike Linux's wheel since
 * 4.8, which fires coarse timers late: when `cur` reaches the start of an
 * occupied slot of level k >= 1, the slot is emptied and each of its timers
 * re-filed by the same rule, now on a level < k (or fired, if due then).  A
 * timer is re-filed at most once per level on its way down.
 *
 * Beyond the last level.  A timer whose e differs from cur above bit 48 (only
 * possible when tick_ns < 2^16 ns, since ticks then count past 2^48 within
 * 2^64 ns) waits on an overflow list with a lower bound of its due ticks.
 * When cur reaches the start of the aligned 2^48-tick block holding that
 * bound, the list is re-filed: those now within reach go onto the levels,
 * the others back on the list with an exact bound.  Never fired early; each
 * re-filing brings the earliest overflow timer onto the levels.
 *
 * Order.  All timers of level k are due before all timers of level k + 1
 * (they share cur's digits above k, those of level k + 1 do not), and
 * within a level slots are in time order; so the next event -- a level-0
 * slot due, a coarser slot to re-file, or the overflow -- is the lowest set
 * bit of the lowest non-empty level's 64-bit occupancy word: O(levels), with
 * no loop over ticks, so an idle gap of years costs nothing.  advance() jumps
 * from event to event up to its target tick.  Lists are FIFO and re-filing
 * walks them in order, so timers of one due tick come out in the order they
 * were scheduled; each batch of one tick is then stably sorted by exact
 * deadline (usually a check that finds it sorted), giving the order
 * (deadline, scheduling order).
 *
 * next_deadline() is the due tick of the first slot of the lowest non-empty
 * level: exact on level 0; for a coarser slot, the minimum due tick filed
 * there, kept on insertion and not raised by a cancel (a lower bound, exact
 * unless the slot's earliest timer was cancelled).
 *
 * Timers already due when scheduled (e <= cur) go on the `due` list, which
 * advance() fires first; while advance() runs, new ones wait there for the
 * next call, so a callback re-scheduling itself for "now" cannot keep one
 * call going forever.  Timers found due while a slot is re-filed go straight
 * to the batch being fired.
 *
 * Memory.  Timers are 48-byte nodes in chunks of 1024, addressed by a 32-bit
 * index (chunk << 10 | slot in chunk); lists link indices, so a node has no
 * pointers but the callback and its argument.  An id is the index and the
 * node's 32-bit generation, bumped when the node is freed, so a stale id
 * never matches a reused node.  A chunk is nodes only; its bookkeeping (use
 * count, free list, partial-list links) sits in a dense array beside the
 * chunk table, so cancelling a cold timer touches the node and its two list
 * neighbours and nothing else that is cold.  Chunks with free nodes are on
 * a `partial` list from which nodes are taken (LIFO: the most recently
 * freed node, warm in cache), so a chunk is allocated only when every chunk
 * held is full: at most one allocation per 1024 schedules.  A chunk that
 * becomes entirely free is returned to the allocator, except one spare (the
 * lowest-numbered, so that chunk 0, made by _new, is the one kept): with no
 * timers pending, the wheel holds exactly what _new allocated.  New chunks
 * take the lowest free number, and the chunk table shrinks when its upper
 * three quarters are unused.  Generations survive chunk release through
 * gen_floor: a new chunk's nodes start above every generation a released
 * chunk used.
 *
 *   per pending timer: 48 bytes (node) + 28.1 / 1024 (table entry,
 *                      bitmap bit, bookkeeping)  ~= 48.03 bytes
 *   fixed: the wheel (~8.5 KiB: 515 list heads, 512 slot minima, 8
 *          occupancy words), the table for 16 chunks (0.6 KiB) and chunk 0
 *          (48 KiB).
 *
 * Locking.  One mutex guards the wheel; it is released around each callback,
 * so callbacks may call any function of the wheel, and every 256 timers
 * while advance() re-files a coarse slot (see cascade()), so that no call
 * waits long behind a big slot.  `firing` holds the id of the callback
 * running (its node is already free), for cancel()'s EBUSY.
 * advance() calls are serialised by the `advancing` flag: a second caller
 * raises `target` and returns, and the running call goes on to it.  The
 * optional thread sleeps on a condition variable bound to CLOCK_MONOTONIC
 * until next_deadline(); schedule() signals it when the new due time is
 * earlier than the one it sleeps until.  start/stop serialise on a second
 * mutex, never held by the wheel's thread, so stop() can join it.
 *
 * Sections and entry points:
 *   ticks and ids, slab, lists and filing   (static: the node store and
 *                                           wheel_core.h's instance)
 *   public API    sluice_wheel_new, _free, _schedule, _reschedule, _cancel,
 *                 _advance, _next_deadline, _pending; bindings
 *                 sluice__wheel_bind, sluice__wheel_unbind (wheel.h)
 *   own thread    sluice_wheel_start, sluice_wheel_stop
 */
#define _POSIX_C_SOURCE 200809L
#include "base/internal.h"
#include "timer/wheel.h"
#include "timer/wheel_core.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#define NSLOTS SLUICE__WCORE_LISTS /* 512 */

/* List numbers: the core's slots and its beyond list, then two more. */
#define L_OVERFLOW SLUICE__WCORE_BEYOND /* beyond the last level */
#define L_DUE (NSLOTS + 1)      /* due already, fired at the next advance */
#define L_BATCH (NSLOTS + 2)    /* being fired by the running advance */
#define NLISTS (NSLOTS + 3)
#define W_FREE 0xFFFFu          /* `where` of a free node */

#define CHUNK_BITS 10
#define CHUNK_NODES (1u << CHUNK_BITS)
#define CHUNK_MASK (CHUNK_NODES - 1)
#define NIL UINT32_MAX
#define TABLE_MIN 16u /* chunk table entries kept at least */

_Static_assert(SLUICE_WHEEL_LEVELS == SLUICE__WCORE_LEVELS &&
               SLUICE_WHEEL_SLOT_BITS == SLUICE__WCORE_BITS,
               "the public constants describe the core");
_Static_assert(L_OVERFLOW == NSLOTS, "list numbers follow the core's");
_Static_assert(SLUICE_WHEEL_MAX_TIMERS <= ((uint64_t)1 << 31),
               "node indices must stay below NIL");

/* What a cascade reads (next, due) and what unlinking writes (next, prev)
 * come first: 16 bytes that never straddle a cache line (nodes are 48 bytes
 * from a 16-byte aligned chunk), so walking a list costs one line per node. */
typedef struct wnode {
    uint32_t next, prev;  /* list links, NIL at the ends; next: free list */
    uint64_t due;         /* due tick: ceil(deadline_ns / tick_ns) */
    uint64_t deadline_ns; /* as scheduled */
    sluice_timer_fn fn;
    void *arg;
    uint32_t gen;         /* generation, >= 1; bumped when freed */
    uint16_t where;       /* the list the node is on, or W_FREE */
    uint16_t unused;
} wnode;
_Static_assert(sizeof(wnode) == 48, "a node is 48 bytes");

typedef struct wchunk {
    wnode n[CHUNK_NODES];
} wchunk;

/* A chunk's bookkeeping, kept in a dense array beside the chunk table rather
 * than in the chunk: freeing a cold node then touches no other cold line. */
typedef struct wmeta {
    uint32_t used;       /* nodes in use */
    uint32_t free_head;  /* first free node (wheel index), NIL if none */
    uint32_t prev, next; /* on the partial list (chunk numbers) */
    uint32_t max_gen;    /* the largest generation any node has had */
} wmeta;

typedef struct wlist {
    uint32_t head, tail;
} wlist;

enum { THR_IDLE, THR_RUNNING, THR_EXITING };

struct sluice_wheel {
    pthread_mutex_t mu;
    uint64_t tick_ns;
    uint64_t max_tick;     /* UINT64_MAX / tick_ns: larger ticks saturate */
    sluice__div tdiv;      /* t / tick_ns */
    sluice__wcore core;    /* core.cur, the wheel's tick: nothing due <=
                            * core.cur is filed on the levels */
    uint64_t now_ns;       /* the latest time seen */
    uint64_t target;       /* the tick the running advance() goes to */
    size_t max_timers;
    _Atomic size_t pending;
    bool advancing;
    sluice_timer_id firing; /* the id whose callback runs, or 0 */

    /* slab: one block holds chunks[ccap], cfree[ccap / 64], meta[ccap] */
    wchunk **chunks;       /* NULL for a free number */
    uint64_t *cfree;       /* bit c: chunk number c is free */
    wmeta *meta;
    uint32_t ccap;         /* entries in chunks[] */
    uint32_t cmax;         /* chunk numbers ever needed: ceil(max / 1024) */
    uint32_t chi;          /* 1 + the highest number in use */
    uint32_t chint;        /* no free number in words below this one */
    uint32_t partial;      /* chunks with free nodes and some in use */
    uint32_t spare;        /* an entirely free chunk kept, or NIL */
    uint32_t gen_floor;    /* >= every generation of a released chunk */

    /* own thread */
    pthread_mutex_t ctl;   /* serialises start/stop */
    pthread_cond_t cv;
    pthread_t thr;
    int thr_state;
    bool thr_stop;         /* asked to exit */
    bool thr_waits_adv;    /* waits for another advance() to end */
    uint64_t thr_wake;     /* sleeping until this time; 0: not sleeping */

    wlist lists[NLISTS];
    uint64_t smin[NSLOTS + 1]; /* levels >= 1: <= every due tick in the slot
                                * (smin[L_OVERFLOW]: unused, spares a test) */

    sluice__wheel_binding *bound; /* objects told of the free (wheel.h) */
};

/* ------------------------------------------------------------------------ */
/* Ticks and ids                                                             */

static inline uint64_t due_tick(const sluice_wheel *w, uint64_t d)
{
    uint64_t q = sluice__div_q(&w->tdiv, d);
    return q + (q * w->tick_ns != d);
}

/* The tick a time falls in; the end of time counts as past every tick, so
 * that advance(UINT64_MAX) fires everything, as deadline <= now says. */
static inline uint64_t tick_of(const sluice_wheel *w, uint64_t t)
{
    return t == UINT64_MAX ? UINT64_MAX : sluice__div_q(&w->tdiv, t);
}

static inline uint64_t tick_ns_of(const sluice_wheel *w, uint64_t e)
{
    return e > w->max_tick ? UINT64_MAX : e * w->tick_ns;
}

static inline sluice_timer_id make_id(uint32_t i, uint32_t gen)
{
    return (uint64_t)gen << 32 | i;
}

static inline wnode *node(const sluice_wheel *w, uint32_t i)
{
    return &w->chunks[i >> CHUNK_BITS]->n[i & CHUNK_MASK];
}

static inline void pending_add(sluice_wheel *w, size_t d, bool up)
{
    size_t p = atomic_load_explicit(&w->pending, memory_order_relaxed);
    atomic_store_explicit(&w->pending, up ? p + d : p - d, memory_order_relaxed);
}

static inline void lock(const sluice_wheel *w)
{
    pthread_mutex_lock((pthread_mutex_t *)&w->mu);
}

static inline void unlock(const sluice_wheel *w)
{
    pthread_mutex_unlock((pthread_mutex_t *)&w->mu);
}

/* ------------------------------------------------------------------------ */
/* Slab                                                                      */

/* Replace the chunk table by one of `ncap` entries (>= chi), in one block:
 * the chunk pointers, the free-number bitmap, the chunks' bookkeeping.  On
 * failure the old table stays and SLUICE_ENOMEM is returned. */
static int table_resize(sluice_wheel *w, uint32_t ncap)
{
    size_t nwords = ((size_t)ncap + 63) / 64;
    size_t bytes = (size_t)ncap * sizeof(wchunk *) + nwords * sizeof(uint64_t) +
                   (size_t)ncap * sizeof(wmeta);
    char *blk = sluice__malloc(bytes);
    if (!blk) return SLUICE_ENOMEM;
    wchunk **t = (wchunk **)blk;
    uint64_t *m = (uint64_t *)(blk + (size_t)ncap * sizeof *t);
    wmeta *meta = (wmeta *)(m + nwords);
    uint32_t keep = w->ccap < ncap ? w->ccap : ncap;
    if (keep) {
        memcpy(t, w->chunks, keep * sizeof *t);
        memcpy(meta, w->meta, keep * sizeof *meta);
    }
    for (uint32_t c = keep; c < ncap; c++) t[c] = NULL;
    memset(m, 0, nwords * sizeof *m);
    for (uint32_t c = 0; c < ncap; c++)
        if (!t[c]) m[c / 64] |= (uint64_t)1 << (c % 64);
    sluice__free(w->chunks);
    w->chunks = t;
    w->cfree = m;
    w->meta = meta;
    w->ccap = ncap;
    w->chint = 0;
    return 0;
}

/* A free chunk number, the lowest; grows the table when it is full.  NIL
 * when the table cannot grow (memory, or cmax reached). */
static uint32_t chunk_number(sluice_wheel *w)
{
    for (;;) {
        uint32_t nwords = (w->ccap + 63) / 64;
        for (uint32_t k = w->chint; k < nwords; k++) {
            if (w->cfree[k]) {
                w->chint = k;
                return k * 64 + (uint32_t)__builtin_ctzll(w->cfree[k]);
            }
        }
        w->chint = nwords;
        if (w->ccap >= w->cmax) return NIL;
        uint64_t ncap = (uint64_t)w->ccap * 2;
        if (ncap > w->cmax) ncap = w->cmax;
        if (table_resize(w, (uint32_t)ncap) != 0) return NIL;
    }
}

/* Make a chunk of free nodes under the lowest free number; it is neither on
 * the partial list nor the spare.  NIL when out of memory. */
static uint32_t chunk_new(sluice_wheel *w)
{
    uint32_t c = chunk_number(w);
    if (c == NIL) return NIL;
    wchunk *ch = sluice__malloc(sizeof *ch);
    if (!ch) return NIL;
    uint32_t gen = w->gen_floor + 1;
    if (gen == 0) gen = 1;
    uint32_t base = c << CHUNK_BITS;
    for (uint32_t k = 0; k < CHUNK_NODES; k++) {
        ch->n[k].next = k + 1 < CHUNK_NODES ? base + k + 1 : NIL;
        ch->n[k].prev = NIL;
        ch->n[k].gen = gen;
        ch->n[k].where = W_FREE;
        ch->n[k].unused = 0;
    }
    w->meta[c] = (wmeta){0, base, NIL, NIL, gen};
    w->chunks[c] = ch;
    w->cfree[c / 64] &= ~((uint64_t)1 << (c % 64));
    if (c + 1 > w->chi) w->chi = c + 1;
    return c;
}

static void chunk_release(sluice_wheel *w, uint32_t c)
{
    if (w->meta[c].max_gen > w->gen_floor) w->gen_floor = w->meta[c].max_gen;
    sluice__free(w->chunks[c]);
    w->chunks[c] = NULL;
    w->cfree[c / 64] |= (uint64_t)1 << (c % 64);
    if (c / 64 < w->chint) w->chint = c / 64;
    while (w->chi > 0 && !w->chunks[w->chi - 1]) w->chi--;
    /* Shrink the table when three quarters of it are unused. */
    if (w->ccap > TABLE_MIN && (uint64_t)w->chi * 4 <= w->ccap) {
        uint32_t ncap = TABLE_MIN;
        while (ncap < 2 * w->chi) ncap *= 2;
        if (ncap < w->ccap) (void)table_resize(w, ncap); /* kept on failure */
    }
}

static void partial_push(sluice_wheel *w, uint32_t c)
{
    wmeta *m = &w->meta[c];
    m->prev = NIL;
    m->next = w->partial;
    if (w->partial != NIL) w->meta[w->partial].prev = c;
    w->partial = c;
}

static void partial_remove(sluice_wheel *w, uint32_t c)
{
    wmeta *m = &w->meta[c];
    if (m->prev != NIL) w->meta[m->prev].next = m->next;
    else w->partial = m->next;
    if (m->next != NIL) w->meta[m->next].prev = m->prev;
}

/* A free node's index, or NIL when memory runs out. */
static uint32_t node_alloc(sluice_wheel *w)
{
    uint32_t c = w->partial;
    if (c == NIL) {
        if (w->spare != NIL) {
            c = w->spare;
            w->spare = NIL;
        } else {
            c = chunk_new(w);
            if (c == NIL) return NIL;
        }
        partial_push(w, c);
    }
    wmeta *m = &w->meta[c];
    uint32_t i = m->free_head;
    m->free_head = w->chunks[c]->n[i & CHUNK_MASK].next;
    if (++m->used == CHUNK_NODES) partial_remove(w, c);
    return i;
}

/* Return node i (off every list) to its chunk. */
static void node_free(sluice_wheel *w, uint32_t i, wnode *n)
{
    uint32_t c = i >> CHUNK_BITS;
    wmeta *m = &w->meta[c];
    if (++n->gen == 0) n->gen = 1;
    if (n->gen > m->max_gen) m->max_gen = n->gen;
    n->where = W_FREE;
    n->next = m->free_head;
    m->free_head = i;
    if (m->used-- == CHUNK_NODES) partial_push(w, c);
    if (m->used == 0) {
        partial_remove(w, c);
        if (w->spare == NIL) {
            w->spare = c;
        } else if (c < w->spare) {
            chunk_release(w, w->spare);
            w->spare = c;
        } else {
            chunk_release(w, c);
        }
    }
}

/* The pending node named by id (and its index), or NULL. */
static wnode *lookup(const sluice_wheel *w, sluice_timer_id id, uint32_t *pi)
{
    uint32_t i = (uint32_t)id, gen = (uint32_t)(id >> 32);
    uint32_t c = i >> CHUNK_BITS;
    if (gen == 0 || c >= w->ccap || !w->chunks[c]) return NULL;
    wnode *n = &w->chunks[c]->n[i & CHUNK_MASK];
    if (n->where == W_FREE || n->gen != gen) return NULL;
    *pi = i;
    return n;
}

/* ------------------------------------------------------------------------ */
/* Lists and filing                                                          */

static inline void list_append(sluice_wheel *w, unsigned li, uint32_t i, wnode *n)
{
    wlist *l = &w->lists[li];
    n->where = (uint16_t)li;
    n->next = NIL;
    n->prev = l->tail;
    if (l->tail == NIL) l->head = i;
    else node(w, l->tail)->next = i;
    l->tail = i;
}

static inline void list_unlink(sluice_wheel *w, wnode *n)
{
    unsigned li = n->where;
    wlist *l = &w->lists[li];
    if (n->prev == NIL) l->head = n->next;
    else node(w, n->prev)->next = n->next;
    if (n->next == NIL) l->tail = n->prev;
    else node(w, n->next)->prev = n->prev;
    if (l->head == NIL && li <= L_OVERFLOW) {
        sluice__wcore_vacate(&w->core, li);
        w->smin[li] = UINT64_MAX;
    }
}

/* File node i by its due tick relative to cur (see the head comment). */
static inline void file(sluice_wheel *w, uint32_t i, wnode *n)
{
    uint64_t due = n->due;
    if (due <= w->core.cur) {
        list_append(w, L_DUE, i, n);
        return;
    }
    uint32_t li = sluice__wcore_file(&w->core, due);
    list_append(w, li, i, n);
    if (due < w->smin[li]) w->smin[li] = due;
}

/* Empty list li (cur is now its event tick): what is due goes to the batch,
 * the rest is filed again, now on a finer level.  A slot is taken from its
 * head one node at a time, and the lock is released every CASCADE_STEP
 * nodes, so that a slot of many timers does not hold up other threads; in
 * between, li is an ordinary list (its timers can be cancelled) that no new
 * timer can join (those go to slots after cur's digit).  The overflow list
 * may take back some of its own timers, so it is detached first and
 * re-filed in one go (it is rare: only ticks under 2^16 ns reach it). */
#define CASCADE_STEP 256
static void cascade(sluice_wheel *w, uint32_t li)
{
    wlist *l = &w->lists[li];
    if (li == L_OVERFLOW) {
        uint32_t i = l->head;
        l->head = l->tail = NIL;
        sluice__wcore_vacate(&w->core, li);
        while (i != NIL) {
            wnode *n = node(w, i);
            uint32_t next = n->next;
            if (n->due <= w->core.cur) list_append(w, L_BATCH, i, n);
            else file(w, i, n);
            i = next;
        }
        return;
    }
    for (unsigned k = 1; l->head != NIL; k++) {
        uint32_t i = l->head;
        wnode *n = node(w, i);
        list_unlink(w, n);
        if (n->due <= w->core.cur) list_append(w, L_BATCH, i, n);
        else file(w, i, n);
        if (k % CASCADE_STEP == 0 && l->head != NIL) {
            unlock(w);
            lock(w);
        }
    }
}

/* Sort the batch by deadline, stably (Simon Tatham's merge sort for linked
 * lists: O(n log n), no memory); first check whether it is sorted. */
static void batch_sort(sluice_wheel *w)
{
    wlist *l = &w->lists[L_BATCH];
    uint32_t i = l->head;
    if (i == NIL) return;
    bool sorted = true;
    for (uint64_t last = 0; i != NIL;) {
        wnode *n = node(w, i);
        if (n->deadline_ns < last) {
            sorted = false;
            break;
        }
        last = n->deadline_ns;
        i = n->next;
    }
    if (sorted) return;

    uint32_t list = l->head, tail = NIL;
    for (size_t insize = 1;; insize *= 2) {
        uint32_t p = list;
        size_t merges = 0;
        list = tail = NIL;
        while (p != NIL) {
            merges++;
            uint32_t q = p;
            size_t psize = 0, qsize = insize;
            while (psize < insize && q != NIL) {
                psize++;
                q = node(w, q)->next;
            }
            while (psize > 0 || (qsize > 0 && q != NIL)) {
                uint32_t e;
                if (psize == 0) {
                    e = q, q = node(w, q)->next, qsize--;
                } else if (qsize == 0 || q == NIL ||
                           node(w, p)->deadline_ns <= node(w, q)->deadline_ns) {
                    e = p, p = node(w, p)->next, psize--;
                } else {
                    e = q, q = node(w, q)->next, qsize--;
                }
                wnode *en = node(w, e);
                en->prev = tail;
                if (tail != NIL) node(w, tail)->next = e;
                else list = e;
                tail = e;
            }
            p = q;
        }
        node(w, tail)->next = NIL;
        if (merges <= 1) break;
    }
    l->head = list;
    l->tail = tail;
}

/* Fire the batch, one callback at a time with the lock released.  A timer
 * of the batch cancelled meanwhile is simply no longer on it. */
static size_t batch_fire(sluice_wheel *w)
{
    size_t fired = 0;
    batch_sort(w);
    while (w->lists[L_BATCH].head != NIL) {
        uint32_t i = w->lists[L_BATCH].head;
        wnode *n = node(w, i);
        list_unlink(w, n);
        sluice_timer_fn fn = n->fn;
        void *arg = n->arg;
        sluice_timer_id id = make_id(i, n->gen);
        node_free(w, i, n);
        pending_add(w, 1, false);
        w->firing = id;
        uint64_t now = w->now_ns;
        unlock(w);
        fn(arg, id, now);
        lock(w);
        w->firing = 0;
        fired++;
    }
    return fired;
}

static uint64_t next_deadline_locked(const sluice_wheel *w)
{
    if (w->lists[L_DUE].head != NIL || w->lists[L_BATCH].head != NIL)
        return w->now_ns;
    uint64_t e;
    uint32_t li = sluice__wcore_next(&w->core, &e);
    if (li == SLUICE__WCORE_NONE) return UINT64_MAX;
    /* level 0: exact; above: the slot's least due tick; beyond: its bound */
    if (li == L_OVERFLOW) return tick_ns_of(w, w->core.beyond_min);
    return tick_ns_of(w, sluice__wcore_level(li) == 0 ? e : w->smin[li]);
}

/* Wake the wheel's thread if it sleeps past the due time of node n. */
static inline void wake_for(sluice_wheel *w, const wnode *n)
{
    if (w->thr_wake == 0) return;
    uint64_t t = n->due <= w->core.cur ? w->now_ns : tick_ns_of(w, n->due);
    if (t < w->thr_wake) pthread_cond_signal(&w->cv);
}

/* ------------------------------------------------------------------------ */
/* Public API                                                                */

sluice_wheel *sluice_wheel_new(uint64_t tick_ns, size_t max_timers,
                               uint64_t now_ns, char *err, size_t errlen)
{
    if (tick_ns == 0) tick_ns = SLUICE_WHEEL_DEFAULT_TICK_NS;
    if (tick_ns > SLUICE_WHEEL_MAX_TICK_NS) {
        sluice__errf(err, errlen, "tick_ns %llu is more than 2^40 ns",
                     (unsigned long long)tick_ns);
        return NULL;
    }
    if (max_timers == 0 || (uint64_t)max_timers > SLUICE_WHEEL_MAX_TIMERS) {
        sluice__errf(err, errlen, "max_timers %llu is not in 1 .. 2^31",
                     (unsigned long long)max_timers);
        return NULL;
    }
    sluice_wheel *w = sluice__malloc(sizeof *w);
    if (!w) goto nomem;
    memset(w, 0, sizeof *w);
    w->tick_ns = tick_ns;
    w->max_tick = UINT64_MAX / tick_ns;
    w->tdiv = sluice__div_make(tick_ns);
    w->now_ns = now_ns;
    w->target = tick_of(w, now_ns);
    w->max_timers = max_timers;
    atomic_init(&w->pending, 0);
    sluice__wcore_init(&w->core, w->target);
    w->firing = 0;
    w->cmax = (uint32_t)(((uint64_t)max_timers + CHUNK_NODES - 1) / CHUNK_NODES);
    w->partial = w->spare = NIL;
    w->thr_state = THR_IDLE;
    for (unsigned k = 0; k < NLISTS; k++) w->lists[k].head = w->lists[k].tail = NIL;
    for (unsigned k = 0; k <= NSLOTS; k++) w->smin[k] = UINT64_MAX;

    pthread_condattr_t ca;
    bool mu = false, ctl = false, cv = false;
    if (pthread_mutex_init(&w->mu, NULL) != 0) goto fail;
    mu = true;
    if (pthread_mutex_init(&w->ctl, NULL) != 0) goto fail;
    ctl = true;
    if (pthread_condattr_init(&ca) != 0) goto fail;
    if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&w->cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        goto fail;
    }
    pthread_condattr_destroy(&ca);
    cv = true;
    if (table_resize(w, w->cmax < TABLE_MIN ? w->cmax : TABLE_MIN) != 0) goto fail;
    w->spare = chunk_new(w); /* chunk 0, kept for good */
    if (w->spare == NIL) goto fail;
    return w;

fail:
    if (cv) pthread_cond_destroy(&w->cv);
    if (ctl) pthread_mutex_destroy(&w->ctl);
    if (mu) pthread_mutex_destroy(&w->mu);
    sluice__free(w->chunks);
    sluice__free(w);
nomem:
    sluice__errf(err, errlen, "out of memory");
    return NULL;
}

/* ---- bindings (wheel.h) ------------------------------------------------ */

void sluice__wheel_bind(sluice_wheel *w, sluice__wheel_binding *b)
{
    lock(w);
    b->prev = NULL;
    b->next = w->bound;
    if (w->bound) w->bound->prev = b;
    w->bound = b;
    unlock(w);
}

void sluice__wheel_unbind(sluice_wheel *w, sluice__wheel_binding *b)
{
    lock(w);
    if (b->prev) b->prev->next = b->next;
    else w->bound = b->next;
    if (b->next) b->next->prev = b->prev;
    b->next = b->prev = NULL;
    unlock(w);
}

/* Tell every bound object that the wheel ends (its thread has stopped; no
 * other call may be in progress), with no lock held. */
static void unbind_all(sluice_wheel *w)
{
    while (w->bound) {
        sluice__wheel_binding *b = w->bound;
        w->bound = b->next;
        if (w->bound) w->bound->prev = NULL;
        b->next = b->prev = NULL;
        b->on_free(b);
    }
}

void sluice_wheel_free(sluice_wheel *w)
{
    if (!w) return;
    sluice_wheel_stop(w);
    unbind_all(w);
    for (uint32_t c = 0; c < w->ccap; c++) sluice__free(w->chunks[c]);
    sluice__free(w->chunks);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->ctl);
    pthread_mutex_destroy(&w->mu);
    sluice__free(w);
}

int sluice_wheel_schedule(sluice_wheel *w, uint64_t deadline_ns,
                          sluice_timer_fn fn, void *arg, sluice_timer_id *out)
{
    if (!w || !fn) return SLUICE_EINVAL;
    lock(w);
    if (atomic_load_explicit(&w->pending, memory_order_relaxed) >= w->max_timers) {
        unlock(w);
        return SLUICE_EFULL;
    }
    uint32_t i = node_alloc(w);
    if (i == NIL) {
        unlock(w);
        return SLUICE_ENOMEM;
    }
    wnode *n = node(w, i);
    n->deadline_ns = deadline_ns;
    n->due = due_tick(w, deadline_ns);
    n->fn = fn;
    n->arg = arg;
    file(w, i, n);
    pending_add(w, 1, true);
    wake_for(w, n);
    sluice_timer_id id = make_id(i, n->gen);
    unlock(w);
    if (out) *out = id;
    return 0;
}

/* Under the lock: take timer `id` off its list for a change (its index
 * in *i, its node in *n), or SLUICE_EBUSY while it fires, SLUICE_ENOENT
 * when there is no such timer. */
static int unlink_for_change(sluice_wheel *w, sluice_timer_id id, uint32_t *i, wnode **n)
{
    if (id != 0 && id == w->firing) return SLUICE_EBUSY;
    if (!(*n = lookup(w, id, i))) return SLUICE_ENOENT;
    list_unlink(w, *n);
    return 0;
}

int sluice_wheel_reschedule(sluice_wheel *w, sluice_timer_id id,
                            uint64_t deadline_ns)
{
    if (!w) return SLUICE_EINVAL;
    lock(w);
    uint32_t i;
    wnode *n;
    int rc = unlink_for_change(w, id, &i, &n);
    if (rc == 0) {
        n->deadline_ns = deadline_ns;
        n->due = due_tick(w, deadline_ns);
        file(w, i, n);
        wake_for(w, n);
    }
    unlock(w);
    return rc;
}

int sluice_wheel_cancel(sluice_wheel *w, sluice_timer_id id)
{
    if (!w) return SLUICE_EINVAL;
    lock(w);
    uint32_t i;
    wnode *n;
    int rc = unlink_for_change(w, id, &i, &n);
    if (rc == 0) {
        node_free(w, i, n);
        pending_add(w, 1, false);
    }
    unlock(w);
    return rc;
}

size_t sluice_wheel_advance(sluice_wheel *w, uint64_t now_ns)
{
    if (!w) return 0;
    lock(w);
    if (now_ns > w->now_ns) w->now_ns = now_ns;
    uint64_t t = tick_of(w, w->now_ns);
    if (t > w->target) w->target = t;
    if (w->advancing) { /* the running call goes on to our target */
        unlock(w);
        return 0;
    }
    w->advancing = true;
    size_t fired = 0;

    /* What was due before this call: relabel the due list as the batch. */
    wlist *due = &w->lists[L_DUE];
    if (due->head != NIL) {
        for (uint32_t i = due->head; i != NIL; i = node(w, i)->next)
            node(w, i)->where = L_BATCH;
        w->lists[L_BATCH] = *due;
        due->head = due->tail = NIL;
        fired += batch_fire(w);
    }
    for (;;) {
        uint32_t li = sluice__wcore_step(&w->core, w->target);
        if (li == SLUICE__WCORE_NONE) {
            if (w->target > w->core.cur) w->core.cur = w->target;
            break;
        }
        cascade(w, li);
        if (w->lists[L_BATCH].head != NIL) fired += batch_fire(w);
    }
    w->advancing = false;
    if (w->thr_waits_adv) pthread_cond_signal(&w->cv);
    unlock(w);
    return fired;
}

uint64_t sluice_wheel_next_deadline(const sluice_wheel *w)
{
    if (!w) return UINT64_MAX;
    lock(w);
    uint64_t t = next_deadline_locked(w);
    unlock(w);
    return t;
}

size_t sluice_wheel_pending(const sluice_wheel *w)
{
    return w ? atomic_load_explicit(&w->pending, memory_order_relaxed) : 0;
}

/* ------------------------------------------------------------------------ */
/* Own thread                                                                */

static void *wheel_thread(void *p)
{
    sluice_wheel *w = p;
    lock(w);
    while (!w->thr_stop) {
        if (w->advancing) { /* someone else fires; wait until they are done */
            w->thr_waits_adv = true;
            pthread_cond_wait(&w->cv, &w->mu);
            w->thr_waits_adv = false;
            continue;
        }
        uint64_t next = next_deadline_locked(w);
        uint64_t now = sluice_now_ns();
        if (next <= now) {
            unlock(w);
            sluice_wheel_advance(w, now);
            lock(w);
            continue;
        }
        w->thr_wake = next;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&w->cv, &w->mu);
        } else {
            struct timespec ts = {(time_t)(next / 1000000000u),
                                  (long)(next % 1000000000u)};
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
        w->thr_wake = 0;
    }
    unlock(w);
    return NULL;
}

int sluice_wheel_start(sluice_wheel *w)
{
    if (!w) return SLUICE_EINVAL;
    lock(w);
    bool self = w->thr_state != THR_IDLE && pthread_equal(pthread_self(), w->thr);
    unlock(w);
    if (self) return SLUICE_EBUSY;

    pthread_mutex_lock(&w->ctl);
    lock(w);
    int state = w->thr_state;
    unlock(w);
    if (state == THR_RUNNING) {
        pthread_mutex_unlock(&w->ctl);
        return SLUICE_EBUSY;
    }
    if (state == THR_EXITING) { /* stopped from its own callback */
        pthread_join(w->thr, NULL);
        lock(w);
        w->thr_state = THR_IDLE;
        unlock(w);
    }
    lock(w);
    w->thr_stop = false;
    int rc = pthread_create(&w->thr, NULL, wheel_thread, w);
    if (rc == 0) w->thr_state = THR_RUNNING;
    unlock(w);
    pthread_mutex_unlock(&w->ctl);
    return rc == 0 ? 0 : SLUICE_ENOMEM;
}

void sluice_wheel_stop(sluice_wheel *w)
{
    if (!w) return;
    lock(w);
    if (w->thr_state == THR_IDLE) {
        unlock(w);
        return;
    }
    if (pthread_equal(pthread_self(), w->thr)) { /* from its own callback */
        w->thr_stop = true;
        w->thr_state = THR_EXITING;
        unlock(w);
        return;
    }
    unlock(w);

    pthread_mutex_lock(&w->ctl);
    lock(w);
    if (w->thr_state == THR_IDLE) {
        unlock(w);
        pthread_mutex_unlock(&w->ctl);
        return;
    }
    w->thr_stop = true;
    pthread_cond_signal(&w->cv);
    pthread_t t = w->thr;
    unlock(w);
    pthread_join(t, NULL);
    lock(w);
    w->thr_state = THR_IDLE;
    w->thr_stop = false;
    unlock(w);
    pthread_mutex_unlock(&w->ctl);
}
