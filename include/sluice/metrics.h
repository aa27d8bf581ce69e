/* sluice/metrics.h -- the library's counters in the Prometheus text format.
 *
 * A registry (sluice_metrics) holds named limiters, tables, timing wheels,
 * asynchronous queues and the objects of other libraries (sources: the
 * Redis tier); sluice_metrics_write() renders every counter they keep into a
 * caller's buffer in the Prometheus text exposition format, version 0.0.4,
 * ready to be served at /metrics or written to a file for node_exporter's
 * textfile collector.  Every series, its type, labels and meaning are listed
 * in docs/metrics.md; in short:
 *
 *   sluice_requests_total{limit,decision}   counter, decision allowed|denied
 *                                           (a probe counts as allowed)
 *   sluice_permits_total{limit,decision}    counter
 *   sluice_probes_total{limit}              counter (probes among requests)
 *   sluice_acquire_wait_seconds{limit}      histogram: the waits of the
 *                                           blocking acquires granted
 *   sluice_acquire_failed_total{limit,reason}  counter, reason
 *                                           timeout|cancelled|error
 *   sluice_async_queued{queue}              gauge
 *   sluice_async_wait_seconds{queue}        histogram: request to callback
 *   sluice_async_failed_total{queue,reason} counter, reason
 *                                           cancelled|refused|dropped
 *   sluice_table_keys{limit}                gauge
 *   sluice_table_keys_reclaimed_total{limit}  counter
 *   sluice_table_keys_evicted_total{limit}    counter
 *   sluice_table_keys_refused_total{limit}    counter
 *   sluice_table_refused_key_requests{limit,key}  gauge, estimated
 *   sluice_table_refused_key_error{limit,key}     gauge, its error bound
 *       (tables with a sketch, sluice_table_set_top: the
 *       SLUICE_METRICS_TOP_KEYS keys refused most)
 *   sluice_wheel_timers_pending{wheel}      gauge
 *   sluice_concurrency_held{limit}          gauge: permits held (concurrency
 *                                           limits, sluice/concurrency.h)
 *   sluice_concurrency_limit{limit}         gauge: N
 *   sluice_concurrency_waiting{limit}       gauge: blocking acquirers
 *   sluice_concurrency_recovered_permits_total{limit}  counter: permits of
 *                                           dead holders given back (shared
 *                                           regions)
 *   sluice_rule_requests_total{ruleset,rule,decision}, sluice_rule_permits_total,
 *   sluice_rule_shadow, sluice_rules_loads_total  (rule sets:
 *                                           sluice_metrics_add_rules)
 *   then the families of sources: objects of other libraries, added through
 *   sluice_metrics_add_source (the Redis tier's sluice_metrics_add_redis,
 *   in sluice/redis.h)
 *
 * The histograms' buckets are sluice_wait_stats's (sluice.h): le = 0.0001,
 * 0.00025, 0.0005, 0.001, ... 5, 10 and +Inf seconds, cumulative as the
 * format says; _sum is written in seconds with up to 9 decimals (exact).
 *
 * The `limit` label is the name a limiter or table was added under; the
 * `wheel` label a wheel's, the `queue` label a queue's.  Series are per object, never per key, so the
 * exposition's size depends only on how many objects were added -- except
 * the keys refused most, at most SLUICE_METRICS_TOP_KEYS per table, whose
 * `key` label is the key with backslashes doubled, bytes that are not
 * printable UTF-8 written as \xNN (two hex digits) and `\...` after a
 * key the sketch truncated (docs/metrics.md).
 *
 * The registry refers to the objects, it does not own them: remove an object
 * (sluice_metrics_remove) or free the registry before freeing the object.
 *
 * Included by sluice.h; it may also be included on its own (C or C++), and
 * then brings in sluice.h for the objects' types and the error codes.
 */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H

#include <stddef.h>

#include "../sluice.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility push(default)
#endif

typedef struct sluice_metrics sluice_metrics; /* opaque */

/* The most keys refused most that a table exposes (the top of its sketch). */
#define SLUICE_METRICS_TOP_KEYS 10

/* The longest name an object can be added under, in bytes. */
#define SLUICE_METRICS_NAME_MAX 256

/* Make an empty registry.  Returns NULL when memory runs out.  The caller
 * owns it and frees it with sluice_metrics_free().  Thread-safe. */
sluice_metrics *sluice_metrics_new(void);

/* Free the registry and its copies of the names; the objects it refers to
 * are left alone.  NULL is a no-op.  No other call may be using `m`. */
void sluice_metrics_free(sluice_metrics *m);

/* Add a limiter, a table, a timing wheel or an asynchronous queue under
 * `name`, which becomes the value of its series' `limit` label (limiters and
 * tables), `wheel` label (wheels) or `queue` label (queues).  The name is copied; it is 1 .. SLUICE_METRICS_NAME_MAX bytes of
 * valid UTF-8 with no control character other than tab and newline (a
 * carriage return would split the line for some parsers).  Backslash,
 * double quote and newline are escaped in the output as the format asks.
 * Limiters and tables share one set of names (their series share the
 * `limit` label); wheels and queues have their own.  `obj` must stay valid
 * until it is
 * removed or the registry is freed.
 * Returns 0, or
 *   SLUICE_EINVAL  m, obj or name NULL; a name empty, too long, not UTF-8
 *                  or with a control character; a name already used, or
 *                  an object already added;
 *   SLUICE_ENOMEM  out of memory (nothing added).
 * Thread-safe, also while sluice_metrics_write() runs. */
int sluice_metrics_add_limiter(sluice_metrics *m, const char *name,
                               const sluice_limiter *lim);
int sluice_metrics_add_table(sluice_metrics *m, const char *name,
                             const sluice_table *t);
int sluice_metrics_add_wheel(sluice_metrics *m, const char *name,
                             const sluice_wheel *w);
int sluice_metrics_add_queue(sluice_metrics *m, const char *name,
                             const sluice_queue *q);
/* Add a concurrency limit (sluice/concurrency.h) under `name`, the value of
 * its series' `limit` label (one set of names with limiters and tables): the
 * gauges sluice_concurrency_held (sluice_concurrency_held: as of its latest
 * call), sluice_concurrency_limit and sluice_concurrency_waiting.  Returns
 * and thread-safety as sluice_metrics_add_limiter. */
typedef struct sluice_concurrency sluice_concurrency; /* sluice/concurrency.h */
typedef struct sluice_concurrency_table sluice_concurrency_table;
int sluice_metrics_add_concurrency(sluice_metrics *m, const char *name,
                                   const sluice_concurrency *c);
/* Add a table of concurrency limits (sluice_concurrency_table) under
 * `name`, in the same `limit` label's names: sluice_concurrency_held (the
 * permits all its keys hold, each as of its latest call),
 * sluice_concurrency_limit (its N, per key) and sluice_table_keys.  Returns
 * and thread-safety as sluice_metrics_add_limiter. */
int sluice_metrics_add_concurrency_table(sluice_metrics *m, const char *name,
                                         const sluice_concurrency_table *t);
/* Add a table of concurrency limits in a shared region
 * (sluice_concurrency_region) under `name`, in the same `limit` label's
 * names: sluice_concurrency_held (the permits every process holds, over
 * all its keys, each as of its latest call), sluice_concurrency_limit (N,
 * per key), sluice_table_keys, sluice_concurrency_waiting (blocked
 * acquirers of every process, over all keys) and the counter
 * sluice_concurrency_recovered_permits_total (permits given back because
 * their holder process died).  Each handle of one region shows the same
 * numbers.  A write reads the region with sluice_concurrency_region_stats_get
 * (O(max_keys), a shard's lock at a time) for each of the three families
 * that need the keys.  Returns and thread-safety as
 * sluice_metrics_add_limiter. */
typedef struct sluice_concurrency_region sluice_concurrency_region;
int sluice_metrics_add_concurrency_region(sluice_metrics *m, const char *name,
                                          const sluice_concurrency_region *r);

/* Add a rule set (sluice/rules.h) under `name`, the value of its series'
 * `ruleset` label; rule sets have their own set of names.  Each rule of the
 * set's current version gets its series, labelled `rule` with the rule's
 * name (so a reload that adds or removes rules adds or removes series):
 *
 *   sluice_rule_requests_total{ruleset,rule,decision}  counter
 *   sluice_rule_permits_total{ruleset,rule,decision}   counter
 *       decision: allowed, denied (refused by this rule), denied_shadow (a
 *       shadow rule would have refused; the request went through),
 *       denied_elsewhere (refused by another rule; nothing taken here)
 *   sluice_rule_shadow{ruleset,rule}                    gauge, 1 or 0
 *   sluice_rules_loads_total{ruleset}                   counter, loads
 *
 * Each key rule's table adds the table families, labelled by rule set and
 * rule instead of `limit` (a rule's requests are counted by the families
 * above, so sluice_requests_total is not repeated):
 *
 *   sluice_table_keys{ruleset,rule}                     gauge
 *   sluice_table_keys_reclaimed_total{ruleset,rule}     counter
 *   sluice_table_keys_evicted_total{ruleset,rule}       counter
 *   sluice_table_keys_refused_total{ruleset,rule}       counter: refused
 *       because the table was full (among the rule's `denied`)
 *   sluice_table_refused_key_requests{ruleset,rule,key} gauge, and
 *   sluice_table_refused_key_error{ruleset,rule,key}    gauge: the keys
 *       refused most, when the set has sketches (sluice_rules_set_top)
 *
 * A rule that a reload starts fresh gets a new table: its table series
 * start again from zero.  Returns and thread-safety as sluice_metrics_add_limiter();
 * the set must stay valid until removed or the registry freed. */
typedef struct sluice_rules sluice_rules;
int sluice_metrics_add_rules(sluice_metrics *m, const char *name, const sluice_rules *rs);

/* Stop exposing `obj` (a limiter, table, wheel, queue or source's object
 * added before).  When it
 * returns, no sluice_metrics_write() touches obj any more: it may be freed.
 * Returns 0, SLUICE_ENOENT when obj is not in the registry, SLUICE_EINVAL
 * for a NULL argument.  Thread-safe, also while sluice_metrics_write()
 * runs. */
int sluice_metrics_remove(sluice_metrics *m, const void *obj);

/* The number of objects in the registry.  Thread-safe. */
size_t sluice_metrics_count(const sluice_metrics *m);

/* ---- sources: series of objects the core does not know ------------------
 *
 * A library built on sluice (libsluice-redis) exposes its objects through
 * this interface, so the core never depends on it: it describes its
 * families once, in a static sluice_metrics_source, and its write callback
 * emits an object's samples of one family with sluice_metrics_sample().
 * The registry writes each family's HELP and TYPE lines before its first
 * sample (a family with no sample is left out), after the core's families,
 * the sources in the order they were first added. */

typedef struct sluice_metrics_family {
    const char *name; /* sluice_[a-z0-9_]+, not a family of the core's nor
                         of another source; counters end in _total */
    const char *type; /* "counter" or "gauge" */
    const char *help; /* one line: printable ASCII, no backslash */
} sluice_metrics_family;

/* Where a source's write callback emits its samples (opaque). */
typedef struct sluice_metrics_out sluice_metrics_out;

typedef struct sluice_metrics_source {
    const char *label;                     /* the label that names an
                                              object, e.g. "limit":
                                              [a-z_][a-z0-9_]*, not "le" */
    const sluice_metrics_family *families; /* nfamilies of them */
    size_t nfamilies;                      /* 1 .. 64 */
    /* Emit obj's samples of families[family] with sluice_metrics_sample().
     * Called during sluice_metrics_write() with the registry's lock held
     * for this object only: it must not call the registry, and should only
     * read counters (no blocking I/O).  Any number of writes may call it
     * at once. */
    void (*write)(const void *obj, size_t family, sluice_metrics_out *out);
} sluice_metrics_source;

/* The most distinct sources (sluice_metrics_source objects) one registry
 * holds. */
#define SLUICE_METRICS_SOURCES_MAX 8

/* Add `obj` under `name` (the value of src->label; the rules of names as
 * above), written by `src`, which must stay valid (static storage) as long
 * as the registry.  Objects of one source share one set of names.
 * Returns 0, or SLUICE_EINVAL (a NULL argument, a bad name, a name already
 * used by this source, an object already added, or a bad source: label,
 * family name or type, help, no families or no write), SLUICE_EFULL
 * (SLUICE_METRICS_SOURCES_MAX other sources already added), SLUICE_ENOMEM.
 * Thread-safe, also while sluice_metrics_write() runs. */
int sluice_metrics_add_source(sluice_metrics *m, const char *name, const void *obj,
                              const sluice_metrics_source *src);

/* Emit one sample of the family being written, for the object being
 * written: `FAMILY{LABEL="NAME"} value`, or with a second label
 * `FAMILY{LABEL="NAME",key="val"} value` when key is not NULL (key:
 * [a-z_][a-z0-9_]*, not "le" nor the source's label; val: UTF-8, escaped
 * here).  A sample with a bad key, or a NULL out, is left out.  Only
 * from a source's write callback. */
void sluice_metrics_sample(sluice_metrics_out *out, const char *key, const char *val,
                           uint64_t value);

/* Render the exposition into buf (len bytes), as snprintf does: when the
 * whole exposition and its NUL fit, buf holds it and 0 is returned; when
 * not, buf holds the longest prefix of whole lines that fits, NUL-terminated
 * (if len > 0), and SLUICE_ENOSPC is returned.  Either way *needed (may be
 * NULL) receives the length of the whole exposition, excluding the NUL:
 * a buffer of *needed + 1 bytes holds it, unless objects are added in the
 * meantime.  buf may be NULL when len is 0 (a size query).  An empty
 * registry renders as the empty string.
 *
 * Families come in a fixed order, each with its # HELP and # TYPE line once,
 * followed by one line per object, in registry order (the order objects
 * were added, a removed object's place going to the next one added);
 * a family with no object is left out.  Values are exact decimal integers.
 *
 * It does not allocate and never holds a lock across the whole write: each
 * object's counters are read with its statistics getter under the
 * registry's lock for that object only, while decisions go on.  Each value
 * is exact; values of different series may come from slightly different
 * instants.  An object added or removed during the write may appear in some
 * families only.
 * Returns 0, SLUICE_ENOSPC, or SLUICE_EINVAL when m is NULL or buf is NULL
 * with len > 0.  Thread-safe: any number of threads may write at once. */
int sluice_metrics_write(const sluice_metrics *m, char *buf, size_t len,
                         size_t *needed);

#if defined(__GNUC__) && !defined(_WIN32)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_METRICS_H */
