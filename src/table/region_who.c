/* region_who.c -- who holds what in a shared table: the calling process's
 * and thread's identities, whether a lock's holder still lives, the lock
 * words (a shard's, the changes'), and the counter stripes each thread owns
 * (region_table.c has the design; region.h the layout).
 *
 * Map:  who we are (sluice__rt_self_ask, sluice__rt_pid_ns, tid_self) and
 *       whether a holder lives (sluice__rt_gone, tid_gone);
 *       sluice__rt_lock_word; sluice__rt_boot_id; the counter stripes
 *       (claim_stripe, my_stripe, sluice__rt_count_decision; counters.h
 *       adds and sums).
 *
 * Locking.  Each shard has one lock word: 0, or its holder's identity (pid
 * and the low 31 bits of the process's start time, from /proc).  An
 * admission (and a request that must make its key) locks its key's shard,
 * looks the key up, decides, unlocks: one compare-and-swap, and a store
 * each to the sequence (odd after the lock, even before the unlock) and to
 * the lock word.  A refusal or a probe reads the shard without the lock
 * instead (region_read.c: refusals and probes are reads).  A waiter spins 64
 * pauses, then yields the CPU; from then on, each
 * round it asks whether the holder still lives (kill(pid, 0) answering
 * ESRCH; every 4th round also /proc/PID/stat: a zombie -- killed, not yet
 * reaped by its parent -- or a start time that differs, the pid reused),
 * and takes the lock from a dead holder with a compare-and-swap, so two
 * waiters cannot both take it.  Bound: a waiter waits for a live holder's critical section
 * (one decision: a lookup of at most cap slots and the algorithm's O(log
 * ring) work; or, when a key needs room, one sweep of the shard's cap
 * slots), plus what the scheduler keeps the holder off a CPU; on a dead
 * holder, for at most 64 pauses and one yield after it died, plus one
 * kill() (4 yields and a read of /proc while it is a zombie or its pid was
 * reused).  A holder stopped for ever (SIGSTOP, a
 * debugger) stalls its shard as any lock would.  Every process must see the
 * others' pids: one pid namespace, and /proc mounted (without it only
 * kill() tells, so a zombie's lock waits for its parent to reap it).
 *
 * Statistics, every process's: admissions (requests and permits allowed),
 * reclaimed and evicted are counted in their shard, under its lock; keys
 * in the header; refusals, probes, refusals for want of room and a
 * composite's refusals by another limit (denied_elsewhere) in the
 * counter stripes, so that a refusal stores to no line another thread
 * stores to (counters.c stripes an in-process table's counts so).  A
 * thread claims a stripe of the region at its first count there: a
 * compare-and-swap of the stripe's owner word from 0 to the thread's
 * identity (tid_self: tid, pid and the thread's start time), or, when none
 * is free, from the identity of a thread that is gone (tid_gone: no such
 * thread in its process, a zombie, or its tid reused -- as for the locks),
 * whose counts stay and are added to.  The owner adds with a relaxed load
 * and store (plain moves, no locked instruction), exact as no other thread
 * stores to the line; a thread that finds all NSTRIPES owned by live
 * threads adds to the last, shared stripe with atomic read-modify-writes.
 * A stripe is never given back: a thread that exits or a process that dies
 * leaves it to be taken over.  stats_get sums every stripe with relaxed
 * loads: each count exact, the set possibly of different instants.  A
 * thread remembers its stripes (my_stripe) by the handle's address and the
 * region's seed -- compared, never followed, so a stale entry (a handle
 * freed, a region made again) is never written through -- and checks the
 * owner word, on the line it is about to write, at each count; a forked
 * child forgets its parent's (forget_self).  A thread killed between the
 * load and the store of a count loses that count (crash argument 4); the
 * dead owner's last stores precede its death, which the taker learns from
 * the kernel before its compare-and-swap.
 */
#define _GNU_SOURCE
#include "table/region.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- who we are, and whether a holder lives ----------------------------- */

/* The start time of process pid (clock ticks since boot, /proc/PID/stat's
 * 22nd field), or 0 when it cannot be read; *state (if not NULL) receives
 * its state letter (field 3: 'Z' a zombie, 'X' dead), or 0. */
static uint64_t proc_start(pid_t pid, char *state)
{
    if (state) *state = 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command may hold spaces and ')' */
    if (!p) return 0;
    p++;
    if (state && p[0] == ' ') *state = p[1];
    for (int field = 3; field < 22; field++) { /* skip to field 22 */
        p = strchr(p + 1, ' ');
        if (!p) return 0;
    }
    return strtoull(p + 1, NULL, 10);
}

_Atomic uint64_t sluice__rt_self_id; /* 0 until asked, and again in a child */
static _Atomic uint64_t pidns_id; /* sluice__rt_pid_ns(): likewise */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The calling thread's identity for the counter stripes (tid_self), 0
 * until asked; and its stripes, by handle and region (my_stripe). */
static _Thread_local uint64_t tid_id;
typedef struct my_stripe_at {
    uintptr_t r; /* the handle's address: compared, never followed */
    uint64_t seed[2];
    unsigned i; /* the stripe */
} my_stripe_at;
#define MINE 4
static _Thread_local my_stripe_at my_stripes[MINE];
static _Thread_local unsigned my_next;

/* In a child: the forking thread is another thread of another process. */
static void forget_self(void)
{
    atomic_store_explicit(&sluice__rt_self_id, 0, memory_order_relaxed);
    atomic_store_explicit(&pidns_id, 0, memory_order_relaxed);
    tid_id = 0;
    memset(my_stripes, 0, sizeof my_stripes);
}
static void register_atfork(void) { (void)pthread_atfork(NULL, NULL, forget_self); }

/* The low 31 bits of a start time that /proc gave (start != 0), never 0:
 * a lock word whose start bits are 0 names a process that could not read
 * /proc (sluice__rt_gone(): one that can is not it). */
static inline uint64_t start31(uint64_t start)
{
    start &= 0x7fffffffu;
    return start ? start : 1;
}

static inline uint64_t id_of(pid_t pid, uint64_t start)
{
    return (start ? start31(start) : 0) << 32 | (uint32_t)pid;
}

/* This process's identity for lock words: pid | low start-time bits << 32,
 * asked of /proc the first time (and again in a child), then kept in
 * sluice__rt_self_id, which region.h's sluice__rt_self loads inline. */
uint64_t sluice__rt_self_ask(void)
{
    uint64_t v = atomic_load_explicit(&sluice__rt_self_id, memory_order_relaxed);
    if (v) return v;
    pthread_once(&atfork_once, register_atfork);
    pid_t pid = getpid();
    v = id_of(pid, proc_start(pid, NULL));
    atomic_store_explicit(&sluice__rt_self_id, v, memory_order_relaxed);
    return v;
}

/* Whether the process with identity id is gone: no such pid, or (when
 * `look`, as the /proc read costs more) a zombie -- killed, not yet reaped
 * by its parent, which kill() still finds -- or a pid now another
 * process's. */
bool sluice__rt_gone(uint64_t id, bool look)
{
    pid_t pid = (pid_t)(uint32_t)id;
    if (pid <= 0) return true; /* no process has it */
    if (pid == getpid()) return (id >> 32) != (sluice__rt_self() >> 32); /* us, or our pid reused */
    if (kill(pid, 0) == -1 && errno == ESRCH) return true;
    if (!look) return false;
    char state;
    uint64_t start = id >> 32, now = proc_start(pid, &state);
    if (state == 'Z' || state == 'X') return true;
    /* start 0: a holder that could not read /proc; but its pid's /proc
     * answers, so that pid is not it (every process of a region sees
     * /proc, or none does: region_table.c, "Damage") -- a damaged word,
     * never awaited */
    if (start == 0) return now != 0;
    return now != 0 && start31(now) != start; /* the pid was reused */
}

/* This process's pid namespace: the inode of /proc/self/ns/pid (read
 * once), or 0 when it cannot be read.  A region records its maker's; a
 * process of another namespace is refused (attach): the pids in its lock
 * words would name other processes, or none. */
uint64_t sluice__rt_pid_ns(void)
{
    uint64_t v = atomic_load_explicit(&pidns_id, memory_order_relaxed);
    if (v) return v;
    pthread_once(&atfork_once, register_atfork); /* a child reads its own */
    struct stat sb;
    if (stat("/proc/self/ns/pid", &sb) != 0) return 0;
    v = (uint64_t)sb.st_ino;
    atomic_store_explicit(&pidns_id, v, memory_order_relaxed);
    return v;
}

/* The calling thread's identity for the counter stripes: its tid (bits
 * 0-21), its process's pid (22-43; Linux's pids stay below 2^22) and the
 * low 20 bits of the thread's start time (44-63), so that a tid reused, in
 * this process or another, is told from the owner it had (as sluice__rt_gone() tells
 * a reused pid). */
static uint64_t tid_self(void)
{
    if (tid_id) return tid_id;
    pthread_once(&atfork_once, register_atfork); /* forget it in a child */
    const pid_t pid = getpid(), tid = (pid_t)syscall(SYS_gettid);
    tid_id = (proc_start(tid, NULL) & 0xfffffu) << 44 | ((uint64_t)(uint32_t)pid & 0x3fffffu) << 22 |
             ((uint64_t)(uint32_t)tid & 0x3fffffu);
    return tid_id;
}

/* Whether the thread with identity id (tid_self) is gone: no such thread
 * in its process (tgkill), a zombie (a process's first thread, exited or
 * killed and not yet reaped), or a tid now another thread's. */
static bool tid_gone(uint64_t id)
{
    const pid_t tid = (pid_t)(id & 0x3fffffu), pid = (pid_t)(id >> 22 & 0x3fffffu);
    if (tid <= 0 || pid <= 0) return true;
    if (syscall(SYS_tgkill, (long)pid, (long)tid, 0L) == -1 && errno == ESRCH) return true;
    char state;
    const uint64_t start = id >> 44, now = proc_start(tid, &state);
    if (state == 'Z' || state == 'X') return true;
    return start != 0 && now != 0 && (now & 0xfffffu) != start;
}

/* Take lock word *w for id me.  Returns true when it was taken from a dead
 * holder (the caller repairs what it guards).  Bound: head comment. */
bool sluice__rt_lock_word(_Atomic uint64_t *w, uint64_t me)
{
    uint64_t v = 0;
    if (atomic_compare_exchange_strong_explicit(w, &v, me, memory_order_acquire,
                                                memory_order_relaxed))
        return false;
    for (unsigned n = 0;; n++) {
        v = atomic_load_explicit(w, memory_order_relaxed);
        if (v == 0) {
            if (atomic_compare_exchange_weak_explicit(w, &v, me, memory_order_acquire,
                                                      memory_order_relaxed))
                return false;
            continue;
        }
        if (n >= 64 && sluice__rt_gone(v, (n & 3) == 3) &&
            atomic_compare_exchange_strong_explicit(w, &v, me, memory_order_acquire,
                                                    memory_order_relaxed))
            return true;
        sluice__backoff(n);
    }
}

/* The kernel's boot id (/proc/sys/kernel/random/boot_id), or "". */
void sluice__rt_boot_id(char out[40])
{
    memset(out, 0, 40);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, 39);
    close(fd);
    if (n <= 0) n = 0;
    out[n] = 0;
    char *nl = strchr(out, '\n');
    if (nl) *nl = 0;
}

/* ---- the counter stripes (head comment: Statistics) --------------------- */


/* A stripe of r's region for the calling thread (identity me): one it owns
 * already (through another handle, or before a reattach), else a free one,
 * else one whose owner is gone (its counts stay, and are added to); else
 * NSTRIPES, the shared stripe. */
static unsigned claim_stripe(const sluice__rtable *r, uint64_t me)
{
    rstripe *s = stripes_of(r);
    for (int pass = 0; pass < 3; pass++) {
        for (unsigned i = 0; i < NSTRIPES; i++) {
            uint64_t v = atomic_load_explicit(&s[i].owner, memory_order_relaxed);
            if (v == me) return i;
            if (pass == 0 || (v != 0 && (pass == 1 || !tid_gone(v)))) continue;
            if (atomic_compare_exchange_strong_explicit(&s[i].owner, &v, me, memory_order_acquire,
                                                        memory_order_relaxed))
                return i;
        }
    }
    return NSTRIPES;
}

/* The calling thread's stripe in r's region: remembered per thread by the
 * handle's address and the region's seed (a handle freed and another made
 * at its address, or the region made again, does not match), and checked
 * against the stripe's owner word (which its counts share a line with);
 * the handle remembered is only compared, never followed. */
static unsigned my_stripe(const sluice__rtable *r)
{
    const uint64_t me = tid_self(), s0 = r->h->seed[0], s1 = r->h->seed[1];
    unsigned j = my_next;
    for (unsigned n = 0; n < MINE; n++) {
        const my_stripe_at *m = &my_stripes[n];
        if (m->r != (uintptr_t)r || m->seed[0] != s0 || m->seed[1] != s1) continue;
        if (m->i == NSTRIPES ||
            atomic_load_explicit(&stripes_of(r)[m->i].owner, memory_order_relaxed) == me)
            return m->i;
        j = n; /* no longer ours: claim again, in its place */
        break;
    }
    const unsigned i = claim_stripe(r, me);
    my_stripes[j] = (my_stripe_at){.r = (uintptr_t)r, .seed = {s0, s1}, .i = i};
    if (j == my_next) my_next = (my_next + 1) % MINE;
    return i;
}

/* Count a decision: an admission in its shard (locked), anything else in
 * the calling thread's stripe; `elsewhere`: a refusal of a composite that
 * another limit made while this key would have admitted (a part of the
 * refusals, as counters.h's sluice__count_elsewhere). */
void sluice__rt_count_decision(sluice__rtable *r, rshard *sh, uint64_t permits, bool ok,
                               bool full, bool elsewhere)
{
    if (ok && permits) {
        bump(&sh->allowed, 1);
        const uint64_t v = atomic_load_explicit(&sh->pallowed, memory_order_relaxed);
        atomic_store_explicit(&sh->pallowed, sluice__sat_add(v, permits), memory_order_relaxed);
        return;
    }
    const unsigned i = my_stripe(r);
    rstripe *s = &stripes_of(r)[i];
    const bool own = i < NSTRIPES;
    if (permits == 0) {
        sluice__stripe_add(&s->probes, 1, own);
    } else {
        sluice__stripe_add(&s->denied, 1, own);
        sluice__stripe_add(&s->pdenied, permits, own);
        if (elsewhere) {
            sluice__stripe_add(&s->elsewhere, 1, own);
            sluice__stripe_add(&s->pelsewhere, permits, own);
        }
    }
    if (full) sluice__stripe_add(&s->refused, 1, own);
}
