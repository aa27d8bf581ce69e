/* hello.c -- the README's example: one limiter, one decision.
 *   cc -std=c11 -Iinclude examples/hello.c build/libsluice.a -lpthread -lm */
#include <sluice.h>
#include <stdio.h>

int main(void)
{
    char err[128];
    sluice_limiter *lim = sluice_limiter_new("token-bucket 100/s burst=20", err, sizeof err);
    if (!lim) {
        fprintf(stderr, "bad spec: %s\n", err);
        return 1;
    }
    sluice_result r;
    if (sluice_try_acquire_at(lim, 1, sluice_now_ns(), &r)) puts("go");
    else printf("wait %lld ns\n", (long long)r.retry_after_ns);
    sluice_limiter_free(lim);
    return 0;
}
