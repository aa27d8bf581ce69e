/* rules.h -- what the metrics registry (metrics.c) reads of a rule set
 * (rules.c).
 *
 * Entry point: sluice__rules_each.
 */
#ifndef SLUICE_RULES_INTERNAL_H
#define SLUICE_RULES_INTERNAL_H

#include "base/internal.h"
#include "sluice/rules.h"

/* Call fn(arg, name, shadow, stats, table) for each rule of the current
 * set, in file order, all from one set (a reload waits for the walk to
 * end); `table` is a key rule's table (NULL for a global rule), valid for
 * the call only.  fn must not call back into the rule set. */
typedef void (*sluice__rules_fn)(void *arg, const char *name, bool shadow,
                                 const sluice_rule_stats *st, const sluice_table *table);
SLUICE__INTERNAL void sluice__rules_each(const sluice_rules *rs, sluice__rules_fn fn,
                                         void *arg);

#endif /* SLUICE_RULES_INTERNAL_H */
