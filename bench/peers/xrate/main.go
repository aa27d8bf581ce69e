// Command xrate times golang.org/x/time/rate Limiter.Allow() for
// bench/peers/run.sh.
//
// Scenarios (one *rate.Limiter shared by 1 or 2 goroutines; run with
// GOMAXPROCS=2):
//
//	allowed  rate.NewLimiter(1e12, 1<<30): a finite, huge rate, so Allow()
//	         goes through the token arithmetic (rate.Inf would take a
//	         shortcut) and always succeeds
//	denied   rate.NewLimiter(rate.Every(24h), 1) after one Allow(): every
//	         timed call fails (the next token is a day away)
//
// After a short warm-up, --reps repetitions of every scenario, interleaved
// round-robin, each running --ms milliseconds (checked every batch calls,
// with a hard cap on the number of batches).  ns per decision is the wall
// time from the first goroutine's start to the last one's end divided by the
// decisions of all goroutines.  Output, one line per repetition:
//
//	sample xrate <threads> <path> <ns_per_decision> <decisions> <allowed> <denied>
//
// then one `median xrate <threads> <path> <ns>` line per scenario.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

const (
	batch      = 256
	maxBatches = 4000000
)

type scenario struct {
	threads int
	allowed bool
	ns      []float64
}

func (s *scenario) path() string {
	if s.allowed {
		return "allowed"
	}
	return "denied"
}

func (s *scenario) newLimiter() *rate.Limiter {
	if s.allowed {
		return rate.NewLimiter(rate.Limit(1e12), 1<<30)
	}
	lim := rate.NewLimiter(rate.Every(24*time.Hour), 1)
	if !lim.Allow() {
		fmt.Fprintln(os.Stderr, "xrate: first Allow() refused")
		os.Exit(1)
	}
	return lim
}

type result struct {
	start, end         time.Time
	decisions, okCount uint64
}

func runOnce(s *scenario, dur time.Duration, print bool) float64 {
	lim := s.newLimiter()
	res := make([]result, s.threads)
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(s.threads)
	done.Add(s.threads)
	for g := 0; g < s.threads; g++ {
		go func(r *result) {
			defer done.Done()
			ready.Done()
			<-gate
			t0 := time.Now()
			t := t0
			var n, ok uint64
			for b := 0; b < maxBatches; b++ {
				for i := 0; i < batch; i++ {
					if lim.Allow() {
						ok++
					}
				}
				n += batch
				t = time.Now()
				if t.Sub(t0) >= dur {
					break
				}
			}
			*r = result{start: t0, end: t, decisions: n, okCount: ok}
		}(&res[g])
	}
	ready.Wait()
	close(gate)
	done.Wait()
	start, end := res[0].start, res[0].end
	var n, ok uint64
	for _, r := range res {
		if r.start.Before(start) {
			start = r.start
		}
		if r.end.After(end) {
			end = r.end
		}
		n += r.decisions
		ok += r.okCount
	}
	ns := float64(end.Sub(start).Nanoseconds()) / float64(n)
	if print {
		fmt.Printf("sample xrate %d %s %.3f %d %d %d\n", s.threads, s.path(), ns, n, ok, n-ok)
	}
	return ns
}

func main() {
	reps := flag.Int("reps", 5, "timed repetitions of every scenario (1..64)")
	ms := flag.Int("ms", 200, "milliseconds per repetition (1..10000)")
	warmMs := flag.Int("warmup-ms", 200, "untimed warm-up per scenario, ms (0..10000)")
	flag.Parse()
	if *reps < 1 || *reps > 64 || *ms < 1 || *ms > 10000 || *warmMs < 0 || *warmMs > 10000 {
		fmt.Fprintln(os.Stderr, "xrate: a flag is out of range")
		os.Exit(2)
	}
	sc := []*scenario{
		{threads: 1, allowed: true}, {threads: 1, allowed: false},
		{threads: 2, allowed: true}, {threads: 2, allowed: false},
	}
	if *warmMs > 0 {
		for _, s := range sc {
			runOnce(s, time.Duration(*warmMs)*time.Millisecond, false)
		}
	}
	for r := 0; r < *reps; r++ {
		for _, s := range sc {
			s.ns = append(s.ns, runOnce(s, time.Duration(*ms)*time.Millisecond, true))
		}
	}
	for _, s := range sc {
		v := append([]float64(nil), s.ns...)
		sort.Float64s(v)
		n := len(v)
		med := v[n/2]
		if n%2 == 0 {
			med = (v[n/2-1] + v[n/2]) / 2
		}
		fmt.Printf("median xrate %d %s %.3f\n", s.threads, s.path(), med)
	}
}
