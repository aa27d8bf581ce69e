/* redis_link.c -- links libsluice-redis as a user would and calls into it:
 * makes a Redis-backed limiter (which does not connect) and frees it. */
#include <sluice.h>
#include <sluice/redis.h>
#include <stdio.h>

int main(void)
{
    char err[256];
    sluice_redis *r = sluice_redis_new("token-bucket 100/s burst=20", NULL, err, sizeof err);
    if (!r) {
        fprintf(stderr, "sluice_redis_new: %s\n", err);
        return 1;
    }
    sluice_redis_free(r);
    printf("redis ok, sluice %s\n", sluice_version());
    return 0;
}
