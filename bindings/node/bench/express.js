'use strict';
// express.js -- requests/s of one Express app behind express-rate-limit
// under 4 cluster workers, with sluice's store (SluiceStore on a
// SharedTable: one limit for all workers) against express-rate-limit's
// MemoryStore (one limit per worker, not shared), in one run
// (docs/benchmarks.md, "Node.js"):
//
//   node bench/express.js [--rounds 3] [--seconds 5] [--concurrency 32]
//
// The app is test/fixtures/express_worker.js; the limit (10^9 a minute) is
// never reached, so every request takes the same path through the app and
// the figure is the store's cost.  The load comes from a process of its
// own (bench/load_client.js, keep-alive connections on loopback).  Rounds
// alternate the stores, each starting its 4 workers afresh; the figure is
// the median requests/s per store, and the ratio is between the medians.
const cluster = require('cluster');
const path = require('path');
const os = require('os');
const { execFileSync } = require('child_process');
const sluice = require('..');
const { start, stop } = require('../test/fixtures/cluster');

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}
const ROUNDS = arg('--rounds', 3);
const SECONDS = arg('--seconds', 5);
const CONC = arg('--concurrency', 32);
const WORKER = path.join(__dirname, '..', 'test', 'fixtures', 'express_worker.js');
const CLIENT = path.join(__dirname, 'load_client.js');

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function once(kind) {
  const region = `/sluice-node-bench-express-${process.pid}`;
  const { workers, port } = await start(WORKER, [kind, region, '1000000000', '60000'], 4);
  try {
    const out = execFileSync(process.execPath, [CLIENT, String(port), String(SECONDS * 1000), String(CONC)],
      { encoding: 'utf8', timeout: (SECONDS + 120) * 1000 });
    const r = JSON.parse(out);
    if (r.hung || r.errors || r.codes['200'] !== r.done) throw new Error(`bad run: ${out}`);
    return r.done / (r.ms / 1000);
  } finally {
    await stop(workers);
    if (kind === 'sluice') sluice.SharedTable.unlink(region);
  }
}

async function main() {
  if (!cluster.isPrimary) return;
  const rps = { sluice: [], memory: [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (const kind of r % 2 ? ['memory', 'sluice'] : ['sluice', 'memory']) {
      const x = await once(kind);
      rps[kind].push(x);
      console.log(`round ${r + 1} ${kind}: ${x.toFixed(0)} requests/s`);
    }
  }
  const s = median(rps.sluice);
  const m = median(rps.memory);
  console.log(`Node ${process.version}, ${os.cpus().length} CPUs, load ${os.loadavg()[0].toFixed(1)}, ` +
              `4 workers, ${CONC} connections, ${SECONDS} s a round, median of ${ROUNDS}`);
  console.log('| store | requests/s |');
  console.log('| --- | ---: |');
  console.log(`| SluiceStore (SharedTable, one limit for the 4 workers) | ${s.toFixed(0)} |`);
  console.log(`| MemoryStore (one limit per worker) | ${m.toFixed(0)} |`);
  console.log(`sluice / memory: ${(s / m).toFixed(3)} (target: within 5%)`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
