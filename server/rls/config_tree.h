/* config_tree.h -- sluice-rls: the config's tree, shared by its two
 * files only: config.c (the tree at run time: lookup, overrides, metrics,
 * reload, the directory) and config_yaml.c (the YAML walk that builds it).
 * Everything else sees rls_config through config.h. */
#ifndef SLUICE_RLS_CONFIG_TREE_H
#define SLUICE_RLS_CONFIG_TREE_H

#include "config.h"

#include <pthread.h>
#include <stdatomic.h>


struct rls_node {
    char *key;
    size_t keylen;
    char *value; /* "" for a key alone; may hold '*' */
    size_t valuelen;
    bool wildcard;
    bool share;        /* share_threshold: every value the wildcard matches
                        * counts under the pattern (one counter) */
    bool value_to_metric; /* value_to_metric: the request's value in the
                           * metric name (rls_match_entry.mval) */
    int line;
    rls_limit *limit;
    rls_node **kids;   /* exact and key-only children, sorted by (key, value) */
    size_t nkids;
    rls_node **wilds;  /* wildcard children, file order */
    size_t nwilds;
};

typedef struct rls_domain {
    char *name;
    size_t namelen;
    rls_node root;
} rls_domain;

/* Override limits, made on first use: readers scan the published prefix
 * without a lock; makers hold the mutex. */
typedef struct override_set {
    pthread_mutex_t mu;
    atomic_size_t n;
    rls_limit *lim[RLS_MAX_OVERRIDES];
} override_set;

struct rls_config {
    rls_domain *domains;
    size_t ndomains;
    size_t nlimits;
    size_t max_keys;
    override_set *ov;
    bool ov_moved;     /* rls_config_adopt gave ov to a newer config */
    rls_limit **all;   /* every limit of the tree, for rls_config_adopt */
    size_t nall;
    bool has_replaces; /* a limit has `replaces` (rls.c then looks for them) */
};

/* Free a node's subtree, its limit (and the limit's table or Redis
 * limiter unless rls_config_adopt moved it) and its strings; the node
 * itself is left zeroed. */
void rls__node_clear(rls_node *n);

/* A limit's table: in this process, or a region in the shared directory
 * (rls_config_use_shared_dir) named by the limit's full key.  NULL with a
 * one-line reason in err. */
sluice_table *rls__make_table(const char *full_key, const char *spec, size_t max_keys, char *err, size_t errlen);

/* The limit's RateLimit-Policy (sluice/http.h), from its name or full key;
 * none when the limit cannot be described. */
void rls__make_policy(rls_limit *lim, const char *spec);

/* A unit by its name, any case (second .. week), or RLS_UNIT_UNKNOWN. */
int rls__unit_from_name(const char *s);

/* Byte strings in memcmp order, the shorter first on a tie; (key, value)
 * against a node; two nodes by (key, value, line), for qsort. */
int rls__cmp_bytes(const char *a, size_t al, const char *b, size_t bl);
int rls__cmp_kv(const char *k, size_t kl, const char *v, size_t vl, const rls_node *n);
int rls__cmp_nodes(const void *a, const void *b);

#endif
