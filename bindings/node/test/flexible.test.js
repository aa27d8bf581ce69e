'use strict';
// rate-limiter-flexible's verbs on sluice (RateLimiterSluice), against
// rate-limiter-flexible's own RateLimiterMemory as the reference, on the
// same calls, within one window (a day; sluice's fixed windows are aligned
// to the clock, rate-limiter-flexible's start at a key's first request:
// the test runs where both stay in their first window).  What maps
// exactly: the decisions and remainingPoints, consumedPoints and
// isFirstInDuration of every answer, the refusals' included (consumedPoints
// counting the refused points); get, delete, reward; penalty up to the
// limit.  What does not, checked here as documented: msBeforeNext is the
// time to the end of sluice's aligned window (0 for a key holding nothing); and after a refusal sluice
// has taken nothing, so a smaller request may then pass where
// rate-limiter-flexible, which counted the refused points, refuses it.
const test = require('node:test');
const assert = require('node:assert');
const { RateLimiterMemory } = require('rate-limiter-flexible');
const sluice = require('..');
const { regionName } = require('./helpers');

const DAY = 86400;
const DAY_NS = BigInt(DAY) * 1000000000n;

// ms to the end of sluice's window of a day
function msToWindowEnd() {
  return Number((DAY_NS - (sluice.now() % DAY_NS)) / 1000000n);
}

async function outcome(p) {
  try {
    const r = await p;
    return ['ok', r];
  } catch (e) {
    if (e instanceof Error) throw e;
    return ['refused', e];
  }
}

function shape(r) {
  return r === null || typeof r !== 'object' ? r : { remainingPoints: r.remainingPoints, consumedPoints: r.consumedPoints,
                               isFirstInDuration: r.isFirstInDuration };
}

async function same(a, b, what, holdsNothing = false) {
  const [ka, ra] = await outcome(a);
  const [kb, rb] = await outcome(b);
  assert.strictEqual(ka, kb, what);
  assert.deepStrictEqual(shape(ra), shape(rb), what);
  if (ra !== null && typeof ra === 'object') {
    // the time to the window's end; 0 for a key that holds nothing
    const want = ra.consumedPoints === 0 || holdsNothing ? 0 : msToWindowEnd();
    assert.ok(Math.abs(ra.msBeforeNext - want) < 10000, `${what}: msBeforeNext ${ra.msBeforeNext}`);
    assert.ok(rb.msBeforeNext > 0);
    assert.deepStrictEqual(Object.keys(ra.toJSON()).sort(), Object.keys(rb.toJSON()).sort());
  }
  return [ka, ra];
}

for (const shared of [false, true]) {
  test(`consume, get, delete, penalty, reward as RateLimiterMemory (${shared ? 'SharedTable' : 'Table'})`,
    async (t) => {
      if (msToWindowEnd() < 120000) {
        t.skip('sluice\'s day window ends within 2 min');
        return;
      }
      const name = regionName('rlf');
      const opts = { points: 5, duration: DAY };
      const ours = new sluice.RateLimiterSluice(shared ? { ...opts, shared: name } : opts);
      const ref = new RateLimiterMemory(opts);
      try {
        await same(ours.consume('a'), ref.consume('a'), 'first');
        await same(ours.consume('a', 2), ref.consume('a', 2), 'second');
        await same(ours.get('a'), ref.get('a'), 'get');
        await same(ours.get('nobody'), ref.get('nobody'), 'get of an unknown key');
        await same(ours.consume('a', 2), ref.consume('a', 2), 'up to the limit');
        const [k] = await same(ours.consume('a'), ref.consume('a'), 'past the limit');
        assert.strictEqual(k, 'refused');
        await same(ours.delete('a'), ref.delete('a'), 'delete');
        await same(ours.delete('a'), ref.delete('a'), 'delete again');
        await same(ours.consume('a', 5), ref.consume('a', 5), 'the whole quota after delete');
        await same(ours.reward('a', 5), ref.reward('a', 5), 'reward all');
        await same(ours.consume('b'), ref.consume('b'), 'b');
        await same(ours.penalty('b', 3), ref.penalty('b', 3), 'penalty within the limit');
        await same(ours.consume('b', 2), ref.consume('b', 2), 'b after its penalty');
        const [kr, rr] = await same(ours.consume('d', 9), ref.consume('d', 9), 'more than the points',
          true);
        assert.strictEqual(kr, 'refused');
        assert.strictEqual(rr.consumedPoints, 9);
        // documented difference: sluice's refusal took nothing
        await ours.delete('c');
        await ref.delete('c');
        await same(ours.consume('c', 3), ref.consume('c', 3), 'c');
        await same(ours.consume('c', 3), ref.consume('c', 3), 'c refused');
        const [ko] = await outcome(ours.consume('c', 2));
        const [kf] = await outcome(ref.consume('c', 2));
        assert.deepStrictEqual([ko, kf], ['ok', 'refused']);
        if (shared) {
          await assert.rejects(ours.reward('c', 1), /not supported on a shared table/);
        } else {
          const r = await ours.reward('c', 1); // fixed-window: exact
          assert.strictEqual(r.consumedPoints, 4);
        }
      } finally {
        ours.close();
        if (shared) sluice.SharedTable.unlink(name);
      }
    });
}

test('a limiter shared by name is one limit; penalty never passes the limit', async () => {
  const name = regionName('rlf2');
  const a = new sluice.RateLimiterSluice({ points: 4, duration: DAY, shared: name, keyPrefix: 'api' });
  const b = new sluice.RateLimiterSluice({ points: 4, duration: DAY, shared: name, keyPrefix: 'api' });
  try {
    await a.consume('ip', 3);
    const r = await b.consume('ip', 2).catch((e) => e);
    assert.strictEqual(r.remainingPoints, 0);
    assert.strictEqual(r.consumedPoints, 5);
    const p = await b.penalty('ip', 10);
    assert.strictEqual(p.remainingPoints, 0);
    assert.strictEqual(p.consumedPoints, 4);
    await assert.rejects(a.consume('ip'), (e) => e.remainingPoints === 0 && e.msBeforeNext > 0);
    assert.strictEqual((await a.get('ip')).consumedPoints, 4);
    assert.strictEqual(await b.delete('ip'), true);
    assert.strictEqual(await a.get('ip'), null);
  } finally {
    a.close();
    b.close();
    sluice.SharedTable.unlink(name);
  }
});

test('partial reward: a token bucket gets its points back; a sliding log cannot', async () => {
  const tb = new sluice.RateLimiterSluice({ points: 10, duration: 3600, algorithm: 'token-bucket' });
  await tb.consume('k', 8);
  const r = await tb.reward('k', 3);
  assert.strictEqual(r.remainingPoints, 5);
  const sl = new sluice.RateLimiterSluice({ points: 10, duration: 3600, algorithm: 'sliding-log' });
  await sl.consume('k', 8);
  await assert.rejects(sl.reward('k', 3), (e) => e instanceof sluice.SluiceError &&
    /not supported on a sliding-log table/.test(e.message));
  assert.strictEqual((await sl.reward('k', 8)).remainingPoints, 10); // all of them: a reset
});

test('bad options and arguments', async () => {
  assert.throws(() => new sluice.RateLimiterSluice({ points: 5, blockDuration: 10 }),
    /does not support the option "blockDuration"/);
  assert.throws(() => new sluice.RateLimiterSluice({ points: 0 }), RangeError);
  assert.throws(() => new sluice.RateLimiterSluice({ duration: 0 }), /never expires/);
  assert.throws(() => new sluice.RateLimiterSluice({ algorithm: 'token-buckett' }), sluice.SpecError);
  assert.throws(() => new sluice.RateLimiterSluice({ maxKeyBytes: 8 }), TypeError);
  const l = new sluice.RateLimiterSluice({ points: 5, duration: 1 });
  await assert.rejects(l.consume('k', -1), RangeError);
  await assert.rejects(l.consume('k', 1.5), RangeError);
  await assert.rejects(l.penalty('k', 'x'), RangeError);
  assert.strictEqual((await l.consume('k')).remainingPoints, 4); // nothing was taken
});
