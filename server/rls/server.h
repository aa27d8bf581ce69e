/* server.h -- sluice-rls: gRPC unary calls over cleartext HTTP/2, on
 * libnghttp2, with an epoll loop per worker thread.
 */
#ifndef SLUICE_RLS_SERVER_H
#define SLUICE_RLS_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef struct rls_server_opts {
    const char *host;        /* address to bind, numeric IPv4 or IPv6 */
    uint16_t port;           /* 0: any free port (rls_server_port tells) */
    unsigned workers;        /* threads, each with its own epoll loop; 1 .. 256 */
    size_t max_conns;        /* open connections at once; more are closed at accept */
    uint32_t max_streams;    /* SETTINGS_MAX_CONCURRENT_STREAMS per connection */
    size_t max_msg_bytes;    /* largest request message (after the 5-byte prefix) */
    uint64_t idle_ns;        /* a connection with no request answered for this long is closed */
    uint64_t drain_ns;       /* on stop, how long open connections get to finish */
    bool shadow_all;         /* every limit in shadow mode (SHADOW_MODE=true) */
    bool quota_all;          /* every limit in quota mode (QUOTA_MODE=true) */
    bool dynamic_metadata;   /* RESPONSE_DYNAMIC_METADATA=true: answers carry
                              * dynamic_metadata (rls.h) */
    unsigned headers;        /* RLS_HEADERS_DRAFT | RLS_HEADERS_LEGACY (rls.h) */
    const char *tls_cert;    /* PEM certificate chain: the gRPC port speaks TLS
                              * (ALPN h2); NULL: cleartext HTTP/2 */
    const char *tls_key;     /* PEM private key, with tls_cert */
    const char *tls_client_ca;  /* with tls_cert: PEM file of the CAs that
                                 * client certificates must chain to; every
                                 * client must present one (mTLS), refused in
                                 * the handshake otherwise.  NULL: none asked */
    const char *tls_client_san; /* with tls_client_ca: the client certificate
                                 * must carry this subject alternative name, a
                                 * DNS name (wildcards as Go matches them) or an
                                 * IP address (IP SANs only); NULL: any */
    const char *http_host;   /* HTTP/1.1 endpoints (HOST), numeric */
    int http_port;           /* PORT: 0 = any free port, -1 = none */
} rls_server_opts;

/* Defaults: "0.0.0.0", port 8081, one worker per CPU,
 * 4096 connections, 100 streams, 1 MiB messages, 60 s idle, 5 s drain;
 * HTTP/1.1 on "0.0.0.0" port 8080. */
void rls_server_opts_default(rls_server_opts *o);

typedef struct rls_server rls_server;

/* Bind and listen.  Takes ownership of `cfg` (also on failure).  Returns
 * NULL with a one-line reason in err. */
rls_server *rls_server_new(const rls_server_opts *o, rls_config *cfg, char *err, size_t errlen);

/* The ports bound: gRPC, and HTTP/1.1 (0 when there is none). */
uint16_t rls_server_port(const rls_server *s);
uint16_t rls_server_http_port(const rls_server *s);

/* Run the workers until rls_server_stop(), then drain: GOAWAY to every
 * connection, answers flushed, connections closed (at most drain_ns).
 * Returns 0, or -1 with a reason in err. */
int rls_server_run(rls_server *s, char *err, size_t errlen);

/* Make `cfg` the config of every call from now on; the old one is freed
 * once no call reads it (this waits for the calls in progress, some
 * microseconds).  Takes ownership of cfg.  Call rls_config_adopt(cfg, the
 * current config, ...) first to keep the counters.  Thread-safe. */
void rls_server_swap_config(rls_server *s, rls_config *cfg);

/* The current config, to pass to rls_config_adopt; valid until the next
 * swap (call both from the one thread that reloads). */
rls_config *rls_server_config(rls_server *s);

/* Ask a running server to stop.  Async-signal-safe (one write(2)). */
void rls_server_stop(rls_server *s);

/* Free a server that is not running.  NULL is a no-op. */
void rls_server_free(rls_server *s);

#endif
