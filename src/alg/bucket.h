/* bucket.h -- the bucket machine (token_bucket.c), shared by token-bucket
 * and leaky-bucket, whose rows (token_bucket.c, leaky_bucket.c) call it,
 * and by the limiter's reservations (limiter.c).
 *
 *   decide, decide_packed, refused_until   a decision, on a state or a word
 *   reserve, give_back, settle             reservations booking the future
 *   setup, pack, unpack, rest_at           the row's other operations
 *   carry, fits                            a change of spec (reconfigure.c)
 */
#ifndef SLUICE_ALG_BUCKET_H
#define SLUICE_ALG_BUCKET_H

#include "alg/alg.h"

SLUICE__INTERNAL bool sluice__bucket_decide(const sluice__profile *pf, sluice__state *st,
                                            uint64_t t, uint64_t p, uint64_t max_wait,
                                            sluice_result *res);
SLUICE__INTERNAL bool sluice__bucket_reserve(const sluice__profile *pf, sluice__state *st,
                                             uint64_t t, uint64_t p, uint64_t max_wait,
                                             sluice_result *res);
SLUICE__INTERNAL bool sluice__bucket_give_back(const sluice__profile *pf, sluice__state *st,
                                               uint64_t t, uint64_t p, uint64_t at_ns);
SLUICE__INTERNAL int sluice__bucket_settle(const sluice__profile *pf, sluice__state *st,
                                          uint64_t t, const sluice__settle_req *q);
SLUICE__INTERNAL uint64_t sluice__bucket_rest_at(const sluice__profile *pf,
                                                 const sluice__state *st);
SLUICE__INTERNAL int sluice__bucket_setup(sluice__profile *pf, const sluice__opts *o,
                                          char *err, size_t errlen);
SLUICE__INTERNAL void sluice__bucket_pack(const sluice__profile *pf, const sluice__state *st,
                                          uint64_t out[2]);
SLUICE__INTERNAL void sluice__bucket_unpack(const sluice__profile *pf, const uint64_t in[2],
                                            sluice__state *st);
SLUICE__INTERNAL bool sluice__bucket_decide_packed(const sluice__profile *pf,
                                                   sluice__packed_req *q);
SLUICE__INTERNAL uint64_t sluice__bucket_refused_until(const sluice__profile *pf,
                                                     const uint64_t w[2]);
SLUICE__INTERNAL void sluice__bucket_carry(const sluice__profile *from,
                                           const sluice__profile *to, sluice__state *st,
                                           uint64_t t, bool cap);
SLUICE__INTERNAL bool sluice__bucket_fits(const sluice__profile *pf, const sluice__state *st);

#endif /* SLUICE_ALG_BUCKET_H */
