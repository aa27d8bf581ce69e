/* sluice/rules.h -- rule sets: named limits from a text file, decided as one
 * composite per request, reloaded atomically while decisions run.
 *
 * A rule set holds named rules.  A rule is a limit spec (the grammar of
 * sluice.h), a scope -- `global` (one limiter for every request) or `key`
 * (a table: one limiter per key, at most max_keys keys, a full-table
 * policy) -- per-key overrides (another spec for some keys of a key rule)
 * and a `shadow` flag.  A request names the rules and keys it is subject to
 * and is decided against all of them at once, all or nothing, as
 * sluice_composite_try_acquire_at() decides (docs/composite.md, "Several limits on
 * one request").  A shadow rule is a dry run (nginx's limit_req_dry_run,
 * envoy's shadow_mode): it is decided and counted, but never refuses.
 *
 * The file format (docs/rules.md, "Rule files", has a complete example): one
 * directive a line, words separated by blanks, `#` to the end of the line a
 * comment, specs in double quotes.
 *
 *     rule NAME global "SPEC" [shadow]
 *     rule NAME key "SPEC" [max_keys=N] [policy=refuse|evict-lru] [shadow]
 * (SPEC may be `concurrency N [lease=D]`: see "concurrency rules" below)
 *     override NAME KEY "SPEC"
 *
 * A reload replaces the whole set while other threads decide; each decision
 * uses exactly one set, the old or the new.  Rules whose name stays keep
 * their state and counters (docs/rules.md says how a changed spec carries it).
 *
 * Included by nothing: include it beside (or instead of) sluice.h; it
 * brings in sluice.h for sluice_result and the error codes.  C or C++.
 */
#ifndef SLUICE_RULES_H
#define SLUICE_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../sluice.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility push(default)
#endif

typedef struct sluice_rules sluice_rules; /* opaque */

/* Bounds of a rule file.  A rule name is 1 .. SLUICE_RULE_NAME_MAX bytes of
 * ASCII letters, digits and `_ - . :`, starting with a letter or a digit.
 * A file holds at most SLUICE_RULES_MAX rules and each key rule at most
 * SLUICE_RULE_OVERRIDES_MAX overrides.  A rule set knows at most
 * SLUICE_RULES_NAMES_MAX distinct rule names over its life (every name any
 * of its loads defined: a name keeps its id for good, see
 * sluice_rules_find). */
#define SLUICE_RULE_NAME_MAX 64
#define SLUICE_RULES_MAX 1024
#define SLUICE_RULE_OVERRIDES_MAX 1024
#define SLUICE_RULES_NAMES_MAX 65536

/* The default max_keys of a key rule, and the largest a rule file may ask
 * (2^24: a table of that many keys reserves 1 to 1.6 GB of address space;
 * a larger one fails for want of memory on most machines, so the parser
 * refuses it and `sluice check` agrees with the load). */
#define SLUICE_RULE_DEFAULT_MAX_KEYS 100000
#define SLUICE_RULE_MAX_KEYS_MAX 16777216

/* The largest rule file sluice_rules_new_file() and friends read (16 MiB):
 * a larger one (or an endless one, such as /dev/zero) is refused. */
#define SLUICE_RULES_FILE_MAX ((size_t)16 << 20)

/* Flags for sluice_rules_new(). */
#define SLUICE_RULES_RECLAIM_WHEN_FULL 1u /* every key rule's table is made
                                   * with SLUICE_TABLE_RECLAIM_WHEN_FULL (for
                                   * callers whose times are out of order
                                   * across keys, such as a replayed trace);
                                   * every table now reclaims so: accepted,
                                   * changes nothing */
#define SLUICE_RULES_ALLOW_EMPTY 2u /* accept a text with no rules (a set
                                   * that limits nothing); without it
                                   * sluice_rules_new() and every reload
                                   * refuse such a text, so that a file
                                   * truncated while a tool rewrites it
                                   * cannot turn limiting off */

/* Make a rule set from the text [text, text + len) (no NUL needed; a NUL
 * byte inside is an error).  Returns NULL when the text is refused or
 * memory runs out; then, when errlen > 0, `err` receives a NUL-terminated
 * one-line reason that starts with the line number and quotes the
 * offending token, e.g.
 *     line 3: bad spec "token-bucket 10/s burts=5": unknown option "burts=5"
 *     line 7: unknown rule "per-clent"
 * `flags`: 0, SLUICE_RULES_RECLAIM_WHEN_FULL, SLUICE_RULES_ALLOW_EMPTY.  A
 * text with no rules (empty, or comments only) is refused, with the message
 *     no rules in the text: a set without rules limits nothing (...)
 * unless `flags` has SLUICE_RULES_ALLOW_EMPTY.  Each global rule gets a
 * sluice_limiter, each key rule a sluice_table (made with
 * SLUICE_TABLE_EVICT_LRU for policy=evict-lru) and its overrides
 * (sluice_table_override_set_at).  An override must keep its rule's
 * algorithm and sliding-wheel slot width, and its state must fit the
 * table's entries (16 bytes when the rule's own spec packs into 16 bytes);
 * the validation that checks this is sluice_rules_check's, so that a text
 * it accepts fails here only for want of memory.  The caller owns the
 * result (sluice_rules_free).  Thread-safe. */
sluice_rules *sluice_rules_new(const char *text, size_t len, unsigned flags, char *err,
                               size_t errlen);

/* sluice_rules_new() on the contents of the file `path`.  The file is read
 * to its end first, then checked, then made: a file that cannot be read, a
 * directory, a file larger than SLUICE_RULES_FILE_MAX, or a regular file
 * whose size or modification time changed while it was read (a tool still
 * writing it) is refused with its name and the reason in err, e.g.
 *     cannot read "/etc/sluice": is a directory
 *     "/dev/zero" is larger than 16 MiB (16777216 bytes)
 * Thread-safe. */
sluice_rules *sluice_rules_new_file(const char *path, unsigned flags, char *err,
                                    size_t errlen);

/* Free the rule set and every limiter and table it made.  NULL is a no-op.
 * No other call may be using `rs` (nor a metrics registry holding it: see
 * sluice_metrics_add_rules). */
void sluice_rules_free(sluice_rules *rs);

/* Check a rule file's text without keeping anything: 0 when
 * sluice_rules_new(text, len, SLUICE_RULES_ALLOW_EMPTY) accepts it (it may
 * still run out of memory), else SLUICE_EINVAL with the reason in err, as
 * sluice_rules_new() writes it, or SLUICE_ENOMEM.  It runs the load's own
 * validation: the syntax, every spec and option, and each key rule's
 * overrides set on a scratch table of one key (freed before the return),
 * so that what it accepts loads.  A text with no rules is accepted here
 * (nrules 0); sluice_rules_check_flags() without SLUICE_RULES_ALLOW_EMPTY
 * refuses it as the load does.  `nrules` and `noverrides` (may be NULL)
 * receive the counts of a good text.  Thread-safe. */
int sluice_rules_check(const char *text, size_t len, size_t *nrules, size_t *noverrides,
                       char *err, size_t errlen);

/* sluice_rules_check() with the flags sluice_rules_new() takes: 0 exactly
 * when sluice_rules_new(text, len, flags) accepts the text (memory
 * permitting).  Without SLUICE_RULES_ALLOW_EMPTY a text with no rules is
 * SLUICE_EINVAL.  Thread-safe. */
int sluice_rules_check_flags(const char *text, size_t len, unsigned flags, size_t *nrules,
                             size_t *noverrides, char *err, size_t errlen);

/* sluice_rules_check_flags() on the contents of the file `path`, read as
 * sluice_rules_new_file() reads it (same refusals, same messages, the
 * file's name in them).  `sluice check FILE` uses it.  Thread-safe. */
int sluice_rules_check_file(const char *path, unsigned flags, size_t *nrules,
                            size_t *noverrides, char *err, size_t errlen);

/* Replace the rule set's rules with those of `text` at `now_ns`, while
 * other threads decide.  Atomic: every decision uses the old set or the
 * new one as a whole, never a mix; a text refused (err as for
 * sluice_rules_new, return SLUICE_EINVAL) or memory running out
 * (SLUICE_ENOMEM) changes nothing.  Per rule, by name:
 *  - a rule whose scope, spec, max_keys, policy and overrides all stay
 *    keeps its limiter or table as it is (all its state); a change of the
 *    shadow flag alone is such a rule too;
 *  - a rule whose spec or overrides change and whose limit can carry its
 *    state keeps it (docs/c-api.md, "Changing a limit while it runs"): a
 *    global rule's limiter is changed with
 *    sluice_limiter_reconfigure_at(now_ns); a key rule's table with
 *    sluice_table_reconfigure_at(now_ns) when its spec changes, and
 *    sluice_table_override_set_at / _remove_at(now_ns) for each override
 *    added, changed or removed (a key losing its override goes back to the
 *    rule's spec, keeping its state);
 *  - a change of algorithm, of sliding-wheel's slot width, of scope, of
 *    max_keys or of the policy starts the rule fresh (a new limiter or
 *    table, as for a new rule);
 *  - every rule keeps its counters (sluice_rules_stats) while its name
 *    stays; a new name gets a new id and zeroed counters;
 *  - a rule that is gone is freed once no decision uses it (before the
 *    call returns).
 * Decisions running meanwhile: when some rule changes in place (a
 * reconfigured limiter or table, overrides set or removed), the decisions
 * on the set that arrive during the switch wait for it (spinning, then
 * yielding the CPU, until the new set is published: a few microseconds
 * plus the changes themselves, each O(1) per rule and override changed);
 * when nothing changes in place the switch is one pointer swap and no
 * decision waits.  For each change in place the reload first makes a spare
 * fresh limit of the new definition (for a key rule, a table of max_keys:
 * address space, its pages untouched), taken if the change runs out of
 * memory at the switch, and freed after it.  The call
 * itself waits until no decision still uses the old set.  Reloads of one
 * rule set are serialised (a mutex).  Thread-safe, but must not be called
 * from a thread that is inside a decision on the same set.
 * A text with no rules is refused (SLUICE_EINVAL, nothing changed): a
 * reload to an empty set would stop every limit, and a later reload of the
 * real file would start every rule fresh.  sluice_rules_reload_flags_at()
 * with SLUICE_RULES_ALLOW_EMPTY accepts it.
 * Returns 0, SLUICE_EINVAL (a bad text or a NULL rs; nothing changed) or
 * SLUICE_ENOMEM (nothing changed). */
int sluice_rules_reload_at(sluice_rules *rs, const char *text, size_t len, uint64_t now_ns,
                           char *err, size_t errlen);

/* sluice_rules_reload_at() with flags: 0 or SLUICE_RULES_ALLOW_EMPTY (the
 * set's own SLUICE_RULES_RECLAIM_WHEN_FULL, given to sluice_rules_new,
 * stays; another flag is SLUICE_EINVAL).  Thread-safe. */
int sluice_rules_reload_flags_at(sluice_rules *rs, const char *text, size_t len, unsigned flags,
                                 uint64_t now_ns, char *err, size_t errlen);

/* sluice_rules_reload_at() on the contents of `path`, read to its end and
 * refused as sluice_rules_new_file() refuses (SLUICE_EINVAL with the file's
 * name in err; nothing changed). */
int sluice_rules_reload_file_at(sluice_rules *rs, const char *path, uint64_t now_ns,
                                char *err, size_t errlen);

/* sluice_rules_reload_file_at() with flags, as sluice_rules_reload_flags_at. */
int sluice_rules_reload_file_flags_at(sluice_rules *rs, const char *path, unsigned flags,
                                      uint64_t now_ns, char *err, size_t errlen);

/* What a reload would do with one rule (sluice_rules_diff). */
enum {
    SLUICE_RULE_KEPT = 0,    /* unchanged: keeps its limiter or table as is */
    SLUICE_RULE_CARRIED = 1, /* changed in place: every key keeps its state */
    SLUICE_RULE_FRESH = 2,   /* made anew: every key's state starts fresh (a
                              * full bucket, an empty window: every client
                              * gets a fresh burst) */
    SLUICE_RULE_ADDED = 3,   /* a new name: starts fresh */
    SLUICE_RULE_REMOVED = 4  /* gone: no longer limits */
};

/* Called by sluice_rules_diff once per rule, in the new text's order, then
 * for each removed rule in the old text's order: the rule's name, what the
 * reload would do (SLUICE_RULE_KEPT .. _REMOVED) and, for _CARRIED and
 * _FRESH, why in a short phrase ("max_keys 1000 -> 2000", "the algorithm
 * changes"; "" otherwise).  Both strings live for the call only. */
typedef void (*sluice_rules_diff_fn)(void *arg, const char *name, int what, const char *why);

/* Tell, without changing anything, what reloading a set loaded from `old`
 * with `text` would do to each rule's state: the same decisions, made by
 * the same code, as sluice_rules_reload_at (whether a change of spec or of
 * overrides carries the state is tried on scratch limits).  Both texts are
 * checked as sluice_rules_check_flags(flags) checks them; `old` always
 * with SLUICE_RULES_ALLOW_EMPTY.  Returns 0 after calling fn for every
 * rule, else SLUICE_EINVAL (err: "old: " or "new: " and the reason) or
 * SLUICE_ENOMEM.  `sluice check --against OLD FILE` uses it.  Thread-safe. */
int sluice_rules_diff(const char *old, size_t oldlen, const char *text, size_t len,
                      unsigned flags, sluice_rules_diff_fn fn, void *arg, char *err,
                      size_t errlen);

/* sluice_rules_diff() on the contents of two files, each read as
 * sluice_rules_new_file() reads it (same refusals, the file's name in
 * err).  Thread-safe. */
int sluice_rules_diff_files(const char *old_path, const char *path, unsigned flags,
                            sluice_rules_diff_fn fn, void *arg, char *err, size_t errlen);

/* The id of the rule named `name` (NUL-terminated): >= 0, valid for the
 * rule set's life -- a name keeps its id across reloads, also while a
 * reload has taken it away and after it comes back.  SLUICE_ENOENT when no
 * load of this set ever defined the name; SLUICE_EINVAL for NULL
 * arguments.  Resolve names once and decide by id.  Thread-safe. */
int32_t sluice_rules_find(const sluice_rules *rs, const char *name);

/* One limit of a request: the rule's id (sluice_rules_find) and the key
 * (keylen bytes, any length: a key longer than SLUICE_MAX_KEY_BYTES is
 * held by its digest, as in a table -- include/sluice.h, "Long keys"; key
 * may be NULL when keylen is 0).  A global rule ignores the key.  The key bytes need only live for the
 * call. */
typedef struct sluice_rule_key {
    int32_t rule;
    const void *key;
    size_t keylen;
} sluice_rule_key;

/* What one rule did with a request (sluice_rule_outcome.decision, and the
 * four counters of sluice_rule_stats). */
enum {
    SLUICE_RULE_ALLOWED = 0,          /* allowed and charged */
    SLUICE_RULE_DENIED = 1,           /* refused by this rule (among others
                                       * perhaps); nothing charged anywhere */
    SLUICE_RULE_DENIED_SHADOW = 2,    /* a shadow rule that would have refused
                                       * a request the other rules allowed; the
                                       * request went through, the shadow rule
                                       * was charged nothing */
    SLUICE_RULE_DENIED_ELSEWHERE = 3, /* the request was refused by another
                                       * rule: nothing charged here (an
                                       * enforcing rule that would have allowed
                                       * it, or a shadow rule, not decided) */
    SLUICE_RULE_ABSENT = 4            /* the id names no rule of the current
                                       * set (a reload removed it): skipped,
                                       * not counted */
};

/* One rule's answer to a request, in sluice_rules_decide_at's per_rule.
 *  decision  SLUICE_RULE_*.
 *  shadow    the rule is a shadow rule.
 *  res       the rule's own answer, as sluice_composite_try_acquire_at's
 *            per_limit (for DENIED_ELSEWHERE: allowed true and the
 *            remaining without the permits for an enforcing rule that
 *            would have allowed; all zero for an undecided shadow rule;
 *            for ABSENT all zero). */
typedef struct sluice_rule_outcome {
    int decision;
    bool shadow;
    sluice_result res;
} sluice_rule_outcome;

/* Decide a request for `permits` at `now_ns` against the n rules of
 * req[0..n-1] (1 <= n <= SLUICE_COMPOSITE_MAX), in the rule set as it is
 * at the call (one set for the whole decision, even while a reload runs).
 *
 * The enforcing (non-shadow) rules are one composite: the request is
 * allowed iff each of them allows it, and only then charged to each; a
 * refusal by one charges none (docs/composite.md, "Several limits on one
 * request").  Then, only when the request was allowed, each shadow rule is
 * asked on its own: it is charged when it would admit the request (so its
 * state follows the traffic the service really lets through, as it would
 * if it were enforced last) and counts DENIED_SHADOW, charging nothing,
 * when it would refuse.  A shadow rule never makes a request refused.
 * When the request was refused, no shadow rule is decided or charged (each
 * counts DENIED_ELSEWHERE).  The shadow rules are decided after the
 * composite, not inside it: between the two, other threads' decisions may
 * come, and each shadow limit still decides exactly for one order of its
 * own calls.
 *
 * Returns true when allowed.  `res` (may be NULL) receives the combination
 * of the enforcing rules as sluice_composite_try_acquire_at() gives it
 * (wait_ns the largest, remaining the smallest, retry_after_ns the largest
 * of the refusing rules', -1 if any is -1; error the first limit's error);
 * with no enforcing rule in the request (only shadow or absent ones) it is
 * allowed with remaining UINT64_MAX.  `per_rule` (may be NULL; n entries,
 * in req order) receives each rule's outcome.
 *
 * A bad call decides nothing, counts nothing and returns false with
 * res->error = SLUICE_EINVAL: rs or req NULL, n out of range, an id that
 * no load ever gave, a NULL key with keylen > 0, the same global rule (or the same key of one key rule)
 * twice, or a concurrency rule (its permits are held until released:
 * decide it with sluice_rules_acquire_at).  An id whose rule the current set does not hold is skipped
 * (outcome SLUICE_RULE_ABSENT): after a reload that removed a rule,
 * requests naming it are no longer limited by it.
 *
 * Each rule's counters count the request once, with its outcome (a probe,
 * permits = 0, is allowed everywhere and counts as allowed with 0
 * permits).  Concurrency: as sluice_composite_try_acquire_at() for the
 * enforcing rules; the rule set itself costs each decision two atomic
 * additions on a cache line of the calling thread's own (a reader count,
 * so that a reload knows when the old set is no longer used) and the
 * per-rule counters plain stores on that thread's stripe.  Thread-safe. */
bool sluice_rules_decide_at(sluice_rules *rs, const sluice_rule_key *req, size_t n,
                            uint64_t permits, uint64_t now_ns, sluice_result *res,
                            sluice_rule_outcome *per_rule);

/* sluice_rules_decide_at() now, on the clock of the set's rules:
 * sluice_now_ns() (CLOCK_MONOTONIC), or CLOCK_REALTIME (ns since the Unix
 * epoch) for a set of calendar quotas (`tz=`).  One time serves every rule
 * of a request, so a rule text that mixes calendar quotas with other rules
 * is refused when loaded.  Thread-safe. */
bool sluice_rules_decide(sluice_rules *rs, const sluice_rule_key *req, size_t n,
                         uint64_t permits, sluice_result *res, sluice_rule_outcome *per_rule);

/* ---- concurrency rules ---------------------------------------------------
 *
 * A rule whose spec is `concurrency N [lease=D]` (sluice/concurrency.h;
 * docs/decisions.md 3.9) limits the requests in flight: a global rule is
 * one sluice_concurrency, a key rule a sluice_concurrency_table of max_keys
 * keys (policy=refuse only: a key holding permits is never dropped; no
 * overrides).  Such a rule is decided by sluice_rules_acquire_at, which
 * fills a sluice_rules_permit, and the permit is given back by
 * sluice_rules_release_at.
 *
 * Reloads.  The permit carries the limit it was taken on (and the rule's
 * id and the set's generation at the time), so its release goes there
 * whatever reloads happened since: never lost, never released twice, never
 * released on another limit.  A reload that keeps the rule's spec (and
 * scope and max_keys) keeps its limit: permits held before count after.  A
 * reload that changes N or the lease changes the limit in place
 * (sluice_concurrency_reconfigure_at): the permits held count against the
 * new N, so at most max(held, new N) are in flight (docs/decisions.md
 * 3.9).  A reload that adds or removes the lease, changes the scope or
 * max_keys, or removes the rule, gives the rule a fresh limit (or none):
 * then the new N on the new limit plus the permits still held on the old
 * one, which only fall.  A limit taken out of use -- by a reload or by
 * sluice_rules_free -- is freed by the release of its last permit (each
 * permit holding permits keeps it), or at once when none is held. */

/* A permit of a rule set: filled by sluice_rules_acquire_at, owned by the
 * caller, given back by sluice_rules_release_at -- once, through this
 * handle, not a copy (while it holds permits it keeps its limit alive, and
 * its release lets go of that; a copy released again would let go twice).
 * `pm.permits` is 0 when it holds nothing.  Valid after sluice_rules_free
 * (its limit lives until it is released). */
typedef struct sluice_rules_permit {
    sluice_permit pm;    /* the concurrency limit's permit (its owner) */
    int32_t conc_rule;   /* the concurrency rule's id, or -1 */
    uint64_t generation; /* the set's generation it was taken in */
} sluice_rules_permit;

/* Decide a request against the rules of req[0..n) at now_ns, as
 * sluice_rules_decide_at, where at most one of them may be a concurrency
 * rule.  An enforcing concurrency rule is asked first: when it refuses,
 * the request is refused with its answer in res and no other rule is asked
 * (each counts DENIED_ELSEWHERE, res zero); when it admits and the other
 * enforcing rules refuse, its permits go back at once (it counts
 * DENIED_ELSEWHERE).  When the request is allowed, *hold holds the
 * concurrency rule's permits, and res's remaining is the least of the
 * rules'.  A shadow concurrency rule counts but never refuses: when the
 * other rules allowed, it takes the permits if they fit (ALLOWED; hold
 * holds them, and they count as any held permits) and otherwise counts
 * DENIED_SHADOW and hold holds nothing.  A request with no concurrency
 * rule is sluice_rules_decide_at's, hold holding nothing.  A bad call
 * (those of sluice_rules_decide_at but a concurrency rule; two concurrency
 * rules; a NULL hold) returns false with res->error = SLUICE_EINVAL and
 * takes nothing.  Release *hold in every case (a permit holding nothing
 * gives SLUICE_ENOENT).  Thread-safe, also during reloads. */
bool sluice_rules_acquire_at(sluice_rules *rs, const sluice_rule_key *req, size_t n,
                             uint64_t permits, uint64_t now_ns, sluice_rules_permit *hold,
                             sluice_result *res, sluice_rule_outcome *per_rule);

/* Give back what *hold holds, at now_ns, on the limit it was taken on:
 * sluice_permit_release_at(&hold->pm, now_ns) -- 0, or SLUICE_ENOENT when
 * it holds nothing (refused, released, a lease that ended); SLUICE_EINVAL
 * for NULL.  A handle that held permits lets go of its limit here (the
 * last one of a limit a reload or sluice_rules_free took out of use frees
 * it).  Thread-safe, also during reloads and sluice_rules_free. */
int sluice_rules_release_at(sluice_rules_permit *hold, uint64_t now_ns);

/* The shadow rule of sluice_rules_decide_at() on limits of the caller's
 * own, without a rule set (the nginx module's `sluice ZONE shadow`):
 * decide a request for `permits` at `now_ns` against refs[0..n-1]
 * (1 <= n <= SLUICE_COMPOSITE_MAX), where the limits with shadow[i] true
 * are dry runs.  The others are one composite, all or nothing, as
 * sluice_composite_try_acquire_at() (a single one is that limit's own
 * decision); then, only when it allowed, each shadow limit is asked on its
 * own and charged when it would admit; a shadow limit never refuses.  When
 * the request was refused no shadow limit is decided or charged.
 *
 * Returns true when allowed.  `res` (may be NULL) receives the enforcing
 * limits' combination as sluice_composite_try_acquire_at() gives it (with
 * none, allowed with remaining UINT64_MAX).  `per` (may be NULL; n entries,
 * in refs order) receives each limit's outcome as sluice_rule_outcome
 * describes it: SLUICE_RULE_ALLOWED, _DENIED, _DENIED_ELSEWHERE, or
 * _DENIED_SHADOW for a shadow limit that would have refused (its res then
 * says why: res.error is not 0 when it could not decide, e.g. no memory
 * for a new key).  A bad call -- refs or shadow NULL, n out of range, a
 * ref naming neither or both a limiter and a table, a NULL key with
 * keylen > 0, the same limit twice -- decides nothing and returns false
 * with res->error SLUICE_EINVAL and `per` zeroed.  Thread-safe, as
 * sluice_composite_try_acquire_at(). */
bool sluice_shadow_try_acquire_at(const sluice_limit_ref *refs, const bool *shadow, size_t n,
                                  uint64_t permits, uint64_t now_ns, sluice_result *res,
                                  sluice_rule_outcome *per);

/* The counters of one rule, since its name first appeared in the set: the
 * requests (and their permits) by outcome, SLUICE_RULE_ALLOWED ..
 * SLUICE_RULE_DENIED_ELSEWHERE.  Exact under any concurrency (striped per
 * thread as sluice_stats are); read while decisions run, the four may come
 * from slightly different instants.  Permits saturate at UINT64_MAX. */
typedef struct sluice_rule_stats {
    uint64_t requests[4];
    uint64_t permits[4];
    /* A concurrency rule of the current set (0 and 0 for any other rule):
     * the permits it holds now, each key's as of its latest call (a key
     * rule: over all its keys; a gauge, not a counter), and its N (a key
     * rule's: per key). */
    uint64_t held;
    uint64_t limit;
    uint64_t reserved_[2]; /* zero: room to grow in a minor version */
} sluice_rule_stats;

/* What the current set says of one rule.
 *  name       the rule's name, NUL-terminated.
 *  id         as sluice_rules_find.
 *  global     true for a global rule, false for a key rule.
 *  shadow     a shadow rule.
 *  spec       the canonical spec (as sluice_spec_check writes it).
 *  max_keys   a key rule's max_keys (0 for a global rule).
 *  evict_lru  a key rule's policy is evict-lru.
 *  overrides  a key rule's overrides.
 *  line       the line of the file that defined it.
 *  stats      its counters. */
typedef struct sluice_rule_info {
    char name[SLUICE_RULE_NAME_MAX + 1];
    int32_t id;
    bool global;
    bool shadow;
    char spec[SLUICE_SPEC_MAX];
    uint64_t max_keys;
    bool evict_lru;
    size_t overrides;
    size_t line;
    sluice_rule_stats stats;
    uint64_t reserved_[4];
} sluice_rule_info;

/* The number of rules in the current set (0 for NULL).  Thread-safe. */
size_t sluice_rules_count(const sluice_rules *rs);

/* How many times the set was loaded: 1 after sluice_rules_new(), plus one
 * per successful reload (0 for NULL).  Thread-safe. */
uint64_t sluice_rules_generation(const sluice_rules *rs);

/* Describe the rule at `index` (0 .. sluice_rules_count - 1, in file order)
 * of the current set into *out.  Returns 0, SLUICE_ENOENT past the last
 * rule, SLUICE_EINVAL for NULL arguments.  A reload between two calls may
 * change what an index names.  Thread-safe. */
int sluice_rules_info(const sluice_rules *rs, size_t index, sluice_rule_info *out);

/* The counters of the rule `id` (whether or not the current set holds it:
 * a removed rule's counters stay readable, frozen).  Returns 0,
 * SLUICE_ENOENT for an id no load gave, SLUICE_EINVAL for NULL arguments.
 * Thread-safe. */
int sluice_rules_stats(const sluice_rules *rs, int32_t id, sluice_rule_stats *out);

/* Give every key rule's table a sketch of the keys it refuses most, as
 * sluice_table_set_top(table, counters, max_key_bytes) does (bounds and
 * memory there): the tables of the current set now, and every table a
 * later reload makes.  Call it before the decisions whose refusals should
 * count.  Returns 0, SLUICE_EINVAL (rs NULL, a bound out of range, or
 * called before on this set) or SLUICE_ENOMEM (then some tables may have
 * their sketch; a later reload does not add any).  Thread-safe (serialised
 * with reloads). */
int sluice_rules_set_top(sluice_rules *rs, size_t counters, size_t max_key_bytes);

/* The at most `max` keys the table of key rule `id` refused most, as
 * sluice_table_top_refused() gives them, from the current set.  Returns 0,
 * SLUICE_ENOENT (the current set holds no key rule `id`, or its table has
 * no sketch: sluice_rules_set_top; *n = 0), SLUICE_EINVAL (rs or n NULL, out
 * NULL with max > 0).  Thread-safe. */
int sluice_rules_top_refused(const sluice_rules *rs, int32_t id, sluice_top_entry out[],
                             size_t max, size_t *n);

/* The table counters of key rule `id` in the current set, as
 * sluice_table_stats_get() gives them: keys held, reclaimed, evicted, and
 * `refused` -- the requests refused because the table was full of keys in
 * use (policy=refuse), which its rule counts as denied too.  A rule that
 * starts fresh on a reload (sluice_rules_reload_at) starts these at zero;
 * sluice_rules_stats counts on.  Returns 0, SLUICE_ENOENT (no key rule
 * `id` in the current set), SLUICE_EINVAL (NULL arguments).  Thread-safe. */
int sluice_rules_table_stats(const sluice_rules *rs, int32_t id, sluice_table_stats *out);

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_RULES_H */
