// GuavaBench.java -- Guava's RateLimiter.tryAcquire() for bench/peers/run.sh.
//
// Scenarios (one RateLimiter shared by 1 or 2 threads):
//   allowed  RateLimiter.create(1e12): tryAcquire() always succeeds
//   denied   RateLimiter.create(1e-3) after one tryAcquire(): the next permit
//            is 1000 s away, so every timed call fails
//
// A warm-up (--warmup-ms, all scenarios in turn, untimed) lets the JIT compile
// the paths; then --reps repetitions of every scenario, interleaved
// round-robin, each running --ms milliseconds (checked every BATCH calls,
// with a hard cap on the number of batches).  ns per decision is the wall
// time from the first thread's start to the last thread's end divided by the
// decisions of all threads.  Output, one line per repetition:
//
//   sample guava <threads> <path> <ns_per_decision> <decisions> <allowed> <denied>
//
// then one `median guava <threads> <path> <ns>` line per scenario.

import com.google.common.util.concurrent.RateLimiter;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CyclicBarrier;

public final class GuavaBench {
    static final int BATCH = 256;
    static final long MAX_BATCHES = 4_000_000L;

    static final class Scenario {
        final int threads;
        final boolean allowedPath;
        final List<Double> ns = new ArrayList<>();

        Scenario(int threads, boolean allowedPath) {
            this.threads = threads;
            this.allowedPath = allowedPath;
        }

        String path() {
            return allowedPath ? "allowed" : "denied";
        }

        RateLimiter newLimiter() {
            if (allowedPath) {
                return RateLimiter.create(1e12);
            }
            RateLimiter lim = RateLimiter.create(1e-3);
            if (!lim.tryAcquire()) {
                throw new IllegalStateException("first tryAcquire refused");
            }
            return lim;
        }
    }

    static final class Worker implements Runnable {
        final RateLimiter lim;
        final CyclicBarrier barrier;
        final long durNs;
        long start, end, decisions, allowed;

        Worker(RateLimiter lim, CyclicBarrier barrier, long durNs) {
            this.lim = lim;
            this.barrier = barrier;
            this.durNs = durNs;
        }

        @Override
        public void run() {
            try {
                barrier.await();
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
            long t0 = System.nanoTime(), t = t0, n = 0, ok = 0;
            for (long b = 0; b < MAX_BATCHES; b++) {
                for (int i = 0; i < BATCH; i++) {
                    if (lim.tryAcquire()) {
                        ok++;
                    }
                }
                n += BATCH;
                t = System.nanoTime();
                if (t - t0 >= durNs) {
                    break;
                }
            }
            start = t0;
            end = t;
            decisions = n;
            allowed = ok;
        }
    }

    static double runOnce(Scenario s, long durNs, boolean print) throws InterruptedException {
        RateLimiter lim = s.newLimiter();
        CyclicBarrier barrier = new CyclicBarrier(s.threads);
        Worker[] w = new Worker[s.threads];
        Thread[] th = new Thread[s.threads];
        for (int i = 0; i < s.threads; i++) {
            w[i] = new Worker(lim, barrier, durNs);
            th[i] = new Thread(w[i], "guava-bench-" + i);
            th[i].start();
        }
        long start = Long.MAX_VALUE, end = Long.MIN_VALUE, n = 0, ok = 0;
        for (int i = 0; i < s.threads; i++) {
            th[i].join();
            start = Math.min(start, w[i].start);
            end = Math.max(end, w[i].end);
            n += w[i].decisions;
            ok += w[i].allowed;
        }
        double ns = (double) (end - start) / (double) n;
        if (print) {
            System.out.printf(Locale.ROOT, "sample guava %d %s %.3f %d %d %d%n",
                    s.threads, s.path(), ns, n, ok, n - ok);
        }
        return ns;
    }

    static long argLong(String[] args, int i, long lo, long hi) {
        if (i >= args.length) {
            usage();
        }
        long x;
        try {
            x = Long.parseLong(args[i]);
        } catch (NumberFormatException e) {
            x = lo - 1;
        }
        if (x < lo || x > hi) {
            System.err.printf("GuavaBench: %s wants a number in %d..%d%n", args[i - 1], lo, hi);
            System.exit(2);
        }
        return x;
    }

    static void usage() {
        System.err.println("usage: GuavaBench [--reps N] [--ms MS] [--warmup-ms MS]");
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        long reps = 5, ms = 200, warmMs = 2000;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--reps": reps = argLong(args, ++i, 1, 64); break;
                case "--ms": ms = argLong(args, ++i, 1, 10000); break;
                case "--warmup-ms": warmMs = argLong(args, ++i, 0, 60000); break;
                default: usage();
            }
        }
        Scenario[] sc = {
            new Scenario(1, true), new Scenario(1, false),
            new Scenario(2, true), new Scenario(2, false),
        };
        // Warm-up: the whole budget split over the scenarios, in slices.
        if (warmMs > 0) {
            long slice = Math.max(1, warmMs / (sc.length * 4)) * 1_000_000L;
            for (int k = 0; k < 4; k++) {
                for (Scenario s : sc) {
                    runOnce(s, slice, false);
                }
            }
        }
        for (long r = 0; r < reps; r++) {
            for (Scenario s : sc) {
                s.ns.add(runOnce(s, ms * 1_000_000L, true));
            }
        }
        for (Scenario s : sc) {
            double[] v = s.ns.stream().mapToDouble(Double::doubleValue).toArray();
            Arrays.sort(v);
            int n = v.length;
            double med = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
            System.out.printf(Locale.ROOT, "median guava %d %s %.3f%n", s.threads, s.path(), med);
        }
        System.out.flush();
    }
}
