/* region_table.c -- a table in memory that several processes share.
 *
 * nginx workers, gunicorn, PHP-FPM: N processes with a table each get N
 * times the limit.  This table lives in a region the caller maps into every
 * process (nginx's shared zone, mapped before fork; or a named region,
 * shm_open or a file, that unrelated processes attach), and every process
 * decides on the same keys.  The algorithms are the library's rows
 * (internal.h) on the same states as everywhere else; what is here is the
 * placement, the locking and the crash argument.
 *
 * Layout: no pointers, only offsets from the region's start (each process
 * maps it at its own address); nothing is allocated after creation.
 *
 *   header   512 bytes   init word, magic, layout version (5), the
 *                        canonical spec it was made with (its origin:
 *                        the layout's), max_keys, max_key_bytes, flags,
 *                        the sizes below, the SipHash seed, the boot id,
 *                        the count of keys; on a line of their own, the
 *                        current configuration's epoch, the changes' lock
 *                        word and floor (below), where the configurations
 *                        lie
 *   shards   128 bytes   S of them (one per 256 keys, up to 64): a lock
 *                        word, a sequence word (odd while held: the read,
 *                        below), the count of keys, a lower bound on the
 *                        earliest rest time, the latest time an admission
 *                        showed it, the admission counters
 *   slots    stride      S x cap of them; shard k's are a linear-probing
 *                        array of cap = ecap * 4/3 + 1 slots for at most
 *                        ecap keys (load <= 0.75; ecap = max_keys / S plus
 *                        6 standard deviations of a random spread, as
 *                        table.c), the key's home ((tag * cap) >> 32) and
 *                        shard (the top bits) from its SipHash-1-3 under
 *                        the region's seed, so chosen keys cannot flood a
 *                        probe run in any process
 *
 *   slot:  0  header word   kind (empty, live, tombstone) | the active copy
 *                           (0/1) | key length | tag (hash's low 32 bits)
 *          8  epochs        the configuration each copy's state is under
 *                           (32 bits each: copy 0's low, copy 1's high)
 *         16  key           max_key_bytes, rounded up to 16 (16 at least:
 *                           a longer key is held by its 16-byte digest,
 *                           length code SLUICE__DIGEST_LEN; table.h)
 *          .  copy 0, copy 1 the state, twice: 16 bytes each when it packs
 *                           (limiter.c's 16-byte form), for the window
 *                           logs the ring's header (t_last, base, head,
 *                           len) and a summary of the ring for the read
 *                           (its newest entry and 8 oldest: 176 bytes),
 *                           else a whole sluice__state (48)
 *          .  ring          sliding-log and sliding-wheel: ring_cap
 *                           entries of 16 bytes, ring_cap the power of two
 *                           above min(N, L) (window_log.c: at most min(N,
 *                           L) entries are ever held), at most 65536
 *   configs  144 bytes   CFG_K = 8 of them, after the slots: the last
 *                        configurations (epoch, time of the change, the
 *                        canonical spec), epoch e at e % CFG_K
 *   stripes   64 bytes   NSTRIPES = 128 + 1 of them, last (from the next
 *                        multiple of 64): the counts of refusals, probes
 *                        and refusals for want of room, a line per thread
 *                        (Statistics, below), the last one shared
 *
 * So a token-bucket key with keys of up to 16 bytes costs a 64-byte slot,
 * about 100 bytes a key all-in; a sliding-log 10/s key about 1 KiB, a
 * sliding-log 100/s key 3 KiB.
 *
 * Locking.  Each shard has one lock word: 0, or its holder's identity (pid
 * and the low 31 bits of the process's start time, from /proc).  An
 * admission (and a request that must make its key) locks its key's shard,
 * looks the key up, decides, unlocks: one compare-and-swap, and a store
 * each to the sequence (odd after the lock, even before the unlock) and to
 * the lock word.  A refusal or a probe reads the shard without the lock
 * instead ("Refusals and probes are reads", below).  A waiter spins 64
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
 * Crash argument (a process killed by SIGKILL at any instruction).  What a
 * process writes into the region, and why every prefix of it is a valid
 * table:
 *
 *  1. A decision on a held key writes the inactive copy of its state, then
 *     flips the active bit of the slot's header word: one aligned 8-byte
 *     store (release order).  Killed before the flip, the key keeps its old
 *     state (the decision is lost); after it, the new.  No holder reads the
 *     inactive copy (a read without the lock may, as it becomes inactive
 *     under it: that read's recheck fails).  The window logs also write their ring: a new
 *     entry past the held ones (the ring's capacity exceeds the most it
 *     holds, so that place is outside what the old header covers), or the
 *     newest entry's running total in place (one 8-byte store); killed
 *     before the flip, the old header then counts that admission's permits
 *     (the lost decision was charged, never under-counted).
 *  2. A new key: its bytes and its first state (copy 0) are written into a
 *     slot whose header says empty or tombstone, then the header is stored
 *     live: one store.  Before it, nothing reads those bytes.
 *  3. Dropping a key (remove, reclaiming, eviction) stores its header as a
 *     tombstone, then turns tombstones back into empty slots from the
 *     dropped one backwards while the slot after is empty: each of those
 *     stores leaves a valid probe array (a tombstone followed by an empty
 *     slot ends every probe that reaches it, as an empty slot does).  No
 *     key ever moves (no Robin Hood shifting, whose half-done shift could
 *     not be told from a finished one).
 *  4. Counts: the shard's count of keys and admission counters are
 *     written after the store they count, a refusal's count in its
 *     thread's stripe after the read that decided it (one 8-byte store per
 *     count); the region's count of keys (max_keys) is taken before a new
 *     key is stored and given back after a key is dropped.  A kill between
 *     can leave them off by one.
 *
 *  5. The shard's sequence: odd from just after the lock to just before
 *     the unlock.  A holder killed between leaves it odd (the read, below,
 *     then goes to the lock); killed outside, even, with nothing of the
 *     hold half-done.  The waiter that takes the lock over stores it odd
 *     (the same value when it is: it never goes down), and its unlock
 *     stores it even, 2 past.
 *
 * So a killed process leaves its shard's lock held and, at worst, its own
 * decision lost and the counts off.  The waiter that takes the lock from
 * the dead holder repairs the shard before using it: counts the live slots
 * again, forgets the rest-time bound (it sweeps at its next need), and for
 * the window logs commits each key's state again (below: the summaries).
 * Then, with no lock held, it locks every shard in order (repairing any
 * other that a dead process holds) and sets the region's count of keys to
 * the sum of the shards' counts, exact again since nothing changes them
 * while every shard is held.  Keys other than the one being decided are
 * never written by a decision, so no other key is touched; the key being
 * decided keeps its last complete state.
 *
 * Refusals and probes are reads (docs/decisions.md, section 1: only an
 * admission changes a limiter).  A decision, and a peek, is first read
 * without the lock (decide_read, read_key): no compare-and-swap, no locked
 * instruction, no store to the shard -- not the lock word, not the
 * sequence, not a slot.  A refusal or a probe then stores only its count,
 * in the calling thread's own counter stripe (Statistics, below): a line
 * no other thread writes, as an in-process table counts.  If the read
 * finds a refusal or a probe, that is the answer; anything else (an admission, a
 * key to make, a read that met holders READ_TRIES times) is decided under
 * the lock as before.  The read:
 *
 *   v = the shard's sequence (acquire); odd: a holder runs -- pause, again
 *   the region's epoch; the probe run of the key's slots (header words) and
 *     each candidate's key words; for the key, the epoch and the state
 *     words of the copy its header's bit names (for a window log, its
 *     header and summary: never the ring); for a key not held, the shard's
 *     count, due and now
 *   the sequence again, after an acquire fence: still v -- a snapshot;
 *     else read again (at most READ_TRIES times, then the lock)
 *   on the snapshot (snap_state): a key under an older configuration, or
 *     a handle that has not parsed the current one, goes to the lock; else
 *     the algorithm's decide on a copy of the state (a window log's:
 *     sluice__log_read on its summary, below) -- a refusal or a probe is
 *     the answer, an admission goes to the lock
 *
 * Why an answer given is the one the locked path would have given at an
 * instant of the read.  (1)-(3) The read is base/seqlock.h's protocol, and
 * its proof is there: every field read so -- a slot's header, epochs, key
 * words and state words, a shard's count, due and now -- is stored only by
 * a holder (PUT, or the _Atomic fields' stores of its order) and loaded
 * with GET, each with the field's own size; no store overlaps another
 * field's bytes (keys are stored and compared in zero-padded 8-byte words,
 * states in 8-byte words); the hold's odd store is shard_lock's
 * sluice__seq_hold.  So when the recheck reads v, every load read what the
 * shard held from v's unlock to the recheck: one state of the shard,
 * unchanged for the whole read, whatever order the loads ran in.  (4) Only that snapshot is decided on, after the recheck; a read that
 * mixed states is thrown away before anything is decided.  Before the
 * recheck the loads may mix states, and stay bounded anyway: the probe run
 * is cut at cap slots, a key is compared up to the length its header says
 * (at most max_key_bytes, as a holder stored it), nothing read is used as
 * a pointer.  (5) On the snapshot the read does what decide_locked does:
 * the same lookup (find(): the key's slot, or absent at an empty slot);
 * the same state (the copy the header's bit names -- a commit writes the
 * other copy, then flips); the same configuration (the epoch loaded during
 * the read, as a holder loads it; a key under an older one goes to the
 * lock, which carries it over and commits); for a key not held, a fresh
 * limiter's probe or refusal, or, for a new key that would need room,
 * full_read: what make_room and reclaim_others would find -- the shard or
 * the region full, no shard with a key due by the shard's time, no
 * eviction (the other shards' due and the region's count are read as the
 * locked path reads them, without their locks: each true when read).  The
 * locked path writes nothing else for these (the shard's `now` moves only
 * for an admission or a new key).  (6) The profile decided under is a
 * parsed configuration this handle made and published (read_prof), never
 * changed while published and not freed while the read's reader section
 * runs; never the region's text of a spec, which a change may rewrite.
 *
 * An admission read so is not thrown away: the caller takes the lock, and
 * if the sequence it finds is still v (no hold since the read: every hold
 * leaves it 2 higher, and a taken-over lock is excluded) and the epoch is
 * the read's, the shard is exactly the snapshot, so the admission decided
 * on it is the locked path's: its state is committed at once (crash
 * argument 1), without a second lookup.  Else the locked path decides.
 *
 * A holder killed mid-hold (crash argument 5) leaves its shard's sequence
 * odd: reads of that shard meet it READ_TRIES times and go to the lock,
 * where the waiter takes the lock over, repairs the shard and decides;
 * its unlock makes the sequence even, 2 past the odd value: one no read
 * has begun with.  A read that began at v before the holder died and saw
 * some of its stores meets the odd value or a later one at its recheck, as
 * in (3): the takeover stores nothing lower.  What the dead holder left
 * half-written is never in a snapshot: an inactive copy and its epoch
 * (the header's bit names the other), a new key's bytes (its header is
 * not live yet) -- crash arguments 1-3, which make every prefix of a hold
 * a valid table; and the counts it left off are repaired under the lock
 * as before.  Killed before its odd store or after its even one, it left
 * the sequence even and the shard whole: reads go on, and the lock waits
 * for the next writer to take it over.
 *
 * The window logs (sliding-log, sliding-wheel): window_log.c writes their
 * ring entries in place, with plain stores, so the read never loads the
 * ring (that would race).  Each state copy carries a summary of the ring
 * instead, written with the copy (PUT, before the flip): the newest entry
 * and the 8 oldest, what a limiter publishes for its own lock-free
 * refusals (window_log.h).  The read fills a publication in its own
 * memory from the snapshot and asks sluice__log_read, whose proof
 * (window_log.c's head comment) gives the locked decision's answer exactly
 * from such a summary, or none -- an admission, or a window cut past the 8
 * oldest entries: then the lock.  A peek asks it for the room (a probe),
 * then for the refusal when the permits do not fit; the rest time needs
 * only the newest entry.  One thing differs from the state the lock reads:
 * a holder killed after adding permits to the newest entry in place and
 * before its flip (crash argument 1) leaves the ring counting them and the
 * summary not; so the takeover's repair commits every key of the shard
 * again (its own state, its own configuration: one flip each), and reads
 * see the shard only after that (its sequence is odd until the unlock).
 *
 * A handle parses the current configuration at attach, and a new one
 * (after a change of spec) at its first decision under it, under the
 * lock.  A composite decision (below) still holds the shard locks of its
 * region keys, refusals included: it must judge every limit at one
 * instant.
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
 *
 * Initialisation: the header's init word goes 0 (a zeroed region) -> busy
 * (holder's identity; a compare-and-swap, so one process wins) -> ready,
 * after every field and shard is written.  Others wait (bounded as above);
 * if the initialiser dies, a waiter takes the word from it and initialises
 * again (only the header, the shards and the configurations are written:
 * idempotent on a zeroed region).  Attaching to a ready region compares
 * magic, layout version, the current canonical spec (below), max_keys,
 * max_key_bytes, the policy and the size, and
 * refuses any difference with a message naming both values; and the boot
 * id: a file outlives a reboot, the monotonic clock its times are on does
 * not.
 *
 * Damage (include/sluice.h, "What a damaged region can do").  Processes
 * trust each other, but what one reads from the region is checked before it
 * is used as a length, an index, a count of steps or a holder, so that a
 * damaged region gives wrong answers, never a crash, a hang, growth or a
 * write outside it.  Offsets and sizes come from the handle's own layout
 * (made from the arguments; the header's copies are compared at attach,
 * cfg_off among them, and never used).  A slot's key length above
 * max_key_bytes is no key (scan); a probe run stops at cap slots; a free
 * slot that the counts promised and the probe does not find refuses the
 * key (no_slot: the place given back, the shard recounted); a key whose
 * epoch is ahead of the region's, or CFG_K or more behind (the floor keeps
 * it within), is decided under the current configuration without a
 * carry-over (key_load); a ring's head and length are cut to its capacity
 * (state_load); a configuration's text that does not fit the layout is
 * read as the origin's (prof_fits); a handle keeps CFG_K parsed
 * configurations and those retired meanwhile (prof), whatever epochs it
 * sees; a lock word whose start time is 0 while its pid's /proc answers is a damaged word, taken over (gone: every process of a
 * region sees /proc, or none).  A word naming a live process at its true
 * start time cannot be told from a holder: it stalls its shard, as a
 * SIGSTOPped holder does.  The header records the maker's pid namespace
 * (the inode of /proc/self/ns/pid); attaching from another is refused (its
 * pids would name other processes).  An init word of 0 over a header that
 * is not zero is refused, not initialised over.  sluice_table_open makes
 * its object with O_EXCL, never through a symbolic link, and refuses one
 * that is not a regular file, is another user's, or is writable by others;
 * its flock is waited on for at most 10 s.
 *
 * Composite decisions (composite.c holds, judges, commits, releases; the
 * functions are near the end).  A composite holds the shard locks of its
 * region keys first, ordered by (region identity, shard) -- the identity is
 * the 128-bit random seed in the header, the same in every process however
 * it maps the region, so every process takes shard locks in one order and
 * no cycle of waiters can form across processes; then its in-process limits
 * by address (a region lock is never awaited while an in-process one is
 * held, so threads waiting on each other inside one process cannot close a
 * cycle through the region either).  Then, with every limit held: the
 * keys are found and judged on copies (the window logs measure their ring
 * without writing); if every limit allows, new keys are made -- each
 * published at once with a fresh state (crash argument 2: a key at rest) --
 * then each key's decided state is committed as a single decision commits
 * it (crash argument 1); if any step refuses, the made keys are dropped
 * (crash argument 3).  Room for a new key: the shard is swept only when no
 * other part of the call holds it, and the policy evicts only after the
 * other shards were swept with nothing held, as for single decisions.
 *
 * Dead holders during a composite: each shard lock it waits for is taken
 * over from a dead holder and repaired as above, whatever else the call
 * holds (a repair touches only that shard); the region's count of keys is
 * resynchronised after the call has released everything (resync takes
 * every shard, so it must hold nothing).  A composite killed while holding
 * several shard locks leaves each to be taken over alone.  Killed during
 * its commit, it leaves the keys before the kill charged and the rest not,
 * each key whole (one flip each): that one request's permits lost on some
 * of its limits -- a request charged and never served, never an admission
 * the contract would refuse -- plus, at worst, a fresh key it made (at
 * rest: reclaimable) and the counts that the repair sets right.
 *
 * Changing the spec (sluice__rtable_reconfigure_at; reconfigure.c's rule,
 * docs/decisions.md 3.8).  The region is the source of truth: processes
 * hold handles, each with the profiles it parsed, and a change made
 * through any handle must reach all of them -- nginx's old workers keep
 * deciding on the same region during a graceful reload.  So the region
 * keeps the configuration: epoch E (the number of changes so far) and the
 * last CFG_K configurations with the time of each change.  A change, under
 * the changes' lock word (taken over from a dead changer like a shard
 * lock): parses and checks the new spec against the current one (the same
 * algorithm and the checks of reconfigure.c; a packed origin's 16-byte
 * copies must still hold it; a window log's min(N', L') + 2 must fit the
 * rings the region was made with: one entry a carry-over may add for
 * retired permits, one an admission writes past the held ones), writes
 * configuration E + 1 in its place, then publishes it by storing the
 * epoch (release), then forgets every shard's rest-time bound (rest times
 * may come sooner).  Nothing else is visited.
 *
 * Every decision loads the epoch once (acquire; a word only changes
 * write, so it stays in every core's cache) after locking its shard, and
 * finds the handle's parsed profile of that epoch (a tag check; parsed from
 * the region the first time, under a handle mutex).  A key whose copy says
 * an older epoch e first carries its state over every change after e, in
 * order, each at its time (sluice__reconfigure_state: the carry-over a
 * single limiter makes, clamped to the key's latest admission), and
 * commits that (crash argument 1: one flip; killed before it, the key is
 * carried again next time, the same way).  New keys start under E.  So
 * every key is decided exactly as if each change had been applied to it at
 * its time, in every process.
 *
 * Forgetting: configuration E + 1 takes the place of E + 1 - CFG_K.  The
 * header's floor is a lower bound on every key's epoch; when it would be
 * forgotten (floor <= E + 1 - CFG_K), the change first brings every key of
 * every shard forward to E (one shard locked at a time) and sets floor = E.
 * So a key's epochs, and those of any decision holding a shard lock, are
 * always remembered -- exactly, at the cost of one pass over the slots
 * every CFG_K - 1 changes; a handle's parsed profile of epoch e is
 * replaced (by e + CFG_K) only once no shard holder can be under e.
 * Epochs are 32-bit per copy: a region takes 2^32 - 2 changes.  A ring
 * full after several changes that each lengthen the window (no admission
 * between) merges its two oldest entries before a carry-over (the older
 * permits then count at the later slot: never fewer counted).
 *
 * Attaching compares the caller's spec with the region's CURRENT one (so a
 * process started after a change -- nginx after a reload -- attaches with
 * the new spec, and one with the old spec is refused, naming both), and the
 * sizes with the layout of the spec the region was made with.  A changer
 * killed after publishing leaves the rest-time bounds as they were: a full
 * region may refuse a new key that a sweep would have made room for, until
 * those keys' old rest times pass.
 *
 * Reclaiming keys at rest: lazily, when a new key finds its shard (or the
 * table) full: the shard's slots are swept for keys whose rest time has
 * passed, unless its lower bound on the earliest rest time (kept by every
 * new key; admissions only move rest times later) says none can be; the
 * other shards are swept too (one at a time, nothing held) before a refusal.
 * Then the policy: refuse (SLUICE_EFULL, with a lower bound on the wait), or
 * with SLUICE_TABLE_EVICT_LRU drop the oldest of 8 sampled keys of the
 * shard.  As SLUICE_TABLE_RECLAIM_WHEN_FULL in table.c: held keys at rest
 * stay counted until room is needed.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "composite/composite.h"
#include "base/counters.h"
#include "table/region_table.h"
#include "base/spin.h"
#include "table/table.h"
#include "table/skeleton.h"
#include "alg/window_log.h"

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

#define MAGIC 0x656c626174756c73ULL /* "slutable" */
#define VERSION 5u /* 3: the shards' sequence words; 4: the counter stripes; 5: digested
                    * long keys (their length code; a key field of 16 bytes at least) */
#define CFG_K 8u /* configurations the region remembers (a power of two) */
#define EPOCH_MAX 0xfffffffeu /* changes of spec a region takes */
#define HEAD_BYTES 512
#define RING_MAX 65536u /* ring entries per key */
#define NONE UINT32_MAX

#define INIT_READY 1u
#define BUSY ((uint64_t)1 << 63)

/* A slot's header word. */
enum { K_EMPTY = 0, K_LIVE = 1, K_TOMB = 2 };
#define H_KIND(h) ((unsigned)((h) & 3u))
#define H_ACTIVE(h) ((unsigned)((h) >> 2 & 1u))
#define H_LEN(h) ((uint32_t)((h) >> 3 & 0x1fffffu))
#define H_TAG(h) ((uint32_t)((h) >> 32))
#define H_LIVE(tag, len, act) \
    ((uint64_t)(tag) << 32 | (uint64_t)(len) << 3 | (uint64_t)(act) << 2 | K_LIVE)

typedef struct rhead {
    _Atomic uint64_t init; /* 0 zeroed, BUSY | owner, INIT_READY */
    uint64_t magic;
    uint32_t version, flags;
    uint64_t need; /* bytes the layout takes */
    uint64_t max_keys, max_key_bytes;
    uint64_t seed[2];
    uint32_t nshards, cap, ecap, stride;
    uint32_t cb, ring_cap;
    char spec[SLUICE_SPEC_MAX];
    char boot[40]; /* the kernel's boot id when made ("" if unknown) */
    _Alignas(64) _Atomic uint64_t keys; /* keys held, <= max_keys */
    /* configurations: read-mostly, written only by changes of spec */
    _Alignas(64) _Atomic uint64_t epoch; /* the current configuration's number */
    _Atomic uint64_t cfg_lock;           /* 0, or a changer's identity */
    uint64_t floor; /* every key is under a configuration >= floor (cfg_lock) */
    uint64_t cfg_off; /* where the ring of configurations starts */
    uint64_t pidns;   /* the maker's pid namespace (pid_ns()), 0 if unknown */
} rhead;
_Static_assert(sizeof(rhead) <= HEAD_BYTES, "the header fits its bytes");

/* One remembered configuration, at cfg_off + (epoch % CFG_K) * its size:
 * the spec (canonical) from `at` on.  Written before `epoch` publishes it. */
typedef struct rcfg {
    uint64_t epoch;
    uint64_t at;
    char spec[SLUICE_SPEC_MAX];
} rcfg;

/* A handle's parsed copy of a remembered configuration `epoch`.  Made once
 * per epoch, published in the handle's prof[epoch % CFG_K] and never
 * changed while published.  The one it replaces (epoch - CFG_K: no holder
 * of a shard lock can be under it any more, the floor) is retired and
 * freed once no reader section that may have found it runs (table.h,
 * sluice__rd_*; the reads without a lock run in one): so a handle holds
 * at most CFG_K of them and those retired meanwhile, however many changes
 * (issue 26 5: it kept one per change until the close).  When memory runs
 * out, the handle's own slot `spare[epoch % CFG_K]` is filled in place, as
 * the locked paths may (prof()); reads never use those. */
typedef struct rprof {
    _Atomic uint64_t epoch; /* UINT64_MAX while a spare is filled */
    uint64_t at;
    sluice__profile pf;
    struct rprof *next; /* retired: the next retired */
    uint64_t stamp;     /* retired: the reader epoch it waits out */
} rprof;
_Static_assert(offsetof(rhead, keys) == 256 && offsetof(rhead, boot) == 216 &&
                   offsetof(rhead, cfg_lock) == 328 && offsetof(rhead, epoch) == 320 &&
                   offsetof(rhead, cfg_off) == 344 && offsetof(rhead, pidns) == 352 &&
                   offsetof(rhead, nshards) == 64 && offsetof(rhead, stride) == 76,
               "where tests/test_region_table.c finds them");

typedef struct rshard {
    _Alignas(64) _Atomic uint64_t lock; /* 0, or the holder's identity */
    _Atomic uint64_t seq; /* odd while held; each hold adds 2 (the read) */
    _Atomic uint64_t count; /* live slots */
    _Atomic uint64_t due; /* <= the earliest rest time of the live keys */
    uint64_t now;         /* the latest time an admission showed the shard */
    uint64_t rng;
    /* admissions (refusals and probes: the counter stripes) */
    _Atomic uint64_t allowed, pallowed;
    _Atomic uint64_t reclaimed, evicted;
} rshard;
_Static_assert(sizeof(rshard) == 128, "two cache lines a shard");

/* The counter stripes (head comment: Statistics): NSTRIPES owned by one
 * thread each, then one shared.  A line each; only its owner writes an
 * owned stripe's counts. */
#define NSTRIPES 128u
typedef struct rstripe {
    _Atomic uint64_t owner; /* 0 free, or its thread's identity (tid_self) */
    _Atomic uint64_t denied, pdenied, probes, refused;
    /* of denied and pdenied, a composite's refusals by another limit that
     * this key would have admitted (zero in a region made before) */
    _Atomic uint64_t elsewhere, pelsewhere;
    uint64_t pad_;
} rstripe;
_Static_assert(sizeof(rstripe) == 64, "a cache line a stripe");

/* The ring's header, as a copy holds it, and a summary of the ring for the
 * read without the lock (which never reads the ring: window_log.c writes
 * its entries in place): the newest entry and the FRONT oldest, as a
 * limiter publishes them (window_log.h). */
#define FRONT SLUICE__LOG_FRONT
typedef struct rring {
    uint64_t t_last, base;
    uint32_t head, len;
    uint64_t newest_slot, newest_cum; /* when len > 0 */
    sluice__log_entry front[FRONT];   /* the oldest min(len, FRONT) */
    uint64_t pad_;
} rring;
_Static_assert(sizeof(rring) % 16 == 0, "copies stay 16-byte aligned");

/* Everything the arguments decide, computed alike by every process. */
typedef struct layout {
    sluice__profile pf;
    bool ring;
    uint64_t max_keys, max_key_bytes;
    uint32_t nshards, shard_bits, cap, ecap, cb, ring_cap;
    size_t stride, key_off, copy_off, ring_off, slots_off, cfg_off, stripes_off, need;
    char spec[SLUICE_SPEC_MAX];
} layout;

struct sluice__rtable {
    layout L; /* from the spec the region was made with (its origin) */
    _Atomic(rprof *) prof[CFG_K];
    rprof spare[CFG_K];      /* when memory runs out (rprof) */
    rprof *retired;          /* replaced, waiting for the readers (prof_mu) */
    pthread_mutex_t prof_mu; /* fills prof[] */
    unsigned flags;
    rhead *h;
    rshard *sh;
    unsigned char *slots;
    void *map; /* sluice_table_open's mapping, unmapped on close */
    size_t map_len;
    uint64_t dseed[2]; /* long keys' digest key, from the region's seed (table.h) */
};

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

static _Atomic uint64_t self_id; /* 0 until asked, and again in a child */
static _Atomic uint64_t pidns_id; /* pid_ns(): likewise */
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
    atomic_store_explicit(&self_id, 0, memory_order_relaxed);
    atomic_store_explicit(&pidns_id, 0, memory_order_relaxed);
    tid_id = 0;
    memset(my_stripes, 0, sizeof my_stripes);
}
static void register_atfork(void) { (void)pthread_atfork(NULL, NULL, forget_self); }

/* The low 31 bits of a start time that /proc gave (start != 0), never 0:
 * a lock word whose start bits are 0 names a process that could not read
 * /proc (gone(): one that can is not it). */
static inline uint64_t start31(uint64_t start)
{
    start &= 0x7fffffffu;
    return start ? start : 1;
}

static inline uint64_t id_of(pid_t pid, uint64_t start)
{
    return (start ? start31(start) : 0) << 32 | (uint32_t)pid;
}

/* This process's identity for lock words: pid | low start-time bits << 32. */
static uint64_t self(void)
{
    uint64_t v = atomic_load_explicit(&self_id, memory_order_relaxed);
    if (v) return v;
    pthread_once(&atfork_once, register_atfork);
    pid_t pid = getpid();
    v = id_of(pid, proc_start(pid, NULL));
    atomic_store_explicit(&self_id, v, memory_order_relaxed);
    return v;
}

/* Whether the process with identity id is gone: no such pid, or (when
 * `look`, as the /proc read costs more) a zombie -- killed, not yet reaped
 * by its parent, which kill() still finds -- or a pid now another
 * process's. */
static bool gone(uint64_t id, bool look)
{
    pid_t pid = (pid_t)(uint32_t)id;
    if (pid <= 0) return true; /* no process has it */
    if (pid == getpid()) return (id >> 32) != (self() >> 32); /* us, or our pid reused */
    if (kill(pid, 0) == -1 && errno == ESRCH) return true;
    if (!look) return false;
    char state;
    uint64_t start = id >> 32, now = proc_start(pid, &state);
    if (state == 'Z' || state == 'X') return true;
    /* start 0: a holder that could not read /proc; but its pid's /proc
     * answers, so that pid is not it (every process of a region sees
     * /proc, or none does: head comment) -- a damaged word, never awaited */
    if (start == 0) return now != 0;
    return now != 0 && start31(now) != start; /* the pid was reused */
}

/* This process's pid namespace: the inode of /proc/self/ns/pid (read
 * once), or 0 when it cannot be read.  A region records its maker's; a
 * process of another namespace is refused (attach): the pids in its lock
 * words would name other processes, or none. */
static uint64_t pid_ns(void)
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
 * this process or another, is told from the owner it had (as gone() tells
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
static bool lock_word(_Atomic uint64_t *w, uint64_t me)
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
        if (n >= 64 && gone(v, (n & 3) == 3) &&
            atomic_compare_exchange_strong_explicit(w, &v, me, memory_order_acquire,
                                                    memory_order_relaxed))
            return true;
        sluice__backoff(n);
    }
}

/* The kernel's boot id (/proc/sys/kernel/random/boot_id), or "". */
static void boot_id(char out[40])
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

/* ---- layout ------------------------------------------------------------- */

static inline size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

static int make_layout(const char *spec, size_t max_keys, size_t max_key_bytes, layout *L,
                       char *err, size_t errlen)
{
    memset(L, 0, sizeof *L);
    if (sluice__spec_parse(spec, &L->pf, err, errlen) != 0) return SLUICE_EINVAL;
    if (max_keys < 1 || max_keys > ((size_t)1 << 32)) {
        sluice__errf(err, errlen, "bad max_keys %zu: expected 1 .. 2^32", max_keys);
        return SLUICE_EINVAL;
    }
    if (max_key_bytes > SLUICE_MAX_KEY_BYTES) {
        sluice__errf(err, errlen, "bad max_key_bytes %zu: expected 0 .. %d", max_key_bytes,
                     SLUICE_MAX_KEY_BYTES);
        return SLUICE_EINVAL;
    }
    const sluice__profile *pf = &L->pf;
    L->max_keys = max_keys;
    L->max_key_bytes = max_key_bytes;
    L->ring = pf->alg == SLUICE__SLIDING_LOG || pf->alg == SLUICE__SLIDING_WHEEL;
    if (L->ring) {
        const uint64_t bound = sluice__min_u64(pf->slots, pf->limit);
        if (bound >= RING_MAX) {
            sluice__errf(err, errlen,
                         "%s keeps up to min(N, L) = %llu ring entries per key; a shared table "
                         "holds at most %u (1 MiB per key): lower LIMIT or slots",
                         pf->ops->name, (unsigned long long)bound, RING_MAX - 1);
            return SLUICE_EINVAL;
        }
        uint32_t c = 4;
        while (c < bound + 1) c *= 2; /* room beyond the most held: crash argument 1 */
        L->ring_cap = c;
        L->cb = sizeof(rring);
    } else {
        L->cb = pf->packed ? 16 : (uint32_t)round16(sizeof(sluice__state));
    }
    L->key_off = 16; /* beside the header: a short key's read is one line */
    /* a key longer than max_key_bytes is held by its 16-byte digest */
    L->copy_off = L->key_off + round16(max_key_bytes > SLUICE__DIGEST_BYTES ? max_key_bytes
                                                                            : SLUICE__DIGEST_BYTES);
    L->ring_off = L->copy_off + 2 * (size_t)L->cb;
    L->stride = L->ring_off + (size_t)L->ring_cap * sizeof(sluice__log_entry);
    uint64_t ecap; /* skeleton.h: as in process, at a load of at most 0.75 */
    sluice__table_sizing(max_keys, &L->shard_bits, &ecap);
    L->nshards = 1u << L->shard_bits;
    L->ecap = (uint32_t)ecap;
    L->cap = sluice__table_cap(ecap, 3);
    L->slots_off = HEAD_BYTES + (size_t)L->nshards * sizeof(rshard);
    const u128 cfg_end = (u128)L->slots_off + (u128)L->nshards * L->cap * L->stride +
                         (u128)CFG_K * sizeof(rcfg);
    const u128 need = ((cfg_end + 63) & ~(u128)63) + (u128)(NSTRIPES + 1) * sizeof(rstripe);
    if (need > ((u128)1 << 46)) {
        sluice__errf(err, errlen,
                     "a region for %zu keys of %zu bytes under \"%s\" would take more than 64 TiB",
                     max_keys, max_key_bytes, spec);
        return SLUICE_EINVAL;
    }
    L->need = (size_t)need;
    L->stripes_off = L->need - (size_t)(NSTRIPES + 1) * sizeof(rstripe);
    L->cfg_off = (size_t)cfg_end - (size_t)CFG_K * sizeof(rcfg);
    if (sluice__spec_format(pf, L->spec, sizeof L->spec) < 0) {
        sluice__errf(err, errlen, "cannot format the spec \"%s\"", spec);
        return SLUICE_EINVAL;
    }
    return 0;
}

size_t sluice_table_region_size(const char *spec, size_t max_keys, size_t max_key_bytes,
                                char *err, size_t errlen)
{
    layout L;
    if (make_layout(spec, max_keys, max_key_bytes, &L, err, errlen) != 0) return 0;
    return L.need;
}

/* ---- slots -------------------------------------------------------------- */

static inline unsigned char *slot_at(const sluice__rtable *r, uint32_t k, uint32_t i)
{
    return r->slots + ((size_t)k * r->L.cap + i) * r->L.stride;
}
static inline _Atomic uint64_t *hdr_of(unsigned char *s) { return (_Atomic uint64_t *)s; }
static inline uint64_t hdr_get(unsigned char *s)
{
    return atomic_load_explicit(hdr_of(s), memory_order_acquire);
}
static inline void hdr_set(unsigned char *s, uint64_t v)
{
    atomic_store_explicit(hdr_of(s), v, memory_order_release);
}
static inline unsigned char *copy_of(const sluice__rtable *r, unsigned char *s, unsigned c)
{
    return s + r->L.copy_off + (size_t)c * r->L.cb;
}

/* A fresh state of profile pf for slot s (the window logs' ring is s's). */
static void state_fresh(const sluice__rtable *r, const sluice__profile *pf, unsigned char *s,
                        sluice__state *st)
{
    sluice__state_init(pf, st);
    if (r->L.ring) {
        st->u.log.e = (sluice__log_entry *)(void *)(s + r->L.ring_off);
        st->u.log.cap = r->L.ring_cap;
        st->u.log.fixed = 1;
    }
}

/* The configuration a copy of slot s is under: the second word holds copy
 * 0's epoch in its low half, copy 1's in its high half. */
static inline uint32_t *epoch_word(unsigned char *s, unsigned c)
{
    return (uint32_t *)(void *)(s + 8 + 4 * c);
}
static inline uint32_t slot_epoch(unsigned char *s, unsigned c) { return GET(epoch_word(s, c)); }

/* A state as the words a copy holds: STATE_WORDS words of 8 bytes, the
 * packed form's two or a whole sluice__state's (padding zeroed). */
#define STATE_WORDS ((sizeof(sluice__state) + 7) / 8)
typedef union swords {
    sluice__state st;
    uint64_t w[STATE_WORDS];
} swords;
#define RING_WORDS (sizeof(rring) / 8)
#define RING_HEAD_WORDS (offsetof(rring, front) / 8) /* all but the front */
_Static_assert(offsetof(rring, front) % 8 == 0, "the front starts on a word");
typedef union rwords {
    rring g;
    uint64_t w[RING_WORDS];
} rwords;
#define SNAP_WORDS (RING_WORDS > STATE_WORDS ? RING_WORDS : STATE_WORDS)

/* The key of a slot: keylen bytes in 8-byte words, the last zero-padded,
 * each stored with PUT (the read compares them with GET). */
static void key_write(const sluice__rtable *r, unsigned char *s, const void *key, size_t keylen)
{
    uint64_t *d = (uint64_t *)(void *)(s + r->L.key_off);
    const unsigned char *k = key;
    keylen = sluice__key_bytes(keylen);
    for (size_t i = 0; i < keylen; i += 8) {
        uint64_t w = 0;
        memcpy(&w, k + i, keylen - i < 8 ? keylen - i : 8);
        PUT(&d[i / 8], w);
    }
}

/* The state of slot s, whose header word is h, under its profile pf. */
static void state_load(const sluice__rtable *r, const sluice__profile *pf, unsigned char *s,
                       uint64_t h, sluice__state *st)
{
    const unsigned char *c = copy_of(r, s, H_ACTIVE(h));
    if (r->L.pf.packed) { /* the layout's form: 16 bytes a copy */
        uint64_t w[2];
        memcpy(w, c, sizeof w);
        sluice__state_unpack(pf, w, st);
    } else if (r->L.ring) {
        rring g;
        memcpy(&g, c, sizeof g);
        state_fresh(r, pf, s, st);
        st->t_last = g.t_last;
        st->u.log.base = g.base;
        /* from the region: within the ring, whatever it says */
        st->u.log.head = g.head & (r->L.ring_cap - 1);
        st->u.log.len = g.len <= r->L.ring_cap ? g.len : r->L.ring_cap;
    } else {
        memcpy(st, c, sizeof *st);
    }
}

/* Write st, of profile pf and configuration epoch, into copy c of slot s
 * (not the active one). */
static void state_write(const sluice__rtable *r, const sluice__profile *pf, unsigned char *s,
                        unsigned c, const sluice__state *st, uint32_t epoch)
{
    unsigned char *d = copy_of(r, s, c);
    uint64_t *dw = (uint64_t *)(void *)d;
    if (r->L.pf.packed) { /* word by word, as the read loads them */
        uint64_t w[2];
        sluice__state_pack(pf, st, w);
        PUT(&dw[0], w[0]);
        PUT(&dw[1], w[1]);
    } else if (r->L.ring) {
        const sluice__log *lg = &st->u.log;
        rwords u;
        memset(&u, 0, sizeof u);
        u.g.t_last = st->t_last;
        u.g.base = lg->base;
        u.g.head = lg->head;
        u.g.len = lg->len;
        for (uint32_t i = 0; i < lg->len && i < FRONT; i++)
            u.g.front[i] = lg->e[(lg->head + i) & (lg->cap - 1)];
        if (lg->len) {
            const sluice__log_entry *n = &lg->e[(lg->head + lg->len - 1) & (lg->cap - 1)];
            u.g.newest_slot = n->slot;
            u.g.newest_cum = n->cum;
        }
        for (size_t i = 0; i < RING_WORDS; i++) PUT(&dw[i], u.w[i]);
    } else {
        swords u;
        memset(&u, 0, sizeof u);
        u.st = *st;
        for (size_t i = 0; i < STATE_WORDS; i++) PUT(&dw[i], u.w[i]);
    }
    PUT(epoch_word(s, c), epoch);
}

/* Commit st to slot s (header h): the inactive copy and its epoch, then
 * the flip.  Returns the new header word. */
static uint64_t state_commit(const sluice__rtable *r, const sluice__profile *pf,
                             unsigned char *s, uint64_t h, const sluice__state *st,
                             uint32_t epoch)
{
    state_write(r, pf, s, H_ACTIVE(h) ^ 1u, st, epoch);
    hdr_set(s, h ^ (1u << 2));
    return h ^ (1u << 2);
}

/* ---- configurations ----------------------------------------------------- */

static inline rcfg *cfg_at(const sluice__rtable *r, uint64_t epoch)
{
    return (rcfg *)(void *)((unsigned char *)r->h + r->L.cfg_off) + (epoch & (CFG_K - 1));
}

/* The current configuration's number: one load of a word only changes
 * write. */
static inline uint64_t epoch_now(const sluice__rtable *r)
{
    return atomic_load_explicit(&r->h->epoch, memory_order_acquire);
}

/* This handle's parsed configuration `epoch` (one the region remembers:
 * between its floor and its epoch; a caller holding a shard lock, or the
 * changes' lock, keeps it remembered), parsed from the region the first
 * time.  A change publishes the epoch after writing the configuration, and
 * an entry is only written again CFG_K changes later, once no key and no
 * holder of a shard lock can be under it any more (the floor). */
/* Whether a profile parsed from the region's text fits its layout, as a
 * change checks it (sluice__rtable_reconfigure_at): the origin's algorithm,
 * 16 bytes of state when the copies are that, a window log's entries in
 * its fixed ring. */
static bool prof_fits(const sluice__rtable *r, const sluice__profile *pf)
{
    if (pf->ops != r->L.pf.ops || (r->L.pf.packed && !pf->packed)) return false;
    return !r->L.ring || sluice__min_u64(pf->slots, pf->limit) < r->L.ring_cap;
}

static const rprof *prof(sluice__rtable *r, uint64_t epoch)
{
    _Atomic(rprof *) *slot = &r->prof[epoch & (CFG_K - 1)];
    rprof *p = atomic_load_explicit(slot, memory_order_acquire);
    if (p && atomic_load_explicit(&p->epoch, memory_order_acquire) == epoch) return p;
    pthread_mutex_lock(&r->prof_mu);
    p = atomic_load_explicit(slot, memory_order_relaxed);
    if (!p || atomic_load_explicit(&p->epoch, memory_order_relaxed) != epoch) {
        rprof *n = sluice__calloc64(sizeof *n);
        rprof *const spare = &r->spare[epoch & (CFG_K - 1)];
        if (!n) { /* no memory: in place, which only the locked paths use */
            n = spare;
            atomic_store_explicit(&n->epoch, UINT64_MAX, memory_order_relaxed);
        }
        const rcfg *c = cfg_at(r, epoch);
        char spec[SLUICE_SPEC_MAX];
        memcpy(spec, c->spec, sizeof spec);
        spec[sizeof spec - 1] = 0;
        /* written by a change that parsed and checked it: it parses and
         * fits the layout (a damaged text that does not is decided under
         * the origin's spec) */
        if (sluice__spec_parse(spec, &n->pf, NULL, 0) != 0 || !prof_fits(r, &n->pf))
            n->pf = r->L.pf;
        n->at = c->at;
        atomic_store_explicit(&n->epoch, epoch, memory_order_release);
        atomic_store_explicit(slot, n, memory_order_release);
        if (p && p != spare) { /* unlinked: retired, then the epoch moves on */
            p->stamp = sluice__rd_retire_stamp();
            p->next = r->retired;
            r->retired = p;
        }
        p = n;
    }
    if (r->retired) { /* free what no reader section can hold any more */
        const uint64_t min = sluice__rd_min_active();
        for (rprof **pp = &r->retired; *pp;) {
            rprof *q = *pp;
            if (q->stamp < min) {
                *pp = q->next;
                sluice__free64(q);
            } else {
                pp = &q->next;
            }
        }
    }
    pthread_mutex_unlock(&r->prof_mu);
    return p;
}

/* The parsed configuration `epoch` for a read without the lock (in a reader
 * section: it stays allocated until the section ends): one made for it and
 * published, else NULL (the lock path makes it). */
static const rprof *read_prof(const sluice__rtable *r, uint64_t epoch)
{
    const rprof *p = atomic_load_explicit(&((sluice__rtable *)r)->prof[epoch & (CFG_K - 1)],
                                          memory_order_acquire);
    const uintptr_t a = (uintptr_t)p, lo = (uintptr_t)r->spare; /* one of the spares? */
    if (!p || (a >= lo && a < lo + sizeof r->spare)) return NULL;
    return atomic_load_explicit(&((rprof *)p)->epoch, memory_order_acquire) == epoch ? p : NULL;
}

/* Carry st, under configuration `from`, over every change up to `to`, in
 * order, each at its time (reconfigure.c: clamped to the key's latest
 * admission); returns the profile it ends under. */
static const sluice__profile *carry_over(sluice__rtable *r, sluice__state *st, uint64_t from,
                                         uint64_t to)
{
    const sluice__profile *pf = &prof(r, from)->pf;
    for (uint64_t e = from + 1; e <= to; e++) {
        const rprof *n = prof(r, e);
        sluice__log *lg = &st->u.log;
        if (r->L.ring && lg->len == lg->cap) {
            /* room for the entry a longer window may add for the permits
             * the ring retired (window_log.c), in a ring that cannot grow:
             * the oldest entry is merged into the next -- its permits then
             * count at the later slot, leaving the window later: never
             * fewer counted (only after several changes that each lengthen
             * the window, with no admission between, can a ring be full) */
            lg->head = (lg->head + 1) & (lg->cap - 1);
            lg->len--;
        }
        sluice__reconfigure_state(pf, &n->pf, st, n->at);
        if (r->L.pf.packed) sluice__reconfigure_fit(&n->pf, st); /* 16 bytes a copy */
        pf = &n->pf;
    }
    return pf;
}

/* The state of slot i of shard k (locked), header *hp, under the current
 * configuration `epoch`: a key under an older one is first carried over
 * the changes it missed, and that committed (crash argument 1).  Returns
 * the profile to decide under; *hp follows the commit. */
static const sluice__profile *key_load(sluice__rtable *r, unsigned char *s, uint64_t *hp,
                                       sluice__state *st, uint64_t epoch)
{
    const uint32_t e = slot_epoch(s, H_ACTIVE(*hp));
    if (e == epoch) {
        const sluice__profile *pf = &prof(r, epoch)->pf;
        state_load(r, pf, s, *hp, st);
        return pf;
    }
    if (e > epoch || epoch - e >= CFG_K) {
        /* a damaged region: a key's configuration is always one of the
         * CFG_K remembered (the floor), never a later one.  Its state is
         * taken as it is, under the current one -- a wrong answer maybe,
         * never a carry-over of 2^32 steps under the shard lock */
        const sluice__profile *pf = &prof(r, epoch)->pf;
        state_load(r, pf, s, *hp, st);
        *hp = state_commit(r, pf, s, *hp, st, (uint32_t)epoch);
        return pf;
    }
    state_load(r, &prof(r, e)->pf, s, *hp, st);
    const sluice__profile *pf = carry_over(r, st, e, epoch);
    *hp = state_commit(r, pf, s, *hp, st, (uint32_t)epoch);
    return pf;
}

static inline void bump(_Atomic uint64_t *c, uint64_t n) /* shard locked */
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          (memory_order)SLUICE__SEQ_STORE);
}

/* ---- shards ------------------------------------------------------------- */

/* Repair a shard taken from a dead holder (locked): recount it; and for
 * the window logs, commit each key's state again (its own configuration,
 * nothing decided), so that its copy's summary of the ring says what the
 * ring does -- a holder killed after adding permits to the newest entry in
 * place, before its flip (crash argument 1), left the ring charged and the
 * summary not. */
static void repair(sluice__rtable *r, uint32_t k)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < r->L.cap; i++) {
        unsigned char *s = slot_at(r, k, i);
        const uint64_t h = hdr_get(s);
        if (H_KIND(h) != K_LIVE) continue;
        n++;
        if (r->L.ring) {
            const uint32_t e = slot_epoch(s, H_ACTIVE(h));
            const sluice__profile *pf = &prof(r, e)->pf;
            sluice__state st;
            state_load(r, pf, s, h, &st);
            (void)state_commit(r, pf, s, h, &st, e);
        }
    }
    atomic_store_explicit(&r->sh[k].count, n, (memory_order)SLUICE__SEQ_STORE);
    atomic_store_explicit(&r->sh[k].due, 0, (memory_order)SLUICE__SEQ_STORE); /* unknown */
}

/* Lock shard k; *stolen is set when a dead holder's lock was taken.  The
 * sequence goes odd (it already is when a holder died mid-hold: then it
 * stays so), then a release fence: the hold's stores come after it, for
 * the read (head comment; spin.h's lock does the same).  Returns the
 * sequence as the lock found it (before the odd store). */
static uint64_t shard_lock(sluice__rtable *r, uint32_t k, bool *stolen)
{
    rshard *sh = &r->sh[k];
    const bool dead = lock_word(&sh->lock, self());
    const uint64_t v = sluice__seq_hold(&sh->seq);
    if (dead) {
        repair(r, k);
        *stolen = true;
    }
    return v;
}

/* The sequence even again, 2 past the hold's odd value (release: after the
 * hold's stores), then the lock free. */
static void shard_unlock(sluice__rtable *r, uint32_t k)
{
    rshard *sh = &r->sh[k];
    sluice__seq_unhold(&sh->seq);
    atomic_store_explicit(&sh->lock, 0, memory_order_release);
}

/* After a repair: the region's count of keys, from the shards' (every
 * shard held, nothing held on entry). */
static void resync(sluice__rtable *r)
{
    bool stolen = false;
    uint64_t n = 0;
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        shard_lock(r, k, &stolen);
        n += atomic_load_explicit(&r->sh[k].count, memory_order_relaxed);
    }
    atomic_store_explicit(&r->h->keys, n, memory_order_relaxed);
    for (uint32_t k = r->L.nshards; k-- > 0;) shard_unlock(r, k);
}

static inline uint32_t shard_of(const sluice__rtable *r, uint64_t hash)
{
    return r->L.shard_bits ? (uint32_t)(hash >> (64 - r->L.shard_bits)) : 0;
}

/* The slot holding key in shard k (locked), or NONE; *freep receives the
 * first reusable slot of the probe (a tombstone, or the empty slot that
 * ended it), NONE when there is none. */
static uint32_t find(const sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                     size_t keylen, uint32_t *freep)
{
    const uint32_t cap = r->L.cap;
    uint32_t i = (uint32_t)(((uint64_t)tag * cap) >> 32), fr = NONE;
    for (uint32_t d = 0; d < cap; d++) {
        unsigned char *s = slot_at(r, k, i);
        const uint64_t h = hdr_get(s);
        const unsigned kind = H_KIND(h);
        if (kind == K_EMPTY) {
            if (fr == NONE) fr = i;
            break;
        }
        if (kind == K_TOMB) {
            if (fr == NONE) fr = i;
        } else if (H_TAG(h) == tag && H_LEN(h) == keylen &&
                   (keylen == 0 || memcmp(s + r->L.key_off, key, sluice__key_bytes(keylen)) == 0)) {
            *freep = fr;
            return i;
        }
        if (++i == cap) i = 0;
    }
    *freep = fr;
    return NONE;
}

/* Drop the key of slot i of shard k (locked): crash argument 3. */
static void drop(sluice__rtable *r, uint32_t k, uint32_t i)
{
    const uint32_t cap = r->L.cap;
    hdr_set(slot_at(r, k, i), K_TOMB);
    bump(&r->sh[k].count, (uint64_t)-1);
    atomic_fetch_sub_explicit(&r->h->keys, 1, memory_order_relaxed);
    if (H_KIND(hdr_get(slot_at(r, k, i + 1 == cap ? 0 : i + 1))) != K_EMPTY) return;
    for (uint32_t n = 0, j = i; n < cap && H_KIND(hdr_get(slot_at(r, k, j))) == K_TOMB; n++) {
        hdr_set(slot_at(r, k, j), K_EMPTY);
        j = j ? j - 1 : cap - 1;
    }
}

/* Drop every key of shard k (locked) at rest by now; the shard's bound on
 * the earliest rest time becomes exact.  Returns the keys dropped. */
static uint32_t sweep(sluice__rtable *r, uint32_t k, uint64_t now)
{
    uint32_t freed = 0;
    uint64_t first = UINT64_MAX;
    const uint64_t epoch = epoch_now(r);
    for (uint32_t i = 0; i < r->L.cap; i++) {
        unsigned char *s = slot_at(r, k, i);
        uint64_t h = hdr_get(s);
        if (H_KIND(h) != K_LIVE) continue;
        sluice__state st;
        const sluice__profile *pf = key_load(r, s, &h, &st, epoch);
        const uint64_t rest = sluice__rest_at(pf, &st);
        if (rest <= now) {
            drop(r, k, i);
            bump(&r->sh[k].reclaimed, 1);
            freed++;
        } else if (rest < first) {
            first = rest;
        }
    }
    atomic_store_explicit(&r->sh[k].due, first, (memory_order)SLUICE__SEQ_STORE);
    return freed;
}

/* Drop the least recently admitted of LRU_SAMPLES sampled keys of shard k
 * (locked, holding at least one key). */
static void evict_one(sluice__rtable *r, uint32_t k)
{
    rshard *sh = &r->sh[k];
    const uint32_t cap = r->L.cap;
    uint32_t best = NONE;
    uint64_t best_t = UINT64_MAX;
    for (int n = 0; n < LRU_SAMPLES; n++) {
        sh->rng ^= sh->rng << 13;
        sh->rng ^= sh->rng >> 7;
        sh->rng ^= sh->rng << 17;
        uint32_t i = (uint32_t)(((sh->rng >> 32) * cap) >> 32);
        for (uint32_t d = 0; d < cap; d++, i = i + 1 == cap ? 0 : i + 1) {
            unsigned char *s = slot_at(r, k, i);
            uint64_t h = hdr_get(s);
            if (H_KIND(h) != K_LIVE) continue;
            sluice__state st;
            (void)key_load(r, s, &h, &st, epoch_now(r));
            if (st.t_last < best_t || best == NONE) {
                best_t = st.t_last;
                best = i;
            }
            break;
        }
    }
    if (best == NONE) return;
    drop(r, k, best);
    bump(&sh->evicted, 1);
}

/* Take one of the region's max_keys places. */
static bool reserve(sluice__rtable *r)
{
    uint64_t n = atomic_load_explicit(&r->h->keys, memory_order_relaxed);
    do {
        if (n >= r->L.max_keys) return false;
    } while (!atomic_compare_exchange_weak_explicit(&r->h->keys, &n, n + 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

/* Room for a new key in shard k (locked) at time now: a place reserved.
 * Evicts (as the flags say) only when `evict`: after the other shards were
 * swept. */
static bool make_room(sluice__rtable *r, uint32_t k, uint64_t now, bool evict)
{
    rshard *sh = &r->sh[k];
    const uint64_t count = atomic_load_explicit(&sh->count, memory_order_relaxed);
    if (count < r->L.ecap && reserve(r)) return true;
    if (atomic_load_explicit(&sh->due, memory_order_relaxed) <= now && sweep(r, k, now) &&
        atomic_load_explicit(&sh->count, memory_order_relaxed) < r->L.ecap && reserve(r))
        return true;
    if (evict && (r->flags & SLUICE_TABLE_EVICT_LRU) &&
        atomic_load_explicit(&sh->count, memory_order_relaxed)) {
        evict_one(r, k);
        if (atomic_load_explicit(&sh->count, memory_order_relaxed) < r->L.ecap && reserve(r))
            return true;
    }
    return false;
}

/* A place was reserved for a new key in shard k (locked), yet its probe
 * found no free slot: the shard's count said room where there is none (a
 * damaged region).  The place is given back and the shard recounted. */
static void no_slot(sluice__rtable *r, uint32_t k)
{
    atomic_fetch_sub_explicit(&r->h->keys, 1, memory_order_relaxed);
    uint64_t n = 0;
    for (uint32_t i = 0; i < r->L.cap; i++) n += H_KIND(hdr_get(slot_at(r, k, i))) == K_LIVE;
    atomic_store_explicit(&r->sh[k].count, n, (memory_order)SLUICE__SEQ_STORE);
}

/* A lower bound on the wait until some held key comes to rest, or -1. */
static int64_t full_retry(const sluice__rtable *r, uint64_t now)
{
    uint64_t first = UINT64_MAX;
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        uint64_t d = atomic_load_explicit(&r->sh[k].due, memory_order_relaxed);
        if (d < first) first = d;
    }
    if (first == UINT64_MAX) return -1;
    return first > now ? (int64_t)sluice__min_u64(first - now, INT64_MAX) : 1;
}

/* Sweep the shards other than k, one at a time, for keys at rest by now
 * (nothing held on entry). */
static void reclaim_others(sluice__rtable *r, uint32_t k, uint64_t now, bool *stolen)
{
    for (uint32_t o = 0; o < r->L.nshards; o++) {
        if (o == k || atomic_load_explicit(&r->sh[o].due, memory_order_relaxed) > now) continue;
        shard_lock(r, o, stolen);
        (void)sweep(r, o, now > r->sh[o].now ? now : r->sh[o].now);
        shard_unlock(r, o);
    }
}

/* ---- decisions ---------------------------------------------------------- */

/* Whether a key is one the table takes: any length, not NULL with one. */
static inline bool key_ok(const sluice__rtable *r, const void *key, size_t keylen)
{
    (void)r;
    return key || !keylen;
}

/* Long keys (table.h; docs/decisions.md, "Long keys"): a key longer than
 * max_key_bytes as the region holds it -- its digest under the region's
 * seed, into dig, with the length code SLUICE__DIGEST_LEN.  O(len). */
static inline void key_view(const sluice__rtable *r, const void **key, size_t *keylen,
                            unsigned char dig[SLUICE__DIGEST_BYTES])
{
    if (*keylen <= r->L.max_key_bytes) return;
    sluice__key_digest(r->dseed, *key, *keylen, dig);
    *key = dig;
    *keylen = SLUICE__DIGEST_LEN;
}

/* The hash of a key as held (key_view). */
static inline uint64_t key_hash(const sluice__rtable *r, const void *key, size_t keylen)
{
    return sluice__siphash13(r->h->seed, key, sluice__key_bytes(keylen));
}

/* One decision in shard k (locked).  *full: refused for want of room;
 * `evict`: the policy may evict (make_room).  Only an admission, or a new
 * key's request (which may sweep), moves the shard's `now`. */
static bool decide_locked(sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                          size_t keylen, uint64_t permits, uint64_t now, sluice_result *res,
                          bool evict, bool *full)
{
    rshard *sh = &r->sh[k];
    const uint64_t epoch = epoch_now(r); /* with the shard held: prof() */
    const sluice__profile *pf;
    *full = false;
    uint32_t fr;
    uint32_t i = find(r, k, tag, key, keylen, &fr);
    sluice__state st;
    if (i != NONE) {
        unsigned char *s = slot_at(r, k, i);
        uint64_t h = hdr_get(s);
        pf = key_load(r, s, &h, &st, epoch);
        bool ok = sluice__decide(pf, &st, now, permits, UINT64_MAX, res);
        if (ok && permits) { /* only an admission writes */
            state_commit(r, pf, s, h, &st, (uint32_t)epoch);
            if (now > sh->now) PUT(&sh->now, now);
        }
        return ok;
    }
    pf = &prof(r, epoch)->pf;
    if (permits == 0 || permits > pf->capacity) { /* a fresh limiter's probe or refusal */
        sluice__state_init(pf, &st);
        return sluice__decide(pf, &st, now, permits, UINT64_MAX, res);
    }
    if (now > sh->now) PUT(&sh->now, now);
    if (!make_room(r, k, sh->now, evict)) {
        *full = true;
        if (res) {
            sluice__deny(res, 0, full_retry(r, sh->now));
            res->error = SLUICE_EFULL;
        }
        return false;
    }
    (void)find(r, k, tag, key, keylen, &fr); /* room may have moved the first free slot */
    if (fr == NONE) { /* count < ecap < cap, unless the counts are damaged */
        no_slot(r, k);
        *full = true;
        if (res) {
            sluice__deny(res, 0, -1);
            res->error = SLUICE_EFULL;
        }
        return false;
    }
    unsigned char *s = slot_at(r, k, fr);
    state_fresh(r, pf, s, &st);
    if (!sluice__decide(pf, &st, now, permits, UINT64_MAX, res)) { /* cannot happen */
        atomic_fetch_sub_explicit(&r->h->keys, 1, memory_order_relaxed);
        return false;
    }
    key_write(r, s, key, keylen);
    state_write(r, pf, s, 0, &st, (uint32_t)epoch);
    hdr_set(s, H_LIVE(tag, keylen, 0)); /* published: crash argument 2 */
    bump(&sh->count, 1);
    const uint64_t rest = sluice__rest_at(pf, &st);
    if (rest < atomic_load_explicit(&sh->due, memory_order_relaxed))
        atomic_store_explicit(&sh->due, rest, (memory_order)SLUICE__SEQ_STORE);
    return true;
}

/* Count a decision: an admission in the region (shard k locked, as it is
 * written anyway), a refusal or a probe in the handle (`sh` unused then). */
/* ---- the counter stripes (head comment: Statistics) --------------------- */

static inline rstripe *stripes_of(const sluice__rtable *r)
{
    return (rstripe *)(void *)((unsigned char *)r->h + r->L.stripes_off);
}

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

static inline void stripe_add(_Atomic uint64_t *c, uint64_t v, bool own)
{
    if (own) {
        sluice__own_add(c, v); /* a relaxed load and store: only we write it */
        return;
    }
    uint64_t old = atomic_load_explicit(c, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(c, &old, sluice__sat_add(old, v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* Count a decision: an admission in its shard (locked), anything else in
 * the calling thread's stripe; `elsewhere`: a refusal of a composite that
 * another limit made while this key would have admitted (a part of the
 * refusals, as counters.h's sluice__count_elsewhere). */
static void count_decision(sluice__rtable *r, rshard *sh, uint64_t permits, bool ok, bool full,
                           bool elsewhere)
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
        stripe_add(&s->probes, 1, own);
    } else {
        stripe_add(&s->denied, 1, own);
        stripe_add(&s->pdenied, permits, own);
        if (elsewhere) {
            stripe_add(&s->elsewhere, 1, own);
            stripe_add(&s->pelsewhere, permits, own);
        }
    }
    if (full) stripe_add(&s->refused, 1, own);
}

/* ---- the read without the lock (head comment) --------------------------- */

/* What a decision on one key reads of its shard, from GET loads between two
 * loads of the shard's sequence that found it even and unchanged. */
typedef struct rsnap {
    uint64_t v;                 /* the sequence the read began and ended with */
    uint64_t epoch;             /* the region's configuration */
    bool found;                 /* the key is held */
    uint32_t i;                 /* its slot */
    uint64_t h;                 /* and the slot's header word */
    uint32_t ep;                /* the configuration its active copy is under */
    union {
        uint64_t w[SNAP_WORDS]; /* that copy's words (2 when packed) */
        rring g;                /* a window log's (its head and m front entries) */
    } u;
    uint64_t count, due, now;   /* the shard's, when the key is not held */
} rsnap;

/* Whether the slot at s, whose header says length keylen, holds key: word
 * by word, GET loads against the caller's bytes zero-padded as key_write
 * pads them. */
static bool read_key_eq(const sluice__rtable *r, unsigned char *s, const void *key, size_t keylen)
{
    uint64_t *d = (uint64_t *)(void *)(s + r->L.key_off);
    const unsigned char *k = key;
    size_t i = 0;
    keylen = sluice__key_bytes(keylen);
    for (; i + 8 <= keylen; i += 8) {
        uint64_t w;
        memcpy(&w, k + i, 8);
        if (GET(&d[i / 8]) != w) return false;
    }
    if (i < keylen) {
        uint64_t w = 0;
        memcpy(&w, k + i, keylen - i);
        if (GET(&d[i / 8]) != w) return false;
    }
    return true;
}

/* One read of key's slot in shard k (GET loads only; the probe run cut at
 * cap slots, each key compared up to its header's length, at most
 * max_key_bytes: bounded whatever mix of states the loads see). */
static void read_once(const sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                      size_t keylen, rsnap *sn)
{
    rshard *sh = &r->sh[k];
    const uint32_t cap = r->L.cap;
    uint32_t i = (uint32_t)(((uint64_t)tag * cap) >> 32);
    sn->epoch = epoch_now(r);
    sn->found = false;
    for (uint32_t d = 0; d < cap; d++) {
        unsigned char *s = slot_at(r, k, i);
        const uint64_t h = atomic_load_explicit(hdr_of(s), (memory_order)SLUICE__SEQ_LOAD);
        const unsigned kind = H_KIND(h);
        if (kind == K_EMPTY) break;
        if (kind == K_LIVE && H_TAG(h) == tag && H_LEN(h) == keylen &&
            read_key_eq(r, s, key, keylen)) {
            const unsigned c = H_ACTIVE(h);
            const uint64_t *cw = (const uint64_t *)(const void *)copy_of(r, s, c);
            size_t n = r->L.pf.packed ? 2 : r->L.ring ? RING_HEAD_WORDS : STATE_WORDS;
            sn->found = true;
            sn->i = i;
            sn->h = h;
            sn->ep = slot_epoch(s, c);
            for (size_t j = 0; j < n; j++) sn->u.w[j] = GET(&cw[j]);
            if (r->L.ring) { /* the front entries the ring holds, at most FRONT */
                const size_t m = sn->u.g.len < FRONT ? sn->u.g.len : FRONT;
                for (n = RING_HEAD_WORDS; n < RING_HEAD_WORDS + 2 * m; n++) sn->u.w[n] = GET(&cw[n]);
            }
            return;
        }
        if (++i == cap) i = 0;
    }
    sn->count = atomic_load_explicit(&sh->count, (memory_order)SLUICE__SEQ_LOAD);
    sn->due = atomic_load_explicit(&sh->due, (memory_order)SLUICE__SEQ_LOAD);
    sn->now = GET(&sh->now);
}

/* A consistent snapshot of key's slot in shard k, read without writing
 * anything (the proof is in the head comment): true; false when READ_TRIES
 * reads met a holder or were overtaken by one. */
static bool read_key(const sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                     size_t keylen, rsnap *sn)
{
    rshard *sh = &r->sh[k];
    for (unsigned n = 0; n < READ_TRIES; n++) {
        const uint64_t v = sluice__seq_begin(&sh->seq);
        if (v & 1) { /* held: wait without writing */
            sluice__backoff(n);
            continue;
        }
        read_once(r, k, tag, key, keylen, sn);
        if (sluice__seq_valid(&sh->seq, v)) {
            sn->v = v;
            return true;
        }
    }
    return false;
}

/* The profile a snapshot decides under, and its state into st (fresh when
 * the key is not held); NULL when the lock must decide: the key missed a
 * change of spec (the lock carries it over first), or this handle has not
 * parsed the current configuration yet (the lock parses it). */
static const sluice__profile *snap_state(const sluice__rtable *r, const rsnap *sn,
                                         sluice__state *st)
{
    const rprof *p = read_prof(r, sn->epoch);
    if (!p || (sn->found && sn->ep != sn->epoch)) return NULL;
    const sluice__profile *pf = &p->pf;
    if (!sn->found) {
        sluice__state_init(pf, st);
    } else if (r->L.ring) { /* the header only: ring_read decides */
        sluice__state_init(pf, st);
        st->t_last = sn->u.g.t_last;
    } else if (r->L.pf.packed) {
        sluice__state_unpack(pf, sn->u.w, st);
    } else {
        swords u;
        memcpy(u.w, sn->u.w, sizeof u.w);
        *st = u.st;
    }
    return pf;
}

/* A held window-log key's decision from its snapshot's summary, as a
 * limiter's refusals read theirs: sluice__log_read (window_log.c proves it
 * gives the locked decision's answer exactly, or false when it cannot tell:
 * an admission, or a cut past the FRONT oldest entries) on a publication
 * filled from the snapshot (process memory: nothing shared is written). */
static bool ring_read(const sluice__profile *pf, const rsnap *sn, uint64_t now,
                      uint64_t permits, sluice_result *res, bool *ok)
{
    const rring *g = &sn->u.g; /* its head, then m front entries */
    const uint32_t m = g->len < FRONT ? g->len : FRONT;
    sluice__logpub pub; /* the fields sluice__log_read reads */
    atomic_store_explicit(&pub.seq, 0, memory_order_relaxed);
    atomic_store_explicit(&pub.front_at, 0, memory_order_relaxed);
    atomic_store_explicit(&pub.pf, pf, memory_order_relaxed);
    atomic_store_explicit(&pub.t_last, g->t_last, memory_order_relaxed);
    atomic_store_explicit(&pub.base, g->base, memory_order_relaxed);
    atomic_store_explicit(&pub.newest_slot, g->newest_slot, memory_order_relaxed);
    atomic_store_explicit(&pub.newest_cum, g->newest_cum, memory_order_relaxed);
    atomic_store_explicit(&pub.len, g->len, memory_order_relaxed);
    for (uint32_t i = 0; i < m; i++) {
        atomic_store_explicit(&pub.front[i].slot, g->front[i].slot, memory_order_relaxed);
        atomic_store_explicit(&pub.front[i].cum, g->front[i].cum, memory_order_relaxed);
    }
    uint64_t t_eff;
    return sluice__log_read(&pub, now, permits, res, &t_eff, ok);
}

/* Whether a request for a key shard k does not hold (1 <= permits <=
 * capacity) is refused for want of room, from the snapshot: the locked path
 * would find no room -- the shard or the region full, no shard with
 * anything due by its time, and no eviction.  *retry: the locked path's
 * hint (full_retry).  The other shards' `due` are read as the locked path
 * reads them, without their locks: lower bounds, each true when read. */
static bool full_read(const sluice__rtable *r, uint32_t k, const rsnap *sn, uint64_t now_ns,
                      int64_t *retry)
{
    if (r->flags & SLUICE_TABLE_EVICT_LRU) return false;
    const uint64_t now = now_ns > sn->now ? now_ns : sn->now; /* the shard's, had we locked */
    if (sn->count < r->L.ecap &&
        atomic_load_explicit(&r->h->keys, memory_order_relaxed) < r->L.max_keys)
        return false;
    uint64_t first = UINT64_MAX;
    for (uint32_t o = 0; o < r->L.nshards; o++) {
        const uint64_t d = o == k ? sn->due
                                  : atomic_load_explicit(&r->sh[o].due,
                                                         (memory_order)SLUICE__SEQ_LOAD);
        if (d <= now) return false; /* a sweep may make room */
        if (d < first) first = d;
    }
    *retry = first == UINT64_MAX ? -1 : (int64_t)sluice__min_u64(first - now, INT64_MAX);
    return true;
}

/* An admission read without the lock, on a held key whose state is a
 * copy (not a window log's ring): what to commit under the lock if nothing
 * moved since the read (sluice__rtable_try_acquire_at). */
typedef struct radm {
    bool ready;
    uint32_t i;
    uint64_t h, v, epoch;
    const sluice__profile *pf;
    sluice__state st; /* the state after the admission */
} radm;

/* The decision of a request read without writing: true with *ok (and *res,
 * *full) when it is a refusal or a probe; false when the lock must decide
 * (an admission -- then *adm, when it can be committed as read --, a new
 * key that room may be made for, or no consistent read). */
static bool decide_read(sluice__rtable *r, uint32_t k, uint32_t tag, const void *key,
                        size_t keylen, uint64_t permits, uint64_t now, sluice_result *res,
                        bool *ok, bool *full, radm *adm)
{
    rsnap sn;
    sluice__state st;
    adm->ready = false;
    if (!read_key(r, k, tag, key, keylen, &sn)) return false;
    const sluice__profile *pf = snap_state(r, &sn, &st);
    if (!pf) return false;
    *full = false;
    if (sn.found && r->L.ring) return ring_read(pf, &sn, now, permits, res, ok);
    if (sn.found || permits == 0 || permits > pf->capacity) { /* as decide_locked */
        *ok = sluice__decide(pf, &st, now, permits, UINT64_MAX, res);
        if (!(*ok && permits)) return true; /* only an admission writes */
        if (sn.found) {
            adm->ready = true;
            adm->i = sn.i;
            adm->h = sn.h;
            adm->v = sn.v;
            adm->epoch = sn.epoch;
            adm->pf = pf;
            adm->st = st;
        }
        return false;
    }
    int64_t retry;
    if (!full_read(r, k, &sn, now, &retry)) return false;
    *ok = false;
    *full = true;
    if (res) {
        sluice__deny(res, 0, retry);
        res->error = SLUICE_EFULL;
    }
    return true;
}

static bool try_acquire_at(sluice__rtable *r, const void *key, size_t keylen,
                           uint64_t permits, uint64_t now_ns, sluice_result *res)
{
    bool stolen = false, full;
    if (!key_ok(r, key, keylen)) { /* refused, and counted as a refusal */
        if (res) sluice__fail(res, SLUICE_EINVAL);
        count_decision(r, NULL, permits, false, false, false);
        return false;
    }
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    if (!key) key = "";
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(r, &key, &keylen, dig);
    const uint64_t hash = key_hash(r, key, keylen);
    const uint32_t k = shard_of(r, hash);
    bool ok;
    radm adm;
    if (decide_read(r, k, (uint32_t)hash, key, keylen, permits, now_ns, res, &ok, &full, &adm)) {
        count_decision(r, NULL, permits, ok, full, false);
        return ok;
    }
    const bool evict = (r->flags & SLUICE_TABLE_EVICT_LRU) != 0;
    rshard *sh = &r->sh[k];
    const uint64_t v = shard_lock(r, k, &stolen);
    if (adm.ready && !stolen && v == adm.v && epoch_now(r) == adm.epoch) {
        /* no hold since the read ended with v (a hold leaves the sequence
         * 2 higher), and no change of spec: the shard is as the read saw
         * it, so the decision on it is the locked path's -- commit it */
        state_commit(r, adm.pf, slot_at(r, k, adm.i), adm.h, &adm.st, (uint32_t)adm.epoch);
        if (now_ns > sh->now) PUT(&sh->now, now_ns);
        count_decision(r, sh, permits, true, false, false);
        shard_unlock(r, k);
        return true;
    }
    ok = decide_locked(r, k, (uint32_t)hash, key, keylen, permits, now_ns, res,
                       evict && r->L.nshards == 1, &full);
    if (full && (r->L.nshards > 1 || stolen)) {
        /* keys at rest elsewhere may make room, else the policy: once more */
        const uint64_t now = r->sh[k].now;
        shard_unlock(r, k);
        if (stolen) resync(r); /* a count a dead process left too high */
        stolen = false;
        if (r->L.nshards > 1) reclaim_others(r, k, now, &stolen);
        shard_lock(r, k, &stolen);
        ok = decide_locked(r, k, (uint32_t)hash, key, keylen, permits, now_ns, res, evict, &full);
    }
    count_decision(r, &r->sh[k], permits, ok, full, false);
    shard_unlock(r, k);
    if (stolen) resync(r);
    return ok;
}

bool sluice__rtable_try_acquire_at(sluice__rtable *r, const void *key, size_t keylen,
                                   uint64_t permits, uint64_t now_ns, sluice_result *res)
{
    void *rd = sluice__rd_enter(); /* the profile a read finds stays (read_prof) */
    const bool ok = try_acquire_at(r, key, keylen, permits, now_ns, res);
    sluice__rd_exit(rd);
    return ok;
}

/* ---- composite decisions (composite.c) ---------------------------------- */

bool sluice__rtable_key_ok(const sluice__rtable *r, const void *key, size_t keylen)
{
    return key_ok(r, key, keylen);
}

void sluice__rtable_key_view(const sluice__rtable *r, const void **key, size_t *keylen,
                             unsigned char dig[16])
{
    key_view(r, key, keylen, dig);
}

uint32_t sluice__rtable_shard_of(const sluice__rtable *r, const void *key, size_t keylen,
                                 uint64_t *hash, uint64_t id[2])
{
    if (!key) key = "";
    *hash = key_hash(r, key, keylen);
    id[0] = r->h->seed[0];
    id[1] = r->h->seed[1];
    return shard_of(r, *hash);
}

void sluice__rtable_lock(sluice__rtable *r, uint32_t k, uint64_t now_ns, bool *stolen)
{
    shard_lock(r, k, stolen);
    if (now_ns > r->sh[k].now) PUT(&r->sh[k].now, now_ns);
}

void sluice__rtable_unlock(sluice__rtable *r, uint32_t k) { shard_unlock(r, k); }

void sluice__rtable_find(sluice__part *pt)
{
    sluice__rtable *r = pt->rt;
    const uint32_t k = pt->rk;
    uint32_t fr;
    const uint32_t i = find(r, k, (uint32_t)pt->hash, pt->skey, pt->skeylen, &fr);
    pt->repoch = epoch_now(r); /* with the shard held: prof() */
    pt->where = &r->sh[k];
    pt->created = false;
    pt->st = &pt->base;
    if (i == NONE) {
        pt->entry = UINT32_MAX;
        pt->pf = &prof(r, pt->repoch)->pf;
        sluice__state_init(pt->pf, &pt->base);
        return;
    }
    pt->entry = i;
    unsigned char *s = slot_at(r, k, i);
    uint64_t h = hdr_get(s);
    /* a window log's ring stays in the slot */
    pt->pf = key_load(r, s, &h, &pt->base, pt->repoch);
}

/* The key is published at once with a fresh state (crash argument 2: a key
 * at rest, which a killed caller leaves reclaimable); the decided state is
 * committed over it by sluice__rtable_store, or the key dropped again. */
int sluice__rtable_make(sluice__part *pt, bool alone, bool evict, int64_t *retry)
{
    sluice__rtable *r = pt->rt;
    const uint32_t k = pt->rk;
    rshard *sh = &r->sh[k];
    const bool room =
        alone ? make_room(r, k, sh->now, evict || r->L.nshards == 1)
              : atomic_load_explicit(&sh->count, memory_order_relaxed) < r->L.ecap && reserve(r);
    if (!room) {
        *retry = full_retry(r, sh->now);
        return SLUICE_EFULL;
    }
    const void *key = pt->skey;
    const uint32_t tag = (uint32_t)pt->hash;
    uint32_t fr;
    (void)find(r, k, tag, key, pt->skeylen, &fr); /* room may have moved the first free slot */
    if (fr == NONE) { /* count < ecap < cap, unless the counts are damaged */
        no_slot(r, k);
        *retry = -1;
        return SLUICE_EFULL;
    }
    unsigned char *s = slot_at(r, k, fr);
    state_fresh(r, pt->pf, s, &pt->base);
    key_write(r, s, key, pt->skeylen);
    state_write(r, pt->pf, s, 0, &pt->base, (uint32_t)pt->repoch);
    hdr_set(s, H_LIVE(tag, pt->skeylen, 0));
    bump(&sh->count, 1);
    pt->entry = fr;
    pt->created = true;
    pt->st = &pt->base;
    return 0;
}

void sluice__rtable_store(sluice__part *pt)
{
    sluice__rtable *r = pt->rt;
    unsigned char *s = slot_at(r, pt->rk, pt->entry);
    /* a window log was decided on its real state (the ring in the slot) */
    const sluice__state *st = r->L.pf.ops->judge ? pt->st : &pt->tmp;
    state_commit(r, pt->pf, s, hdr_get(s), st, (uint32_t)pt->repoch); /* crash argument 1 */
    if (pt->created) {
        rshard *sh = &r->sh[pt->rk];
        const uint64_t rest = sluice__rest_at(pt->pf, st);
        if (rest < atomic_load_explicit(&sh->due, memory_order_relaxed))
            atomic_store_explicit(&sh->due, rest, (memory_order)SLUICE__SEQ_STORE);
    }
}

void sluice__rtable_unmake(sluice__part *pt)
{
    drop(pt->rt, pt->rk, pt->entry);
    pt->entry = UINT32_MAX;
    pt->created = false;
}

void sluice__rtable_count(sluice__part *pt, uint64_t permits, bool ok, bool full,
                          bool elsewhere)
{
    count_decision(pt->rt, &pt->rt->sh[pt->rk], permits, ok, full, elsewhere);
}

void sluice__rtable_reclaim(sluice__rtable *r, uint64_t now_ns)
{
    bool stolen = false;
    reclaim_others(r, NONE, now_ns, &stolen);
    if (stolen) resync(r);
}

void sluice__rtable_resync(sluice__rtable *r) { resync(r); }

int sluice__rtable_remove(sluice__rtable *r, const void *key, size_t keylen)
{
    if (!key_ok(r, key, keylen)) return SLUICE_EINVAL;
    if (!key) key = "";
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(r, &key, &keylen, dig);
    const uint64_t hash = key_hash(r, key, keylen);
    const uint32_t k = shard_of(r, hash);
    bool stolen = false;
    uint32_t fr;
    shard_lock(r, k, &stolen);
    uint32_t i = find(r, k, (uint32_t)hash, key, keylen, &fr);
    if (i != NONE) drop(r, k, i);
    shard_unlock(r, k);
    if (stolen) resync(r);
    return i == NONE ? SLUICE_ENOENT : 0;
}

/* A peek on a snapshot (snap_state's pf and st), writing nothing: judged on
 * a copy, or for a held window-log key from its summary (ring_read: the
 * probe's room, then the refusal when the permits do not fit); false when
 * the summary cannot tell (the lock judges). */
static bool peek_read(const sluice__rtable *r, const rsnap *sn, const sluice__profile *pf,
                      sluice__state *st, uint64_t now, uint64_t permits, sluice_result *out,
                      sluice_key_state *ks)
{
    if (!sn->found || !r->L.ring) {
        sluice__state tmp;
        sluice__judge(pf, st, &tmp, now, permits, out);
        if (ks && sn->found) {
            ks->last_ns = st->t_last;
            ks->rest_ns = sluice__rest_at(pf, st);
        } else if (ks) {
            memset(ks, 0, sizeof *ks);
        }
        return true;
    }
    bool ok;
    if (!ring_read(pf, sn, now, 0, out, &ok)) return false;
    const uint64_t room = out->remaining;
    if (permits > room) {
        if (!ring_read(pf, sn, now, permits, out, &ok)) return false;
    } else if (permits) {
        sluice__allow(out, room - permits, 0);
    }
    if (ks) { /* the rest time needs only the newest entry: a ring of it */
        sluice__log_entry one = {.slot = sn->u.g.newest_slot, .cum = sn->u.g.newest_cum};
        st->u.log.e = &one;
        st->u.log.cap = 1;
        st->u.log.head = 0;
        st->u.log.len = sn->u.g.len ? 1 : 0;
        ks->last_ns = st->t_last;
        ks->rest_ns = sluice__rest_at(pf, st);
        st->u.log.e = NULL;
    }
    return true;
}

static int peek_at(sluice__rtable *r, const void *key, size_t keylen, uint64_t permits,
                   uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    if (!key_ok(r, key, keylen)) {
        if (res) sluice__fail(res, SLUICE_EINVAL);
        if (state) memset(state, 0, sizeof *state);
        return SLUICE_EINVAL;
    }
    if (!key) key = "";
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    unsigned char dig[SLUICE__DIGEST_BYTES];
    key_view(r, &key, &keylen, dig);
    const uint64_t hash = key_hash(r, key, keylen);
    const uint32_t k = shard_of(r, hash);
    bool stolen = false;
    uint32_t fr;
    sluice_result out = {0};
    sluice__state st, tmp;
    rsnap sn;
    const sluice__profile *rp;
    if (read_key(r, k, (uint32_t)hash, key, keylen, &sn) && (rp = snap_state(r, &sn, &st)) &&
        peek_read(r, &sn, rp, &st, now_ns, permits, &out, state)) {
        if (res) *res = out;
        return sn.found ? 0 : SLUICE_ENOENT;
    }
    shard_lock(r, k, &stolen);
    uint32_t i = find(r, k, (uint32_t)hash, key, keylen, &fr);
    const uint64_t epoch = epoch_now(r); /* with the shard held: prof() */
    if (i == NONE) {
        const sluice__profile pf = prof(r, epoch)->pf; /* a copy: used unlocked */
        shard_unlock(r, k);
        sluice__state_init(&pf, &st);
        sluice__judge(&pf, &st, &tmp, now_ns, permits, &out);
        if (state) memset(state, 0, sizeof *state);
    } else {
        unsigned char *s = slot_at(r, k, i);
        uint64_t h = hdr_get(s);
        const sluice__profile *pf = key_load(r, s, &h, &st, epoch);
        /* judged without writing: on a copy, or by the window logs' judge,
         * which only reads the ring */
        sluice__judge(pf, &st, &tmp, now_ns, permits, &out);
        if (state) {
            state->last_ns = st.t_last;
            state->rest_ns = sluice__rest_at(pf, &st);
        }
        shard_unlock(r, k);
    }
    if (stolen) resync(r);
    if (res) *res = out;
    return i == NONE ? SLUICE_ENOENT : 0;
}

int sluice__rtable_peek_at(sluice__rtable *r, const void *key, size_t keylen, uint64_t permits,
                           uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    void *rd = sluice__rd_enter(); /* the profile a read finds stays (read_prof) */
    const int rc = peek_at(r, key, keylen, permits, now_ns, res, state);
    sluice__rd_exit(rd);
    return rc;
}

void sluice__rtable_stats_get(const sluice__rtable *r, sluice_table_stats *out)
{
    memset(out, 0, sizeof *out);
    /* every process's: refusals and probes in the stripes, admissions and
     * keys in the shards and the header */
    const rstripe *s = stripes_of(r);
    for (unsigned i = 0; i <= NSTRIPES; i++) {
        rstripe *st = (rstripe *)&s[i]; /* loads only */
#define RD(f) atomic_load_explicit(&st->f, memory_order_relaxed)
        out->decisions.requests_denied += RD(denied);
        out->decisions.permits_denied = sluice__sat_add(out->decisions.permits_denied, RD(pdenied));
        out->decisions.probes += RD(probes);
        out->decisions.requests_denied_elsewhere += RD(elsewhere);
        out->decisions.permits_denied_elsewhere =
            sluice__sat_add(out->decisions.permits_denied_elsewhere, RD(pelsewhere));
        out->refused += RD(refused);
#undef RD
    }
    out->keys = atomic_load_explicit(&r->h->keys, memory_order_relaxed);
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        rshard *sh = &r->sh[k];
#define RD(f) atomic_load_explicit(&sh->f, memory_order_relaxed)
        out->reclaimed += RD(reclaimed);
        out->evicted += RD(evicted);
        out->decisions.requests_allowed += RD(allowed);
        out->decisions.permits_allowed = sluice__sat_add(out->decisions.permits_allowed, RD(pallowed));
#undef RD
    }
}

/* The scan: the cursor is shard k << 32 | slot i, the next place to look
 * at; 0 starts and ends a scan.  Keys never move while held (no shifting),
 * so a key held for the whole scan is met at its slot, once. */
int sluice__rtable_scan(sluice__rtable *r, uint64_t cursor, size_t count,
                        sluice_table_scan_fn fn, void *arg, uint64_t *next_cursor,
                        size_t *visited)
{
    if (visited) *visited = 0;
    if (!fn || !next_cursor || count == 0) return SLUICE_EINVAL;
    uint64_t k = cursor >> 32;
    uint32_t i = (uint32_t)cursor;
    if (k >= r->L.nshards || i >= r->L.cap) return SLUICE_EINVAL;
    unsigned char *buf = sluice__malloc(r->L.copy_off - r->L.key_off); /* the key field */
    if (!buf) return SLUICE_ENOMEM;
    size_t work = 0;
    int rc = 0;
    bool stolen = false;
    while (k < r->L.nshards && work < count && rc == 0) {
        sluice_key_state ks;
        size_t len = 0;
        bool found = false;
        shard_lock(r, (uint32_t)k, &stolen);
        while (i < r->L.cap && work < count && !found) {
            unsigned char *s = slot_at(r, (uint32_t)k, i);
            uint64_t h = hdr_get(s);
            work++;
            i++;
            if (H_KIND(h) != K_LIVE) continue;
            sluice__state st;
            const sluice__profile *pf = key_load(r, s, &h, &st, epoch_now(r));
            len = H_LEN(h);
            /* damaged: no key is longer than the field (a digest's length
             * code stands for its 16 bytes) */
            if (len != SLUICE__DIGEST_LEN && len > r->L.max_key_bytes) continue;
            len = sluice__key_bytes(len);
            memcpy(buf, s + r->L.key_off, len);
            ks = (sluice_key_state){.last_ns = st.t_last, .rest_ns = sluice__rest_at(pf, &st),
                                    .flags = H_LEN(h) == SLUICE__DIGEST_LEN ? SLUICE_KEY_DIGEST : 0};
            found = true;
        }
        shard_unlock(r, (uint32_t)k);
        if (i == r->L.cap) {
            k++;
            i = 0;
        }
        if (found) rc = fn(buf, len, &ks, arg); /* unlocked: fn may call the table */
    }
    sluice__free(buf);
    if (stolen) resync(r);
    *next_cursor = k >= r->L.nshards ? 0 : (k << 32 | i);
    if (visited) *visited = work;
    return rc;
}

/* ---- changing the spec -------------------------------------------------- */

/* Carry every key of every shard over to configuration `epoch` (the
 * changes' lock held; nothing else).  After it, every key is under epoch. */
static void bring_forward(sluice__rtable *r, uint64_t epoch, bool *stolen)
{
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        shard_lock(r, k, stolen);
        for (uint32_t i = 0; i < r->L.cap; i++) {
            unsigned char *s = slot_at(r, k, i);
            uint64_t h = hdr_get(s);
            if (H_KIND(h) != K_LIVE || slot_epoch(s, H_ACTIVE(h)) == epoch) continue;
            sluice__state st;
            (void)key_load(r, s, &h, &st, epoch);
        }
        shard_unlock(r, k);
    }
}

/* The new spec's profile and canonical text: `spec`, or (spec NULL) the
 * current profile `cur` with one knob changed. */
static int new_spec(const sluice__profile *cur, const char *spec, int knob, uint64_t a,
                    uint64_t b, sluice__profile *to, char canon[SLUICE_SPEC_MAX], char *err,
                    size_t errlen)
{
    char buf[SLUICE_SPEC_MAX];
    int rc;
    if (!spec) {
        if ((rc = sluice__reconfigure_knob(cur, knob, a, b, buf, sizeof buf, err, errlen)) != 0)
            return rc;
        spec = buf;
    }
    if ((rc = sluice__spec_parse(spec, to, err, errlen)) != 0) return rc;
    memset(canon, 0, SLUICE_SPEC_MAX);
    if (sluice__spec_format(to, canon, SLUICE_SPEC_MAX) < 0) {
        sluice__errf(err, errlen, "cannot format the spec \"%s\"", spec);
        return SLUICE_EINVAL;
    }
    return 0;
}

int sluice__rtable_reconfigure_at(sluice__rtable *r, const char *spec, int knob, uint64_t a,
                                  uint64_t b, uint64_t now_ns, char *err, size_t errlen)
{
    sluice__profile to;
    char canon[SLUICE_SPEC_MAX];
    int rc;
    if (now_ns > (uint64_t)INT64_MAX) now_ns = (uint64_t)INT64_MAX;
    rhead *h = r->h;
    bool stolen = false;
    (void)lock_word(&h->cfg_lock, self()); /* a dead changer published nothing, or all */
    const uint64_t epoch = atomic_load_explicit(&h->epoch, memory_order_relaxed);
    const sluice__profile *cur = &prof(r, epoch)->pf;
    if ((rc = new_spec(cur, spec, knob, a, b, &to, canon, err, errlen)) != 0) goto out;
    if ((rc = sluice__reconfigure_check(cur, &to, err, errlen)) != 0) goto out;
    if (r->L.pf.packed && !to.packed) {
        sluice__errf(err, errlen,
                     "\"%s\" needs more than the 16 bytes of state each key of this region has: "
                     "make a new region", canon);
        rc = SLUICE_EINVAL;
        goto out;
    }
    if (r->L.ring) {
        const uint64_t bound = sluice__min_u64(to.slots, to.limit);
        if (bound > r->L.ring_cap - 2) {
            sluice__errf(err, errlen,
                         "%s keeps up to min(N, L) = %llu ring entries per key; this region's "
                         "rings hold %u (made for \"%s\"), so min(N, L) may be at most %u: "
                         "make a new region",
                         to.ops->name, (unsigned long long)bound, r->L.ring_cap, r->L.spec,
                         r->L.ring_cap - 2);
            rc = SLUICE_EINVAL;
            goto out;
        }
    }
    if (epoch >= EPOCH_MAX) {
        sluice__errf(err, errlen, "too many changes of spec (%u): make a new region", EPOCH_MAX);
        rc = SLUICE_ERANGE;
        goto out;
    }
    /* the new configuration takes the place of epoch + 1 - CFG_K: no key
     * may still be under that one */
    if (epoch + 1 >= CFG_K && h->floor <= epoch + 1 - CFG_K) {
        bring_forward(r, epoch, &stolen);
        h->floor = epoch;
    }
    rcfg *c = cfg_at(r, epoch + 1);
    c->epoch = epoch + 1;
    c->at = now_ns;
    memcpy(c->spec, canon, sizeof c->spec);
    atomic_store_explicit(&h->epoch, epoch + 1, memory_order_release); /* published */
    /* keys may come to rest sooner under the new spec: every shard's lower
     * bound on its rest times is unknown again */
    for (uint32_t k = 0; k < r->L.nshards; k++) {
        shard_lock(r, k, &stolen);
        atomic_store_explicit(&r->sh[k].due, 0, (memory_order)SLUICE__SEQ_STORE);
        shard_unlock(r, k);
    }
out:
    atomic_store_explicit(&h->cfg_lock, 0, memory_order_release);
    if (stolen) resync(r);
    return rc;
}

/* ---- attaching ---------------------------------------------------------- */

/* Whether the header after the init word and the first shard are zero, as
 * in a region never initialised (a cheap check: not every byte). */
static bool zeroed_head(const void *region)
{
    const unsigned char *p = region;
    for (size_t i = 8; i < HEAD_BYTES + sizeof(rshard); i++)
        if (p[i]) return false;
    return true;
}

/* Write the header and the shards of a zeroed region (init word held). */
static void initialise(void *region, const layout *L, unsigned flags)
{
    rhead *h = region;
    h->magic = MAGIC;
    h->version = VERSION;
    h->flags = flags;
    h->need = L->need;
    h->max_keys = L->max_keys;
    h->max_key_bytes = L->max_key_bytes;
    sluice__random_seed(h->seed);
    h->nshards = L->nshards;
    h->cap = L->cap;
    h->ecap = L->ecap;
    h->stride = (uint32_t)L->stride;
    h->cb = L->cb;
    h->ring_cap = L->ring_cap;
    memcpy(h->spec, L->spec, sizeof h->spec);
    boot_id(h->boot);
    atomic_store_explicit(&h->keys, 0, memory_order_relaxed);
    atomic_store_explicit(&h->epoch, 0, memory_order_relaxed);
    atomic_store_explicit(&h->cfg_lock, 0, memory_order_relaxed);
    h->floor = 0;
    h->cfg_off = L->cfg_off;
    h->pidns = pid_ns();
    rcfg *c = (rcfg *)(void *)((unsigned char *)region + L->cfg_off);
    memset(c, 0, CFG_K * sizeof *c);
    memcpy(c[0].spec, L->spec, sizeof c[0].spec);
    rshard *sh = (rshard *)(void *)((unsigned char *)region + HEAD_BYTES);
    for (uint32_t k = 0; k < L->nshards; k++) {
        memset(&sh[k], 0, sizeof sh[k]);
        atomic_store_explicit(&sh[k].due, UINT64_MAX, (memory_order)SLUICE__SEQ_STORE);
        sh[k].rng = h->seed[0] ^ (0x9e3779b97f4a7c15ULL * (k + 1)) ^ 1;
    }
}

/* The difference between an initialised header and the layout, as a
 * message; 0 when they agree. */
/* The region's current spec (as the latest change, if any, made it) into
 * out; its origin's when the configurations lie beyond `size`. */
static void current_spec(const rhead *h, size_t size, char out[SLUICE_SPEC_MAX])
{
    const char *src = h->spec;
    if (h->cfg_off >= HEAD_BYTES && h->cfg_off % _Alignof(rcfg) == 0 && h->cfg_off <= size &&
        size - h->cfg_off >= CFG_K * sizeof(rcfg)) {
        const rcfg *c = (const rcfg *)(const void *)((const unsigned char *)h + h->cfg_off);
        /* an entry is written again only CFG_K changes later */
        src = c[atomic_load_explicit(&((rhead *)h)->epoch, memory_order_acquire) & (CFG_K - 1)].spec;
    }
    memcpy(out, src, SLUICE_SPEC_MAX);
    out[SLUICE_SPEC_MAX - 1] = 0;
}

/* The difference between an initialised header and the layout L of the
 * caller's arguments, as a message; 0 when they agree.  The caller's spec
 * must be the region's current one; the layout is the one of the spec the
 * region was made with (its origin; into *O), which a change of spec keeps. */
static int check_header(const rhead *h, const layout *L, unsigned flags, size_t size,
                        layout *O, char *err, size_t errlen)
{
    if (h->magic != MAGIC) {
        sluice__errf(err, errlen, "the region does not hold a sluice table (bad magic)");
        return SLUICE_EINVAL;
    }
    if (h->version != VERSION) {
        sluice__errf(err, errlen,
                     "the region holds a table of layout version %u; this library reads version %u",
                     h->version, VERSION);
        return SLUICE_EINVAL;
    }
    char boot[40], now[40];
    memcpy(boot, h->boot, sizeof boot);
    boot[sizeof boot - 1] = 0;
    boot_id(now);
    if (boot[0] && now[0] && strcmp(boot, now) != 0) {
        sluice__errf(err, errlen,
                     "the region was made in another boot (%s), its times on that boot's "
                     "monotonic clock: unlink it and start afresh", boot);
        return SLUICE_EINVAL;
    }
    const uint64_t ns = pid_ns();
    if (h->pidns && ns && h->pidns != ns) {
        sluice__errf(err, errlen,
                     "the region was made in another pid namespace (pid:[%llu], this process's "
                     "pid:[%llu]): its lock words would name pids this process cannot see",
                     (unsigned long long)h->pidns, (unsigned long long)ns);
        return SLUICE_EINVAL;
    }
    char spec[SLUICE_SPEC_MAX];
    current_spec(h, size, spec);
    if (strcmp(spec, L->spec) != 0) {
        sluice__errf(err, errlen, "the region holds a table of spec \"%s\", not \"%s\"", spec,
                     L->spec);
        return SLUICE_EINVAL;
    }
    memcpy(spec, h->spec, sizeof spec);
    spec[sizeof spec - 1] = 0;
    if (make_layout(spec, L->max_keys, L->max_key_bytes, O, NULL, 0) != 0 ||
        O->pf.ops != L->pf.ops) {
        sluice__errf(err, errlen, "the region's table was made with spec \"%s\", which this "
                     "library cannot take for \"%s\"", spec, L->spec);
        return SLUICE_EINVAL;
    }
    L = O; /* the layout: the origin's */
    if (h->max_keys != L->max_keys || h->max_key_bytes != L->max_key_bytes) {
        sluice__errf(err, errlen,
                     "the region holds a table of max_keys %llu and max_key_bytes %llu, not %llu and %llu",
                     (unsigned long long)h->max_keys, (unsigned long long)h->max_key_bytes,
                     (unsigned long long)L->max_keys, (unsigned long long)L->max_key_bytes);
        return SLUICE_EINVAL;
    }
    if (h->flags != flags) {
        sluice__errf(err, errlen, "the region's table %s when full, not %s",
                     h->flags ? "evicts (evict-lru)" : "refuses",
                     flags ? "evicts (evict-lru)" : "refuses");
        return SLUICE_EINVAL;
    }
    if (h->need != L->need || h->nshards != L->nshards || h->cap != L->cap ||
        h->stride != L->stride || h->ring_cap != L->ring_cap || h->cfg_off != L->cfg_off) {
        sluice__errf(err, errlen, "the region's layout (%llu bytes) differs from this one's (%zu)",
                     (unsigned long long)h->need, L->need);
        return SLUICE_EINVAL;
    }
    if (size < L->need) {
        sluice__errf(err, errlen, "a region of %zu bytes is too small: this table needs %zu",
                     size, L->need);
        return SLUICE_EINVAL;
    }
    return 0;
}

/* The public table functions on a handle of a region (skeleton.h's
 * dispatch): the handle's region is sluice__table_region(t). */
static bool ops_try(sluice_table *t, const void *key, size_t keylen, uint64_t permits,
                    uint64_t now_ns, sluice_result *res)
{
    return sluice__rtable_try_acquire_at(sluice__table_region(t), key, keylen, permits, now_ns,
                                         res);
}
static size_t ops_burst(sluice_table *t, size_t n, const void *const keys[],
                        const size_t keylens[], const uint64_t permits[], uint64_t now_ns,
                        sluice_result results[])
{
    return sluice__table_burst_each(t, ops_try, n, keys, keylens, permits, now_ns, results);
}
static int ops_remove(sluice_table *t, const void *key, size_t keylen)
{
    return sluice__rtable_remove(sluice__table_region(t), key, keylen);
}
static int ops_peek(sluice_table *t, const void *key, size_t keylen, uint64_t permits,
                    uint64_t now_ns, sluice_result *res, sluice_key_state *state)
{
    return sluice__rtable_peek_at(sluice__table_region(t), key, keylen, permits, now_ns, res,
                                  state);
}
static void ops_stats(const sluice_table *t, sluice_table_stats *out)
{
    sluice__rtable_stats_get(sluice__table_region(t), out);
}
static int ops_scan(sluice_table *t, uint64_t cursor, size_t count, sluice_table_scan_fn fn,
                    void *arg, uint64_t *next_cursor, size_t *visited)
{
    return sluice__rtable_scan(sluice__table_region(t), cursor, count, fn, arg, next_cursor,
                               visited);
}
static int ops_reconfigure(sluice_table *t, const char *spec, int knob, uint64_t a, uint64_t b,
                           uint64_t now_ns, char *err, size_t errlen)
{
    return sluice__rtable_reconfigure_at(sluice__table_region(t), spec, knob, a, b, now_ns, err,
                                         errlen);
}
static void ops_close(sluice_table *t) { sluice__rtable_close(sluice__table_region(t)); }

/* Overrides and the refused-keys sketch live in one process's heap: a
 * region's keys are decided by every process that maps it, and the other
 * processes would not see them (docs/shared-memory.md, "What a shared table
 * does not do"). */
static const sluice__table_ops region_ops = {
    .name = "shared region",
    .try_acquire_at = ops_try,
    .burst_at = ops_burst,
    .remove = ops_remove,
    .peek_at = ops_peek,
    .stats_get = ops_stats,
    .scan = ops_scan,
    .reconfigure_at = ops_reconfigure,
    .close = ops_close,
    .lacks = "a table in a shared region has no overrides",
};

static sluice_table *attach(void *region, size_t size, const char *spec, size_t max_keys,
                            size_t max_key_bytes, unsigned flags, void *map, size_t map_len,
                            char *err, size_t errlen)
{
    layout L;
    if (make_layout(spec, max_keys, max_key_bytes, &L, err, errlen) != 0) return NULL;
    if (flags & ~(SLUICE_TABLE_EVICT_LRU | SLUICE_TABLE_RECLAIM_WHEN_FULL)) {
        sluice__errf(err, errlen, "bad flags 0x%x", flags);
        return NULL;
    }
    flags &= SLUICE_TABLE_EVICT_LRU; /* a region table always reclaims when full */
    if (!region || ((uintptr_t)region & 63) != 0) {
        sluice__errf(err, errlen, "the region must be 64-byte aligned (a mapping is)");
        return NULL;
    }
    if (size < HEAD_BYTES) {
        sluice__errf(err, errlen, "a region of %zu bytes is too small: this table needs %zu",
                     size, L.need);
        return NULL;
    }
    rhead *h = region;
    layout O; /* the layout of the spec the region was made with */
    const uint64_t me = self();
    for (unsigned n = 0;; n++) {
        uint64_t v = atomic_load_explicit(&h->init, memory_order_acquire);
        if (v == INIT_READY) break;
        if (v != 0 && !(v & BUSY)) {
            sluice__errf(err, errlen, "the region is neither zeroed nor a sluice table");
            return NULL;
        }
        bool mine = false;
        if (size < L.need) { /* ours to make, and too small for it */
            sluice__errf(err, errlen, "a region of %zu bytes is too small: this table needs %zu",
                         size, L.need);
            return NULL;
        }
        if (v == 0) /* a zeroed region: one process wins the right to initialise */
            mine = atomic_compare_exchange_strong_explicit(&h->init, &v, BUSY | me,
                                                           memory_order_acquire,
                                                           memory_order_relaxed);
        else if (n >= 64 && gone(v & ~BUSY, (n & 3) == 3)) /* its initialiser died */
            mine = atomic_compare_exchange_strong_explicit(&h->init, &v, BUSY | me,
                                                           memory_order_acquire,
                                                           memory_order_relaxed);
        if (mine && v == 0 && !zeroed_head(region)) { /* not ours to write over */
            atomic_store_explicit(&h->init, 0, memory_order_release);
            sluice__errf(err, errlen, "the region is not zeroed: its init word is 0 but its "
                         "header is not (a region must be all zero bytes before its first attach)");
            return NULL;
        }
        if (mine) {
            initialise(region, &L, flags);
            atomic_store_explicit(&h->init, INIT_READY, memory_order_release);
            break;
        }
        sluice__backoff(n);
    }
    if (check_header(h, &L, flags, size, &O, err, errlen) != 0) return NULL;
    sluice__rtable *r = sluice__calloc64(sizeof *r);
    if (!r) goto oom;
    sluice__rd_setup(); /* before any read of this handle runs */
    if (pthread_mutex_init(&r->prof_mu, NULL) != 0) {
        sluice__free64(r);
        r = NULL;
        goto oom;
    }
    r->L = O;
    r->flags = flags;
    r->h = h;
    sluice__digest_seed(h->seed, r->dseed);
    r->sh = (rshard *)(void *)((unsigned char *)region + HEAD_BYTES);
    r->slots = (unsigned char *)region + O.slots_off;
    sluice_table *t = sluice__table_wrap(&region_ops, &L.pf, flags, max_keys, r);
    if (!t) {
        pthread_mutex_destroy(&r->prof_mu);
        goto oom;
    }
    r->map = map;
    r->map_len = map_len;
    /* parse the current configuration now, under a shard's lock (which
     * keeps it remembered), so that refusals read from the first on */
    bool stolen = false;
    shard_lock(r, 0, &stolen);
    (void)prof(r, epoch_now(r));
    shard_unlock(r, 0);
    if (stolen) resync(r);
    return t;
oom:
    sluice__free64(r);
    sluice__errf(err, errlen, "out of memory");
    return NULL;
}

sluice_table *sluice_table_attach(void *region, size_t size, const char *spec, size_t max_keys,
                                  size_t max_key_bytes, unsigned flags, char *err,
                                  size_t errlen)
{
    return attach(region, size, spec, max_keys, max_key_bytes, flags, NULL, 0, err, errlen);
}

void sluice__rtable_close(sluice__rtable *r)
{
    if (!r) return;
    if (r->map) munmap(r->map, r->map_len);
    for (unsigned j = 0; j < CFG_K; j++) {
        rprof *p = atomic_load_explicit(&r->prof[j], memory_order_relaxed);
        if (p && p != &r->spare[j]) sluice__free64(p);
    }
    for (rprof *p = r->retired, *n; p; p = n) {
        n = p->next;
        sluice__free64(p);
    }
    pthread_mutex_destroy(&r->prof_mu);
    sluice__free64(r);
}

/* "/name" (one slash, at the start) is a POSIX shared memory object. */
static bool is_shm_name(const char *path)
{
    return path[0] == '/' && path[1] != 0 && strchr(path + 1, '/') == NULL;
}

/* Open the object at path, making it (mode 0600) when there is none: made
 * exclusively (O_EXCL), never through a symbolic link (O_NOFOLLOW: errno
 * ELOOP), so that a name another user planted is refused, not followed.
 * Returns the descriptor, or -1 with errno. */
static int open_object(const char *path, bool shm)
{
    const int fl = O_RDWR | O_CLOEXEC | O_NOFOLLOW;
    for (int n = 0; n < 16; n++) { /* bounded: made, removed, made again... */
        int fd = shm ? shm_open(path, fl | O_CREAT | O_EXCL, 0600)
                     : open(path, fl | O_CREAT | O_EXCL, 0600);
        if (fd >= 0 || errno != EEXIST) return fd;
        fd = shm ? shm_open(path, fl, 0) : open(path, fl, 0);
        if (fd >= 0 || errno != ENOENT) return fd; /* ENOENT: removed since */
    }
    errno = EEXIST;
    return -1;
}

/* Whether an opened object may be used: a regular file (a shared memory
 * object is one), owned by this process's effective uid, writable by no
 * one else; else false with the reason, naming path, in err. */
static bool object_ok(const struct stat *sb, const char *path, const char *what, char *err,
                      size_t errlen)
{
    if (!S_ISREG(sb->st_mode)) {
        sluice__errf(err, errlen, "refused %s \"%s\": not a regular file", what, path);
        return false;
    }
    if (sb->st_uid != geteuid()) {
        sluice__errf(err, errlen, "refused %s \"%s\": owned by uid %u, not by this process's %u",
                     what, path, (unsigned)sb->st_uid, (unsigned)geteuid());
        return false;
    }
    if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
        sluice__errf(err, errlen,
                     "refused %s \"%s\": writable by its group or others (mode %04o; want "
                     "0600 or 0644)", what, path, (unsigned)(sb->st_mode & 07777));
        return false;
    }
    return true;
}

/* flock(fd, LOCK_EX), waiting at most 10 s (a millisecond between tries):
 * 0, ETIMEDOUT, or another errno. */
static int lock_object(int fd)
{
    const uint64_t start = sluice_now_ns();
    for (unsigned n = 0;; n++) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
        if (errno != EWOULDBLOCK && errno != EINTR) return errno;
        if (sluice_now_ns() - start > 10 * (uint64_t)1000000000 || n >= 100000) return ETIMEDOUT;
        const struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

sluice_table *sluice_table_open(const char *path, const char *spec, size_t max_keys,
                                size_t max_key_bytes, unsigned flags, char *err, size_t errlen)
{
    if (!path || !*path) {
        sluice__errf(err, errlen, "no path");
        return NULL;
    }
    layout L;
    if (make_layout(spec, max_keys, max_key_bytes, &L, err, errlen) != 0) return NULL;
    const bool shm = is_shm_name(path);
    const char *what = shm ? "shared memory" : "file";
    int fd = open_object(path, shm);
    if (fd < 0) {
        if (errno == ELOOP)
            sluice__errf(err, errlen, "cannot open %s \"%s\": it is a symbolic link (refused)",
                         what, path);
        else
            sluice__errf(err, errlen, "cannot open %s \"%s\": %s", what, path, strerror(errno));
        return NULL;
    }
    /* the size is set once, by whoever finds the object empty; the lock
     * (released by the kernel if its holder dies) keeps two from racing */
    struct stat sb;
    void *map = MAP_FAILED;
    size_t len = 0;
    int e = 0;
    if (fstat(fd, &sb) != 0) {
        e = errno;
        sluice__errf(err, errlen, "cannot stat %s \"%s\": %s", what, path, strerror(e));
        close(fd);
        return NULL;
    }
    if (!object_ok(&sb, path, what, err, errlen)) {
        close(fd);
        return NULL;
    }
    e = lock_object(fd);
    if (!e && fstat(fd, &sb) != 0) e = errno;
    if (!e && sb.st_size == 0 && ftruncate(fd, (off_t)L.need) != 0) e = errno;
    if (!e && sb.st_size == 0) sb.st_size = (off_t)L.need;
    if (e != ETIMEDOUT) (void)flock(fd, LOCK_UN);
    if (e) {
        sluice__errf(err, errlen, "cannot size \"%s\": %s", path,
                     e == ETIMEDOUT ? "another process held its lock (flock) for more than 10 s"
                                    : strerror(e));
        close(fd);
        return NULL;
    }
    len = (size_t)sb.st_size;
    if ((off_t)len != sb.st_size || len < HEAD_BYTES) {
        sluice__errf(err, errlen, "\"%s\" has %lld bytes; this table needs %zu", path,
                     (long long)sb.st_size, L.need);
        close(fd);
        return NULL;
    }
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    close(fd);
    if (map == MAP_FAILED) {
        sluice__errf(err, errlen, "cannot map \"%s\": %s", path, strerror(e));
        return NULL;
    }
    sluice_table *t = attach(map, len, spec, max_keys, max_key_bytes, flags, map, len, err, errlen);
    if (!t) {
        munmap(map, len);
        /* name the object in the reason */
        if (err && errlen) {
            char why[256];
            snprintf(why, sizeof why, "%s", err);
            sluice__errf(err, errlen, "\"%s\": %s", path, why);
        }
    }
    return t;
}

int sluice_table_unlink(const char *path)
{
    if (!path || !*path) return SLUICE_EINVAL;
    int rc = is_shm_name(path) ? shm_unlink(path) : unlink(path);
    if (rc == 0) return 0;
    switch (errno) {
    case ENOENT: return SLUICE_ENOENT; /* no such object */
    case EACCES:
    case EPERM:
    case EROFS:
    case EBUSY: return SLUICE_EBUSY; /* not ours to remove */
    default: return SLUICE_EINVAL; /* a bad name (ENAMETOOLONG, ENOTDIR, EISDIR...) */
    }
}
