'use strict';
// express.js -- requests/s of one Express app behind express-rate-limit
// under 4 cluster workers, with sluice's store (SluiceStore on a
// SharedTable: one limit for all workers) against express-rate-limit's
// MemoryStore (one limit per worker, not shared), in one run
// (docs/benchmarks.md, "Node.js"):
//
//   node bench/express.js [--rounds 5] [--seconds 5] [--concurrency 16]
//                         [--stores sluice,memory]
//
// The app is test/fixtures/express_worker.js; the limit (10^9 a minute) is
// never reached, so every request takes the same path through the app and
// the difference is the store's cost.  The two apps run at the same time,
// 4 workers each on ports of their own, each driven by a load process of
// its own (bench/load_client.js, keep-alive connections on loopback) for
// the same seconds: on a machine shared with other work both see the same
// CPU, where apps measured one after the other would see whatever the
// other tenants left at that moment.  The figure per round is each app's
// requests/s and their ratio; the result is the median ratio of the rounds.
// Each round also reads the CPU time the 4 workers of each app used
// (/proc/PID/stat, user + system) and divides it by the requests they
// served: CPU us a request, which depends far less on what else the machine
// runs than requests/s does; its ratio is the store's cost in the app.
// `--stores memory,memory` (or sluice,sluice) runs the same store twice:
// the spread of that ratio is what the machine's noise alone gives;
// `local` is SluiceStore on a Table of each worker's own (not shared).
const cluster = require('cluster');
const fs = require('fs');
const net = require('net');
const path = require('path');
const os = require('os');
const { execFile } = require('child_process');
const sluice = require('..');
const { start, stop } = require('../test/fixtures/cluster');

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}
const ROUNDS = arg('--rounds', 5);
const SECONDS = arg('--seconds', 5);
const CONC = arg('--concurrency', 16);
const WORKER = path.join(__dirname, '..', 'test', 'fixtures', 'express_worker.js');
const CLIENT = path.join(__dirname, 'load_client.js');
const si = process.argv.indexOf('--stores');
const STORES = si > 0 ? process.argv[si + 1].split(',') : ['sluice', 'memory'];
if (STORES.length !== 2 || !STORES.every((k) => ['sluice', 'local', 'memory'].includes(k))) {
  throw new Error('--stores takes two of sluice, local, memory: e.g. sluice,memory');
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// CPU ticks (user + system) of the processes `pids`, from /proc.
function cpuTicks(pids) {
  let sum = 0;
  for (const pid of pids) {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    sum += Number(f[11]) + Number(f[12]); // utime, stime (fields 14, 15)
  }
  return sum;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

// The load process, asynchronously: the primary accepts the connections
// (cluster's round-robin), so it must not block while the clients run.
function load(port) {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [CLIENT, String(port), String(SECONDS * 1000), String(CONC)],
      { encoding: 'utf8', timeout: (SECONDS + 120) * 1000 }, (err, out) => {
        if (err) return reject(err);
        const r = JSON.parse(out);
        if (r.hung || r.errors || r.codes['200'] !== r.done) return reject(new Error(`bad run: ${out}`));
        return resolve({ rps: r.done / (r.ms / 1000), done: r.done });
      });
  });
}

async function main() {
  if (!cluster.isPrimary) return;
  const region = `/sluice-node-bench-express-${process.pid}`;
  const ps = await freePort();
  const pm = await freePort();
  // two sluice apps share nothing: a region each
  const a = await start(WORKER, [STORES[0], region + 'a', '1000000000', '60000', String(ps)], 4);
  const b = await start(WORKER, [STORES[1], region + 'b', '1000000000', '60000', String(pm)], 4);
  const rows = [];
  const pa = a.workers.map((w) => w.process.pid);
  const pb = b.workers.map((w) => w.process.pid);
  const TICK_US = 1e6 / 100; // USER_HZ, 100 on Linux
  try {
    for (let r = 0; r < ROUNDS; r++) {
      const ca = cpuTicks(pa);
      const cb = cpuTicks(pb);
      const [x, y] = await Promise.all([load(ps), load(pm)]);
      const ua = ((cpuTicks(pa) - ca) * TICK_US) / x.done;
      const ub = ((cpuTicks(pb) - cb) * TICK_US) / y.done;
      rows.push({ s: x.rps, m: y.rps, ratio: x.rps / y.rps, ua, ub, cpu: ua / ub });
      console.log(`round ${r + 1}: ${STORES[0]} ${x.rps.toFixed(0)}, ${STORES[1]} ${y.rps.toFixed(0)} ` +
                  `requests/s, ratio ${(x.rps / y.rps).toFixed(3)}; CPU us a request ` +
                  `${ua.toFixed(0)} / ${ub.toFixed(0)}, ratio ${(ua / ub).toFixed(3)}`);
    }
  } finally {
    await stop([...a.workers, ...b.workers]);
    sluice.SharedTable.unlink(region + 'a');
    sluice.SharedTable.unlink(region + 'b');
  }
  console.log(`Node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg()[0].toFixed(1)}, ` +
              `4 workers per app, ${CONC} connections per app, ${SECONDS} s a round, ` +
              `median of ${ROUNDS} rounds`);
  console.log('| store | requests/s | CPU us a request |');
  console.log('| --- | ---: | ---: |');
  const name = { sluice: 'SluiceStore (SharedTable, one limit for the 4 workers)',
                 local: 'SluiceStore (a Table per worker)',
                 memory: 'MemoryStore (one limit per worker)' };
  console.log(`| ${name[STORES[0]]} | ${median(rows.map((x) => x.s)).toFixed(0)} | ` +
              `${median(rows.map((x) => x.ua)).toFixed(0)} |`);
  console.log(`| ${name[STORES[1]]} | ${median(rows.map((x) => x.m)).toFixed(0)} | ` +
              `${median(rows.map((x) => x.ub)).toFixed(0)} |`);
  const ratios = rows.map((x) => x.ratio);
  console.log(`${STORES[0]} / ${STORES[1]}, median of the rounds' ratios: ${median(ratios).toFixed(3)} ` +
              `(${Math.min(...ratios).toFixed(3)} .. ${Math.max(...ratios).toFixed(3)}; target: within 5%)`);
  const cpus = rows.map((x) => x.cpu);
  console.log(`CPU a request, ${STORES[0]} / ${STORES[1]}, median of the rounds' ratios: ` +
              `${median(cpus).toFixed(3)} (${Math.min(...cpus).toFixed(3)} .. ${Math.max(...cpus).toFixed(3)})`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
