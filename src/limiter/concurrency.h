/* concurrency.h -- what the concurrency limit (concurrency.c) gives the
 * per-key table of such limits (conc_table.c).
 *
 *   sluice__conc_make    a limit from a parsed spec
 *   sluice__conc_reuse   give an idle limit to another key
 *   sluice__conc_async_id_at   a queued acquire with the table's id
 *   sluice__conc_hold, _unhold   a decision together with rate limits
 *   sluice__conc_prepare, _apply   a change in place (a table's keys)
 *   sluice__conc_ref, _unref, sluice__ctab_ref, _unref   a rule set's references */
#ifndef SLUICE_LIMITER_CONCURRENCY_H
#define SLUICE_LIMITER_CONCURRENCY_H

#include "base/internal.h"
#include "alg/concurrency.h"

/* A limit from a parsed profile: NULL when memory runs out. */
SLUICE__INTERNAL sluice_concurrency *sluice__conc_make(const sluice__conc_profile *cp);

/* If the limit holds nothing at now_ns (with a lease: every lease has
 * ended by then), nobody waits on it and no queued acquire of it is still
 * to be called back: make it a fresh limit for another
 * key -- bump its epoch (a handle of the earlier key can then never release
 * here) and reset its clock -- and return true.  Else change nothing and
 * return false.  Called under the table's lock, with no acquire
 * on c running (non-blocking and queued acquires on a table's keys run
 * under that lock; a blocking one pins its key's entry, which the table
 * then never passes here); releases, and callbacks of queued acquires,
 * may run at once. */
SLUICE__INTERNAL bool sluice__conc_reuse(sluice_concurrency *c, uint64_t now_ns);

/* sluice_acquire_permit_async_at with the request's id chosen by the
 * caller (>= 1, unique within c for its life: a table's ids are unique
 * within the table, conc_table.c), so that the id names the key too. */
SLUICE__INTERNAL int sluice__conc_async_id_at(sluice_concurrency *c, sluice_wheel *wh,
                                              uint64_t permits, uint64_t now_ns,
                                              uint64_t deadline_ns, sluice_permit_fn fn,
                                              void *arg, uint64_t id);

/* A decision of c together with other limits (composite/conc_with.c).
 * _hold: at now_ns, if c would admit `permits`, hold it -- no other call
 * on it proceeds until _unhold -- and return true with c's answer in *res
 * (remaining after the admission) and what _unhold needs in *snap; else
 * return false with c's refusal in *res, holding nothing.  _unhold: take
 * the permits (commit, filling *pm) or not, and let c go.  Nothing may
 * block between the two. */
SLUICE__INTERNAL bool sluice__conc_hold(sluice_concurrency *c, uint64_t permits, uint64_t now_ns,
                                        uint64_t *snap, sluice_result *res);
SLUICE__INTERNAL void sluice__conc_unhold(sluice_concurrency *c, uint64_t snap, bool commit,
                                          uint64_t permits, sluice_permit *pm);

/* A change in place to profile cp (docs/decisions.md 3.9), in two steps so
 * that a table can change all its keys or none: _prepare checks it (the
 * lease on or off cannot change: SLUICE_EINVAL, err says so) and allocates
 * what a larger leased N needs into *spare (SLUICE_ENOMEM); _apply, which
 * cannot fail, makes the change at now_ns.  No other change of c may run
 * between or during the two; decisions and releases may. */
SLUICE__INTERNAL int sluice__conc_prepare(sluice_concurrency *c, const sluice__conc_profile *cp,
                                          sluice__leases *spare, char *err, size_t errlen);
SLUICE__INTERNAL void sluice__conc_apply(sluice_concurrency *c, const sluice__conc_profile *cp,
                                         sluice__leases *spare, uint64_t now_ns);

/* References of a rule set (rules/rules.c): the maker holds one; _ref adds
 * one (for a permit handle), _unref drops one and frees the limit -- a
 * table's limit: its table, whose references its limits share -- when it
 * was the last.  After the first _unref by the maker no call but releases
 * and _unref may reach the limit. */
SLUICE__INTERNAL void sluice__conc_set_home(sluice_concurrency *c, sluice_concurrency_table *t);
SLUICE__INTERNAL void sluice__conc_ref(sluice_concurrency *c);
SLUICE__INTERNAL void sluice__conc_unref(sluice_concurrency *c);
SLUICE__INTERNAL void sluice__ctab_ref(sluice_concurrency_table *t);
SLUICE__INTERNAL void sluice__ctab_unref(sluice_concurrency_table *t);

#endif /* SLUICE_LIMITER_CONCURRENCY_H */
