'use strict';
// Bad input gets a clear error and loses nothing: bad specs (SpecError,
// naming the token), keys of the wrong type (TypeError), long keys (never
// an escape from the limit: the library holds a key longer than the
// table's cap by its digest, so no key is too long to be limited), bad
// permits, times and sizes, a method on the wrong object or after close,
// another spec on an existing shared region (SluiceError, not SpecError).
// After each refusal the object decides exactly as if the bad call had
// never been made.
const test = require('node:test');
const assert = require('node:assert');
const sluice = require('..');
const { regionName } = require('./helpers');

const S = 1000000000n;

const BAD_SPECS = [
  ['token-bucket 10/s burts=5', 'burts=5'],
  ['token-buckett 10/s', 'token-buckett'],
  ['token-bucket 0/s', '0'],
  ['token-bucket 10/x', 'x'],
  ['token-bucket -3/s', '-3'],
  ['sliding-log 10/s burst=2', 'burst=2'],
  ['fixed-window 10/s junk', 'junk'],
  ['token-bucket 10000000000000/s', '10000000000000'],
  ['', ''],
];

test('a bad spec is a SpecError naming the token, from every constructor', () => {
  for (const [spec, token] of BAD_SPECS) {
    const makers = [
      () => new sluice.Limiter(spec),
      () => new sluice.Table(spec, 8),
      () => sluice.checkSpec(spec),
    ];
    const name = regionName('badspec');
    makers.push(() => new sluice.SharedTable(name, spec, 8));
    for (const make of makers) {
      assert.throws(make, (e) => {
        assert.ok(e instanceof sluice.SpecError, `${spec}: ${e}`);
        assert.ok(e instanceof sluice.SluiceError);
        assert.ok(e instanceof Error);
        assert.strictEqual(e.name, 'SpecError');
        assert.ok(e.errno === sluice.EINVAL || e.errno === sluice.ERANGE, String(e.errno));
        assert.match(e.code, /^SLUICE_E(INVAL|RANGE)$/);
        assert.ok(e.message.length > 0 && !e.message.includes('\n'));
        if (token) assert.ok(e.message.includes(token), `"${e.message}" names "${token}"`);
        return true;
      });
    }
    // the shared region was never made
    assert.strictEqual(sluice.SharedTable.unlink(name), false);
  }
  assert.strictEqual(sluice.checkSpec('token-bucket 100/1000ms'), 'token-bucket 100/s');
});

test('a NUL in a spec is refused, never cut short; a spec is a string', () => {
  assert.throws(() => new sluice.Limiter('token-bucket 10/s\0 burts=5'),
    (e) => e instanceof sluice.SpecError && /NUL byte at offset 17/.test(e.message));
  assert.throws(() => new sluice.Table(42, 8), TypeError);
  assert.throws(() => new sluice.Limiter(), /spec must be a string, not undefined/);
  assert.throws(() => new sluice.SharedTable('/x\0y', 'token-bucket 1/s', 8), TypeError);
});

test('a key of the wrong type is a TypeError, and nothing is decided', () => {
  const t = new sluice.Table('fixed-window 2/s', 8);
  const st = regionName('keytype');
  const s = new sluice.SharedTable(st, 'fixed-window 2/s', 8);
  try {
    for (const tab of [t, s]) {
      for (const [key, type] of [[42, 'number'], [undefined, 'undefined'], [null, 'null'],
                                 [{}, 'object'], [true, 'boolean'], [Symbol('k'), 'symbol'],
                                 [12n, 'bigint'], [['a'], 'object']]) {
        for (const call of [() => tab.tryAcquire(key, 1, S), () => tab.decide(key, 1, S),
                            () => tab.peek(key, 1, S), () => tab.remove(key), () => tab.reset(key)]) {
          assert.throws(call, (e) => e instanceof TypeError && e.message.includes(`not ${type}`));
        }
      }
      assert.strictEqual(tab.size, 0);
      // every key form: a string and its UTF-8 bytes are one key
      assert.strictEqual(tab.tryAcquire('ключ', 1, S), true);
      assert.strictEqual(tab.tryAcquire(Buffer.from('ключ'), 1, S), true);
      assert.strictEqual(tab.tryAcquire(new Uint8Array(Buffer.from('ключ')), 1, S), false);
      assert.strictEqual(tab.tryAcquire(new DataView(Buffer.from('ключ').buffer.slice(0)), 1, S + S),
        true);
      assert.strictEqual(tab.tryAcquire('', 2, S), true); // the empty key is a key
      assert.strictEqual(tab.tryAcquire(Buffer.alloc(0), 1, S), false);
    }
  } finally {
    t.close();
    s.close();
    sluice.SharedTable.unlink(st);
  }
});

function checkLongKeys(tab, long) {
  // limit 1/h: a long key is limited; one differing in its last byte, or
  // its prefix, is another key (neither truncated nor lost)
  const other = long.slice(0, -1) + (long.endsWith('a') ? 'b' : 'a');
  assert.strictEqual(tab.tryAcquire(long, 1, S), true);
  assert.strictEqual(tab.tryAcquire(long, 1, S), false);
  assert.strictEqual(tab.decide(Buffer.from(long), 1, S).retryAfterMs, 3599 * 1000); // the window [0, 1 h)
  assert.strictEqual(tab.tryAcquire(other, 1, S), true);
  assert.strictEqual(tab.tryAcquire(long.slice(0, -1), 1, S), true);
  assert.strictEqual(tab.peek(long, 1, S).allowed, false);
  assert.strictEqual(tab.remove(long), true);
  assert.strictEqual(tab.tryAcquire(long, 1, S), true);
}

test('a key too long to store is limited by its digest: no length escapes the limit', () => {
  const t = new sluice.Table('fixed-window 1/h', 16);
  try {
    checkLongKeys(t, 'k'.repeat(sluice.MAX_KEY_BYTES + 1));
    checkLongKeys(t, 'x'.repeat(4 << 20)); // 4 MiB
  } finally {
    t.close();
  }
  const name = regionName('long');
  const s = new sluice.SharedTable(name, 'fixed-window 1/h', 16, { maxKeyBytes: 4 });
  try {
    checkLongKeys(s, '12345');
    checkLongKeys(s, 'y'.repeat(100000));
    assert.strictEqual(s.tryAcquire('9876', 1, S), true); // stored whole
    assert.strictEqual(s.tryAcquire('9876', 1, S), false);
  } finally {
    s.close();
    sluice.SharedTable.unlink(name);
  }
});

test('bad permits and times are RangeError or TypeError, and take nothing', () => {
  const lim = new sluice.Limiter('fixed-window 2/s');
  const t = new sluice.Table('fixed-window 2/s', 8);
  const bad = [[-1, RangeError], [1.5, RangeError], [NaN, RangeError], [Infinity, RangeError],
               [2 ** 53, RangeError], [-1n, RangeError], [2n ** 64n, RangeError],
               ['1', TypeError], [{}, TypeError], [null, TypeError]];
  for (const [v, cls] of bad) {
    assert.throws(() => lim.tryAcquire(v, S), cls, `permits ${String(v)}`);
    assert.throws(() => lim.decide(v, S), cls);
    assert.throws(() => t.tryAcquire('k', v, S), cls);
    if (v !== null) { // null is "now" for a time
      assert.throws(() => lim.tryAcquire(1, v), cls, `nowNs ${String(v)}`);
      assert.throws(() => t.decide('k', 1, v), cls);
      assert.throws(() => lim.peek(v), cls);
    }
  }
  assert.throws(() => lim.tryAcquire(-1), /permits must be an integer in 0 \.\. 2\^53-1/);
  // nothing was taken: the whole quota is there
  assert.strictEqual(lim.decide(2, S).allowed, true);
  assert.strictEqual(t.decide('k', 2, S).allowed, true);
  assert.strictEqual(t.size, 1);
  // the largest counts are fine
  assert.strictEqual(lim.tryAcquire(2n ** 64n - 1n, 2n ** 64n - 1n), false);
  assert.strictEqual(lim.decide(Number.MAX_SAFE_INTEGER, 3 * 1e9).retryAfterMs, -1);
});

test('bad sizes and options', () => {
  for (const v of [0, -1, 2 ** 32 + 1, 1.5, NaN]) {
    assert.throws(() => new sluice.Table('token-bucket 1/s', v), RangeError, String(v));
  }
  assert.throws(() => new sluice.Table('token-bucket 1/s', '10'), TypeError);
  assert.throws(() => new sluice.Table('token-bucket 1/s', 10, { evictLRU: true }),
    /unknown Table option "evictLRU"/);
  assert.throws(() => new sluice.Table('token-bucket 1/s', 10, { maxKeyBytes: 4 }), TypeError);
  assert.throws(() => new sluice.Table('token-bucket 1/s', 10, 'lru'), TypeError);
  const name = regionName('size');
  assert.throws(() => new sluice.SharedTable(name, 'token-bucket 1/s', 8, { maxKeyBytes: 65537 }),
    RangeError);
  assert.throws(() => new sluice.SharedTable(name, 'token-bucket 1/s', 0), RangeError);
  assert.strictEqual(sluice.SharedTable.unlink(name), false);
  assert.throws(() => sluice.Limiter('token-bucket 1/s'), TypeError); // without new
});

test('a full table refuses a new key (EFULL, a refusal, not an exception)', () => {
  const t = new sluice.Table('token-bucket 1/s', 1);
  assert.strictEqual(t.tryAcquire('a', 1, S), true);
  assert.strictEqual(t.tryAcquire('b', 1, S), false);
  const r = t.decide('b', 1, S);
  assert.strictEqual(r.allowed, false);
  assert.strictEqual(r.error, sluice.EFULL);
  // evictLru: the new key takes the old one's place
  const e = new sluice.Table('token-bucket 1/s', 1, { evictLru: true });
  assert.strictEqual(e.tryAcquire('a', 1, S), true);
  assert.strictEqual(e.tryAcquire('b', 1, S), true);
});

test('methods check their object; close is idempotent and final', () => {
  const lim = new sluice.Limiter('token-bucket 1/s');
  const t = new sluice.Table('token-bucket 1/s', 4);
  assert.throws(() => sluice.Table.prototype.decide.call(lim, 'k'), TypeError);
  assert.throws(() => sluice.Limiter.prototype.tryAcquire.call(t), TypeError);
  assert.throws(() => sluice.Limiter.prototype.tryAcquire.call({}), TypeError);
  lim.close();
  lim.close();
  t.close();
  for (const call of [() => lim.tryAcquire(), () => lim.decide(), () => lim.peek(), () => lim.spec,
                      () => t.tryAcquire('k'), () => t.peek('k'), () => t.remove('k'), () => t.size]) {
    assert.throws(call, (e) => e instanceof sluice.SluiceError && /is closed/.test(e.message));
  }
});

test('another spec on an existing shared region is a SluiceError naming both', () => {
  const name = regionName('other');
  const a = new sluice.SharedTable(name, 'token-bucket 5/s', 8);
  try {
    assert.throws(() => new sluice.SharedTable(name, 'token-bucket 6/s', 8), (e) => {
      assert.ok(e instanceof sluice.SluiceError);
      assert.ok(!(e instanceof sluice.SpecError));
      assert.ok(e.message.includes('5/s') && e.message.includes('6/s'), e.message);
      return true;
    });
    assert.throws(() => new sluice.SharedTable(name, 'token-bucket 5/s', 9), sluice.SluiceError);
    // the first handle is unharmed
    assert.strictEqual(a.tryAcquire('k', 5, S), true);
    const b = new sluice.SharedTable(name, 'token-bucket 5/s', 8);
    assert.strictEqual(b.tryAcquire('k', 1, S), false); // one limit, two handles
    b.close();
  } finally {
    a.close();
    assert.strictEqual(sluice.SharedTable.unlink(name), true);
  }
});
