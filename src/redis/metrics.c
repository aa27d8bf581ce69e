/* metrics.c -- the Redis tier in a metrics registry (sluice/metrics.h).
 *
 * The core's registry knows nothing of Redis: libsluice-redis links
 * libsluice, never the other way, and hiredis stays out of the core.  So
 * this file describes the tier's families in a static
 * sluice_metrics_source and adds each limiter with
 * sluice_metrics_add_source(); on every write the registry calls back
 * write_family() for one limiter and one family, under the registry's lock
 * for that limiter only, and it emits the samples with
 * sluice_metrics_sample().
 *
 * The values are sluice_redis_stats_get()'s, read once per family: its
 * atomics and the stripes' counters (each stripe's mutex held for a few
 * loads), so every value is exact and a write never waits on Redis.
 * The cluster families are written for a single server too (mode 0, one
 * node, no redirects), so a dashboard needs no second shape.
 */
#include "redis_internal.h"

enum {
    RF_REQUESTS,
    RF_ROUND_TRIPS,
    RF_FALLBACKS,
    RF_ERRORS,
    RF_LEASES,
    RF_LEASE_PERMITS,
    RF_CIRCUIT_STATE,
    RF_CIRCUIT_OPENS,
    RF_CLUSTER_MODE,
    RF_CLUSTER_NODES,
    RF_CLUSTER_REDIRECTS,
    RF_CLUSTER_RETRIES,
    RF_CLUSTER_REFRESHES,
    RF_N
};

static const sluice_metrics_family families[RF_N] = {
    [RF_REQUESTS] = {"sluice_redis_requests_total", "counter",
                     "Requests decided by the Redis tier, by decision (probes count as allowed)."},
    [RF_ROUND_TRIPS] = {"sluice_redis_round_trips_total", "counter",
                        "Script calls sent to Redis (EVALSHA, or EVAL after NOSCRIPT)."},
    [RF_FALLBACKS] = {"sluice_redis_fallbacks_total", "counter",
                      "Requests decided by the failure policy because Redis could not decide."},
    [RF_ERRORS] = {"sluice_redis_errors_total", "counter",
                   "Calls to Redis that failed, by kind (each failed call counts once)."},
    [RF_LEASES] = {"sluice_redis_leases_total", "counter",
                   "Leases taken: grants from Redis that carried permits to spend locally."},
    [RF_LEASE_PERMITS] = {"sluice_redis_lease_permits_total", "counter",
                          "Permits of leases, taken from Redis or dropped unspent (never "
                          "returned to Redis)."},
    [RF_CIRCUIT_STATE] = {"sluice_redis_circuit_state", "gauge",
                          "The circuit breaker: 0 closed, 1 open, 2 half-open (a probe in "
                          "flight)."},
    [RF_CIRCUIT_OPENS] = {"sluice_redis_circuit_opens_total", "counter",
                          "Times the circuit breaker opened."},
    [RF_CLUSTER_MODE] = {"sluice_redis_cluster_mode", "gauge",
                         "1 once the server is known to be a Redis Cluster node, else 0."},
    [RF_CLUSTER_NODES] = {"sluice_redis_cluster_nodes", "gauge",
                          "Redis nodes held: the configured one, and in a cluster the masters "
                          "the current slot map names and redirect targets since the last "
                          "refresh."},
    [RF_CLUSTER_REDIRECTS] = {"sluice_redis_cluster_redirects_total", "counter",
                              "Cluster redirects followed, by kind (MOVED, ASK)."},
    [RF_CLUSTER_RETRIES] = {"sluice_redis_cluster_retries_total", "counter",
                            "TRYAGAIN and CLUSTERDOWN answers, each retried within the "
                            "call's deadline."},
    [RF_CLUSTER_REFRESHES] = {"sluice_redis_cluster_slot_refreshes_total", "counter",
                              "CLUSTER SLOTS answered (the first, which finds out whether "
                              "the server is a cluster, too)."},
};

static void write_family(const void *obj, size_t family, sluice_metrics_out *out)
{
    sluice_redis_stats st;
    sluice_redis_stats_get((const sluice_redis *)obj, &st);
    switch (family) {
    case RF_REQUESTS:
        sluice_metrics_sample(out, "decision", "allowed", st.allowed);
        sluice_metrics_sample(out, "decision", "denied", st.denied);
        break;
    case RF_ROUND_TRIPS: sluice_metrics_sample(out, NULL, NULL, st.round_trips); break;
    case RF_FALLBACKS: sluice_metrics_sample(out, NULL, NULL, st.by_policy); break;
    case RF_ERRORS:
        sluice_metrics_sample(out, "kind", "connect", st.err_connect);
        sluice_metrics_sample(out, "kind", "timeout", st.err_timeout);
        sluice_metrics_sample(out, "kind", "io", st.err_io);
        sluice_metrics_sample(out, "kind", "protocol", st.err_protocol);
        sluice_metrics_sample(out, "kind", "reply", st.err_reply);
        sluice_metrics_sample(out, "kind", "pool", st.err_pool);
        sluice_metrics_sample(out, "kind", "circuit", st.err_circuit);
        break;
    case RF_LEASES: sluice_metrics_sample(out, NULL, NULL, st.leases); break;
    case RF_LEASE_PERMITS:
        sluice_metrics_sample(out, "outcome", "taken", st.lease_permits);
        sluice_metrics_sample(out, "outcome", "dropped", st.lease_dropped);
        break;
    case RF_CIRCUIT_STATE:
        sluice_metrics_sample(out, NULL, NULL, (uint64_t)st.circuit_state);
        break;
    case RF_CIRCUIT_OPENS: sluice_metrics_sample(out, NULL, NULL, st.circuit_opens); break;
    case RF_CLUSTER_MODE: sluice_metrics_sample(out, NULL, NULL, st.cluster ? 1 : 0); break;
    case RF_CLUSTER_NODES: sluice_metrics_sample(out, NULL, NULL, st.nodes); break;
    case RF_CLUSTER_REDIRECTS:
        sluice_metrics_sample(out, "kind", "moved", st.moved);
        sluice_metrics_sample(out, "kind", "ask", st.ask);
        break;
    case RF_CLUSTER_RETRIES:
        sluice_metrics_sample(out, "reason", "tryagain", st.tryagain);
        sluice_metrics_sample(out, "reason", "clusterdown", st.clusterdown);
        break;
    case RF_CLUSTER_REFRESHES: sluice_metrics_sample(out, NULL, NULL, st.slot_refreshes); break;
    default: break;
    }
}

static const sluice_metrics_source redis_source = {"limit", families, RF_N, write_family};

int sluice_metrics_add_redis(sluice_metrics *m, const char *name, const sluice_redis *r)
{
    return sluice_metrics_add_source(m, name, r, &redis_source);
}
