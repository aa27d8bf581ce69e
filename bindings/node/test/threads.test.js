'use strict';
// worker_threads: each thread loads its own instance of the addon (its own
// error classes and result scratch) and makes its own objects; threads
// share a limit through a SharedTable, as processes do.  Four threads
// decide 100 times each on one key of "fixed-window 150/h": exactly 150
// admitted in all, and each thread's results read as its own.
const test = require('node:test');
const assert = require('node:assert');
const { Worker } = require('worker_threads');
const sluice = require('..');
const { regionName } = require('./helpers');

const CODE = `
const { parentPort, workerData } = require('worker_threads');
const sluice = require(workerData.pkg);
const t = new sluice.SharedTable(workerData.name, 'fixed-window 150/h', 16);
let allowed = 0;
let remainingOk = true;
for (let i = 0; i < 100; i++) {
  const r = t.decide('k', 1, 5000000000n);
  if (r.allowed) allowed++;
  if (r.allowed && !(r.remaining >= 0 && r.remaining < 150)) remainingOk = false;
}
let specError = false;
try { new sluice.Limiter('fixed-window 0/h'); } catch (e) { specError = e instanceof sluice.SpecError; }
t.close();
parentPort.postMessage({ allowed, remainingOk, specError });
`;

test('worker_threads share a SharedTable; each thread has its own addon instance', async () => {
  const name = regionName('threads');
  const first = new sluice.SharedTable(name, 'fixed-window 150/h', 16); // makes the region
  try {
    const results = await Promise.all(Array.from({ length: 4 }, () => new Promise((resolve, reject) => {
      const w = new Worker(CODE, { eval: true, workerData: { pkg: require.resolve('..'), name } });
      w.once('message', resolve);
      w.once('error', reject);
      w.once('exit', (code) => code !== 0 && reject(new Error(`worker exited ${code}`)));
    })));
    assert.strictEqual(results.reduce((n, r) => n + r.allowed, 0), 150);
    for (const r of results) {
      assert.ok(r.remainingOk);
      assert.ok(r.specError);
    }
    assert.strictEqual(first.peek('k', 0, 5000000000n).remaining, 0);
  } finally {
    first.close();
    sluice.SharedTable.unlink(name);
  }
});
