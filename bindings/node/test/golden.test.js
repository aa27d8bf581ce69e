'use strict';
// The contract's worked examples (tests/golden: each trace names its spec;
// the .expected file holds the decisions computed from the written rules,
// docs/decisions.md) through the addon: a Table per trace (each key its
// own limiter, as `sluice replay` does), a SharedTable, and Limiters, one
// per key.  Time is the trace's, passed as nowNs.
const test = require('node:test');
const assert = require('node:assert');
const sluice = require('..');
const { goldenCases, regionName } = require('./helpers');

const cases = goldenCases();

function row(q, r) {
  return [q.raw, q.key, q.permits, r.allowed ? 1 : 0, r.waitNs, r.remaining, r.retryAfterNs].join(',');
}

test('there are worked examples for every algorithm', () => {
  assert.ok(cases.length >= 7, `only ${cases.length} traces`);
  const algs = new Set(cases.map((c) => c.spec.split(' ')[0]));
  for (const a of ['fixed-window', 'sliding-log', 'sliding-wheel', 'sliding-approx',
                   'token-bucket', 'leaky-bucket']) {
    assert.ok(algs.has(a), a);
  }
});

for (const c of cases) {
  test(`golden ${c.name} through a Table`, () => {
    const t = new sluice.Table(c.spec, 1 << 16);
    try {
      const got = c.requests.map((q) => row(q, t.decide(q.key, q.permits, q.time)));
      assert.deepStrictEqual(got, c.expected);
    } finally {
      t.close();
    }
  });

  test(`golden ${c.name} through a SharedTable`, () => {
    const name = regionName('golden');
    const t = new sluice.SharedTable(name, c.spec, 64);
    try {
      const got = c.requests.map((q) => row(q, t.decide(Buffer.from(q.key), q.permits, q.time)));
      assert.deepStrictEqual(got, c.expected);
    } finally {
      t.close();
      sluice.SharedTable.unlink(name);
    }
  });

  test(`golden ${c.name} through Limiters, one per key, tryAcquire agreeing`, () => {
    const lims = new Map();
    const twins = new Map();
    try {
      const got = c.requests.map((q) => {
        if (!lims.has(q.key)) {
          lims.set(q.key, new sluice.Limiter(c.spec));
          twins.set(q.key, new sluice.Limiter(c.spec));
        }
        const r = lims.get(q.key).decide(q.permits, q.time);
        // tryAcquire on a twin limiter, permits and time as Numbers
        assert.strictEqual(twins.get(q.key).tryAcquire(Number(q.permits), Number(q.time)), r.allowed);
        return row(q, r);
      });
      assert.deepStrictEqual(got, c.expected);
    } finally {
      for (const l of [...lims.values(), ...twins.values()]) l.close();
    }
  });
}

test('retryAfterMs and waitMs are the ns rounded up; peek changes nothing', () => {
  // token-bucket 3/s burst=1: one token every 333333333.33 ns.
  const lim = new sluice.Limiter('token-bucket 3/s burst=1');
  assert.strictEqual(lim.tryAcquire(1, 0n), true);
  const r = lim.decide(1, 0n);
  assert.strictEqual(r.allowed, false);
  assert.strictEqual(r.retryAfterNs, 333333334n);
  assert.strictEqual(r.retryAfterMs, 334);
  assert.strictEqual(lim.decide(2, 0n).retryAfterMs, -1); // more than the burst: never
  const p = lim.peek(333333334n);
  assert.strictEqual(p.allowed, true);
  assert.strictEqual(p.remaining, 1);
  assert.strictEqual(lim.peek(0n).remaining, 0); // the probe took nothing
  // leaky-bucket shaper 10/s capacity=5: the second request waits 100 ms.
  const lb = new sluice.Limiter('leaky-bucket 10/s capacity=5');
  lb.tryAcquire(1, 0n);
  const w = lb.decide(1, 1n);
  assert.strictEqual(w.waitNs, 99999999n);
  assert.strictEqual(w.waitMs, 100);
  // Table.peek: what a request would get, without making the key.
  const t = new sluice.Table('fixed-window 2/s', 8);
  assert.strictEqual(t.peek('k', 3, 0n).retryAfterMs, -1);
  assert.strictEqual(t.peek('k', 1, 0n).remaining, 1);
  assert.strictEqual(t.size, 0);
  t.tryAcquire('k', 2, 5n);
  const tp = t.peek('k', 1, 999999999n);
  assert.strictEqual(tp.allowed, false);
  assert.strictEqual(tp.retryAfterNs, 1n);
  assert.strictEqual(t.size, 1);
  assert.strictEqual(t.remove('k'), true);
  assert.strictEqual(t.remove('k'), false);
});

test('times near 2^63 and idle gaps of years', () => {
  const lim = new sluice.Limiter('token-bucket 10/s burst=5');
  const late = (1n << 63n) - 1n;
  assert.strictEqual(lim.decide(5, late - 10n).allowed, true);
  const r = lim.decide(1, late);
  assert.strictEqual(r.allowed, false);
  assert.strictEqual(r.retryAfterNs, 100000000n - 10n);
  // a time past 2^63-1 counts as 2^63-1
  assert.strictEqual(lim.decide(1, (1n << 64n) - 1n).allowed, false);
  const t = new sluice.Table('sliding-log 2/d', 4);
  assert.strictEqual(t.tryAcquire('k', 2, 1n), true);
  assert.strictEqual(t.tryAcquire('k', 1, 86400n * 10n ** 9n), false);
  assert.strictEqual(t.tryAcquire('k', 1, 86400n * 10n ** 9n + 1n), true);
  assert.strictEqual(t.tryAcquire('k', 1, 10n * 365n * 86400n * 10n ** 9n), true); // 10 years idle
});
