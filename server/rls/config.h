/* config.h -- sluice-rls: envoyproxy/ratelimit's YAML config, loaded into a
 * tree of descriptors whose limits are sluice tables.
 *
 * A config is immutable once loaded and owns its tables: the server swaps a
 * whole config, never edits one.  Lookups (rls_config_find) are read-only
 * and thread-safe; the tables they return are thread-safe too.
 */
#ifndef SLUICE_RLS_CONFIG_H
#define SLUICE_RLS_CONFIG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sluice.h>

/* Units, with the numbers of RateLimitResponse.RateLimit.Unit. */
enum {
    RLS_UNIT_UNKNOWN = 0,
    RLS_UNIT_SECOND = 1,
    RLS_UNIT_MINUTE = 2,
    RLS_UNIT_HOUR = 3,
    RLS_UNIT_DAY = 4,
    RLS_UNIT_MONTH = 5,
    RLS_UNIT_YEAR = 6,
    RLS_UNIT_WEEK = 7,
};

/* The window of a unit in nanoseconds, as envoyproxy/ratelimit defines them:
 * a month is exactly 30 days and a year exactly 365 days (no calendar);
 * 0 for an unknown unit. */
uint64_t rls_unit_ns(int unit);

/* The decisions of one limit, for /metrics: descriptors answered OK,
 * answered OVER_LIMIT, and refused in shadow mode (answered OK).  Check-only
 * descriptors (hits 0) are not counted.  Relaxed atomics. */
typedef struct rls_limit_stats {
    atomic_uint_least64_t allowed, denied, shadow_denied;
} rls_limit_stats;

/* detailed_metric: decisions per descriptor value, for at most
 * RLS_DETAIL_MAX values per limit (first come; later values count in the
 * limit's own series only, and in `dropped`).  Keys are
 * "domain.key_value.key_value", bytes that are not printable ASCII
 * written \xNN, cut at RLS_DETAIL_KEY_BYTES - 1. */
#define RLS_DETAIL_MAX 64
#define RLS_DETAIL_KEY_BYTES 160
typedef struct rls_detail {
    pthread_mutex_t mu;
    size_t n;
    uint64_t dropped;
    struct {
        char key[RLS_DETAIL_KEY_BYTES];
        uint64_t v[3]; /* allowed, denied, shadow_denied */
    } e[RLS_DETAIL_MAX];
} rls_detail;

/* One rate_limit of the config. */
typedef struct rls_limit {
    char *full_key;        /* domain.key_value.key... (for messages, metrics) */
    char *name;            /* rate_limit.name, "" when absent */
    uint32_t requests_per_unit;
    int unit;              /* RLS_UNIT_* (UNKNOWN for a `period` of no unit's length) */
    uint64_t window_ns;    /* the spec's PERIOD: rls_unit_ns(unit), or `period` */
    bool unlimited;
    bool shadow_mode;
    bool quota_mode;       /* envoyproxy/ratelimit's quota_mode (rls.c) */
    sluice_table *table;   /* one limiter per descriptor value; NULL when unlimited,
                            * requests_per_unit 0, or on Redis */
    struct sluice_redis *redis; /* with REDIS_URL (redis_backend.h): the limit in
                                 * Redis instead of a table */
    bool table_moved;      /* rls_config_adopt gave the table (or the Redis
                            * limiter) to a newer config */
    int algorithm;         /* SLUICE_ALG_*: fixed-window unless `algorithm` says */
    char spec[128];        /* the table's spec ("" when unlimited) */
    bool has_policy;       /* policy is set (a limit with a table) */
    sluice_http_policy policy; /* for the RateLimit header fields: named by
                                * `name`, else by the full key, made
                                * printable and cut to 64 bytes */
    char policy_item[192];     /* its RateLimit-Policy item, made once ("" if
                                * it does not fit) */
    char *replaces;            /* the names of `replaces`, each NUL-terminated,
                                * one after the other; NULL when none */
    size_t nreplaces;
    rls_detail *detail;        /* detailed_metric: true, or value_to_metric on
                                * the limit's path; NULL otherwise */
    unsigned char *metadata;   /* `metadata` of the limit's descriptor, a packed
                                * google.protobuf.Struct (RESPONSE_DYNAMIC_METADATA);
                                * NULL when none */
    size_t metadata_len;
    bool value_to_metric;      /* detail counts under value_to_metric's name
                                * (rls_match_entry.mval), not detailed_metric's */
    rls_limit_stats *stats;    /* &stats_store: counted through a const limit */
    rls_limit_stats stats_store;
} rls_limit;

typedef struct rls_node rls_node;

typedef struct rls_config rls_config;

/* The longest table key (a descriptor's entries) a shared table holds. */
#define RLS_SHARED_KEY_BYTES 256

/* Put the tables of every config loaded from now on in the directory
 * `dir` (sluice_table_open regions, one file per limit), shared by every
 * sluice-rls process of the host that uses the same directory; NULL or ""
 * for tables in this process (the default).  A region that holds another
 * spec (a process with an older config) refuses the config that loads it.
 * Call once, before any load; not thread-safe.  Returns 0, or -1 when the
 * path is too long. */
int rls_config_use_shared_dir(const char *dir);

/* Are tables shared (rls_config_use_shared_dir)? */
bool rls_config_shared(void);

/* Load every *.yaml / *.yml file of directory `dir` (not recursive, in name
 * order) into a new config whose tables hold up to `max_keys` keys each.
 * Returns NULL on the first bad file, with "FILE:LINE: reason" in err
 * (LINE is 1-based; 0 when the problem is the whole file).  A directory
 * with no config file gives an empty config (every request is OK). */
rls_config *rls_config_load_dir(const char *dir, size_t max_keys, char *err, size_t errlen);

/* Load one YAML text into `cfg` (the file's name is used in messages).
 * Returns 0, or -1 with "NAME:LINE: reason" in err; on failure `cfg` keeps
 * what it had. */
int rls_config_add_text(rls_config *cfg, const char *name, const char *text, size_t len,
                        char *err, size_t errlen);

/* An empty config whose tables will hold up to max_keys keys each; NULL
 * when memory runs out. */
rls_config *rls_config_new(size_t max_keys);

/* Free a config and its tables.  NULL is a no-op. */
void rls_config_free(rls_config *cfg);

/* The limit for one descriptor (entries as key/value arrays of n entries)
 * of `domain`, following envoyproxy/ratelimit's matching: at each level the
 * entry's key_value first, then the wildcard values (a '*' matches any
 * run of bytes), then the key alone; the limit is that of the node the last
 * entry reaches.  NULL when nothing matches.  Thread-safe. */
const rls_limit *rls_config_find(const rls_config *cfg, const char *domain, size_t domainlen,
                                 const char *const keys[], const size_t keylens[],
                                 const char *const values[], const size_t valuelens[], size_t n);

/* What rls_config_find_match() tells of each entry of a descriptor. */
typedef struct rls_match_entry {
    const char *share;  /* share_threshold: the wildcard pattern the entry
                         * counts under (sharelen bytes); else NULL */
    size_t sharelen;
    const char *mval;   /* the value in value_to_metric's metric name, as
                         * envoyproxy/ratelimit makes it (mvallen bytes):
                         * the request's value for an entry matched by
                         * key_value or by a node with value_to_metric, the
                         * pattern for a wildcard without it (or with
                         * share_threshold); NULL: the key alone */
    size_t mvallen;
} rls_match_entry;

/* rls_config_find(), also filling out[0..n-1] (when out is not NULL).
 * Thread-safe. */
const rls_limit *rls_config_find_match(const rls_config *cfg, const char *domain, size_t domainlen,
                                       const char *const keys[], const size_t keylens[],
                                       const char *const values[], const size_t valuelens[], size_t n,
                                       rls_match_entry out[]);

/* The most distinct (requests_per_unit, unit) pairs of descriptor limit
 * overrides one config serves. */
#define RLS_MAX_OVERRIDES 256

/* The limit for a descriptor's `limit` override (Envoy's
 * RateLimitOverride): a limit of `requests_per_unit` per `unit`, made on
 * first use and kept until the config is freed, with its own table (keys
 * must carry the domain: one table serves every domain).  NULL when the
 * unit is unknown, or when RLS_MAX_OVERRIDES other pairs exist already, or
 * memory runs out.  Thread-safe. */
const rls_limit *rls_config_override(const rls_config *cfg, uint32_t requests_per_unit, int unit);

/* Does a limit of the config have `replaces`?  Thread-safe. */
bool rls_config_has_replaces(const rls_config *cfg);

/* Does the config have `domain`?  Thread-safe. */
bool rls_config_has_domain(const rls_config *cfg, const char *domain, size_t domainlen);

/* Before `nw` replaces `old` (a reload): every limit of nw whose full key
 * (domain.key_value...) and unit are those of a limit of old takes over
 * old's table, with what it has admitted -- reconfigured at now_ns to nw's
 * requests_per_unit if that changed (sluice_table_reconfigure_at: the
 * window keeps its count) -- and nw takes old's override limits; old keeps
 * serving with the same tables until it is freed, which then frees only
 * what it kept.  So a reload neither forgets nor double-counts.  A limit
 * whose unit changed starts fresh.  Returns how many limits kept their
 * counters.  Not thread-safe with another adopt of `old`; calls on `old`
 * may run meanwhile. */
size_t rls_config_adopt(rls_config *nw, rls_config *old, uint64_t now_ns);

/* Write envoyproxy/ratelimit's /rlconfig text: one line per limit,
 * "FULL_KEY: unit=UNIT requests_per_unit=N, shadow_mode: B, unlimited: B",
 * into buf (NUL-terminated; cut at a line's end when it does not fit).
 * Returns the bytes written.  Thread-safe. */
size_t rls_config_dump(const rls_config *cfg, char *buf, size_t cap);

/* Write the per-rule series of /metrics (Prometheus text 0.0.4) into buf:
 * sluice_rls_rule_decisions_total{rule,name,decision} (decision allowed,
 * denied, shadow_denied), one series each per limit of the config (not
 * the override limits), rule = the full key, name = rate_limit.name, with
 * backslash, double quote and newline escaped.  NUL-terminated; returns the
 * bytes written, or `cap` when it does not fit.  Thread-safe. */
size_t rls_config_write_metrics(const rls_config *cfg, char *buf, size_t cap);

/* The number of domains and of limits (for logs and tests). */
size_t rls_config_domains(const rls_config *cfg);
size_t rls_config_limits(const rls_config *cfg);

#endif
