'use strict';
// try_acquire.js -- the cost of one decision from JavaScript, sluice against
// rate-limiter-flexible, in one run (docs/benchmarks.md, "Node.js"):
//
//   node bench/try_acquire.js [--rounds 15] [--number 500000]
//
// In this process: sluice's Limiter.tryAcquire (also with clock=coarse,
// to show the clock read's share) and Table.tryAcquire (one synchronous
// call each), sluice's RateLimiterSluice.consume (the same
// decision behind rate-limiter-flexible's promise API), and
// rate-limiter-flexible's RateLimiterMemory.consume, awaited.  In a cluster
// worker: sluice's SharedTable.tryAcquire (a limit shared by every worker)
// and rate-limiter-flexible's cluster mode (RateLimiterCluster: each
// consume is a message to the primary and back), awaited.  Every limit is
// high enough that every call is admitted (the admission path).  Each
// measure is timed in rounds that alternate between the candidates; the
// figure is the median ns per call over the rounds, and the ratios are
// taken between medians of the same run, so a loaded machine slows all
// alike.  Needs the devDependencies (npm install).
const cluster = require('cluster');
const path = require('path');
const os = require('os');
const sluice = require('..');
const { RateLimiterMemory, RateLimiterClusterMaster, RateLimiterCluster } = require('rate-limiter-flexible');

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}
const ROUNDS = arg('--rounds', 15);
const NUMBER = arg('--number', 500000);
const BIG = 1000000000; // points per second: every call is admitted

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// Each candidate: [name, calls per round, fn(n) running n calls (may be async)].
async function measure(cands) {
  const times = new Map(cands.map(([name]) => [name, []]));
  for (const [, n, fn] of cands) await fn(Math.min(n, 1000)); // warm-up
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, n, fn] of r % 2 ? [...cands].reverse() : cands) {
      const t0 = process.hrtime.bigint();
      await fn(n);
      times.get(name).push(Number(process.hrtime.bigint() - t0) / n);
    }
  }
  return new Map([...times].map(([k, v]) => [k, median(v)]));
}

function inProcess() {
  const lim = new sluice.Limiter(`token-bucket ${BIG}/s`);
  const coarse = new sluice.Limiter(`token-bucket ${BIG}/s clock=coarse`);
  const table = new sluice.Table(`token-bucket ${BIG}/s`, 1024);
  const flex = new sluice.RateLimiterSluice({ points: BIG, duration: 1, algorithm: 'token-bucket' });
  const rlf = new RateLimiterMemory({ points: BIG, duration: 1 });
  return measure([
    ['sluice Limiter.tryAcquire()', NUMBER, (n) => {
      for (let i = 0; i < n; i++) lim.tryAcquire();
    }],
    ['sluice Limiter.tryAcquire(), clock=coarse', NUMBER, (n) => {
      for (let i = 0; i < n; i++) coarse.tryAcquire();
    }],
    ['sluice Table.tryAcquire(key)', NUMBER, (n) => {
      for (let i = 0; i < n; i++) table.tryAcquire('client-42');
    }],
    ['sluice RateLimiterSluice.consume(key), awaited', NUMBER / 4, async (n) => {
      for (let i = 0; i < n; i++) await flex.consume('client-42');
    }],
    ['rate-limiter-flexible RateLimiterMemory.consume(key), awaited', NUMBER / 4, async (n) => {
      for (let i = 0; i < n; i++) await rlf.consume('client-42');
    }],
  ]);
}

async function inWorker(region) {
  const shared = new sluice.SharedTable(region, `token-bucket ${BIG}/s`, 1024);
  const rlf = new RateLimiterCluster({ keyPrefix: 'bench', points: BIG, duration: 1, timeoutMs: 10000 });
  for (let i = 0; i < 1000 && !rlf._initiated; i++) await new Promise((r) => setTimeout(r, 10));
  const res = await measure([
    ['sluice SharedTable.tryAcquire(key), in a worker', NUMBER, (n) => {
      for (let i = 0; i < n; i++) shared.tryAcquire('client-42');
    }],
    ['rate-limiter-flexible RateLimiterCluster.consume(key), in a worker, awaited', NUMBER / 100,
      async (n) => {
        for (let i = 0; i < n; i++) await rlf.consume('client-42');
      }],
  ]);
  shared.close();
  return res;
}

function row(name, ns, base) {
  const ratio = base === undefined ? '' : `${(ns / base).toFixed(1)}x`;
  return `| ${name} | ${ns.toFixed(0)} | ${ratio} |`;
}

async function main() {
  if (cluster.isWorker) {
    const res = await inWorker(process.env.SLUICE_BENCH_REGION);
    process.send({ res: [...res] });
    return;
  }
  new RateLimiterClusterMaster(); // eslint-disable-line no-new
  const region = `/sluice-node-bench-${process.pid}`;
  const mine = await inProcess();
  cluster.setupPrimary({ exec: __filename, args: process.argv.slice(2) });
  const w = cluster.fork({ SLUICE_BENCH_REGION: region });
  const theirs = await new Promise((resolve, reject) => {
    w.on('message', (m) => m && m.res && resolve(new Map(m.res)));
    w.on('exit', (code) => reject(new Error(`bench worker exited with ${code}`)));
  });
  w.kill();
  sluice.SharedTable.unlink(region);

  const lim = mine.get('sluice Limiter.tryAcquire()');
  const mem = mine.get('rate-limiter-flexible RateLimiterMemory.consume(key), awaited');
  const sh = theirs.get('sluice SharedTable.tryAcquire(key), in a worker');
  const clu = theirs.get('rate-limiter-flexible RateLimiterCluster.consume(key), in a worker, awaited');
  console.log(`Node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg()[0].toFixed(1)}, ` +
              `median of ${ROUNDS} rounds, ns per call (x: times sluice Limiter.tryAcquire)`);
  console.log('| call | ns | x |');
  console.log('| --- | ---: | ---: |');
  for (const [k, v] of mine) console.log(row(k, v, lim));
  for (const [k, v] of theirs) console.log(row(k, v, lim));
  console.log('');
  console.log(`RateLimiterMemory.consume / Limiter.tryAcquire: ${(mem / lim).toFixed(1)}x (target >= 5x)`);
  console.log(`RateLimiterCluster.consume / Limiter.tryAcquire: ${(clu / lim).toFixed(0)}x (target >= 100x)`);
  console.log(`RateLimiterCluster.consume / SharedTable.tryAcquire: ${(clu / sh).toFixed(0)}x (both shared by the workers)`);
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
