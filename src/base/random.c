/* random.c -- seeds for the keyed hash: getrandom(), else /dev/urandom,
 * else a mix of clocks and addresses (never fails, never blocks long).
 *
 * Entry point: sluice__random_seed.
 */
#define _GNU_SOURCE
#include "base/internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void sluice__random_seed(uint64_t out[2])
{
    unsigned char buf[16];
    size_t got = 0;
    while (got < sizeof buf) {
        ssize_t n = getrandom(buf + got, sizeof buf - got, GRND_NONBLOCK);
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (got < sizeof buf) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n == (ssize_t)sizeof buf) got = sizeof buf;
            close(fd);
        }
    }
    if (got == sizeof buf) {
        memcpy(out, buf, sizeof buf);
        return;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_REALTIME, &a);
    clock_gettime(CLOCK_MONOTONIC, &b);
    out[0] = mix((uint64_t)a.tv_nsec ^ ((uint64_t)a.tv_sec << 30) ^ (uint64_t)(uintptr_t)out);
    out[1] = mix((uint64_t)b.tv_nsec ^ ((uint64_t)b.tv_sec << 20) ^ (uint64_t)getpid() ^ out[0]);
}
