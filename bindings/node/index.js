'use strict';
// index.js -- sluice for Node.js: the addon's classes (src/sluice_node.c)
// with their options, the error classes, and the adapters for
// rate-limiter-flexible users (lib/flexible.js) and express-rate-limit
// (lib/express.js).  docs/node.md is the reference.
//
// Every decision is one synchronous call into the C library: no promise,
// no worker thread, nothing that waits.  Times are nanoseconds on
// CLOCK_MONOTONIC (now(), the axis of process.hrtime.bigint()); every
// deciding method takes an optional nowNs (BigInt, or a safe-integer
// Number), the C library's `_at` functions, so tests inject time.

const path = require('path');

function load() {
  const tried = [];
  for (const dir of ['Release', 'Debug']) {
    const file = path.join(__dirname, 'build', dir, 'sluice.node');
    try {
      return require(file);
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND') throw e;
      tried.push(file);
    }
  }
  throw new Error('sluice: the addon is not built (npm install, or npm run build in ' +
                  __dirname + '); looked for ' + tried.join(', '));
}

const native = load();

const CODES = {
  [native.EINVAL]: 'SLUICE_EINVAL',
  [native.ENOMEM]: 'SLUICE_ENOMEM',
  [native.ERANGE]: 'SLUICE_ERANGE',
  [native.EFULL]: 'SLUICE_EFULL',
  [native.ENOENT]: 'SLUICE_ENOENT',
  [native.EBUSY]: 'SLUICE_EBUSY',
};

/** A call the library refused: `errno` is its negative code, `code` its
 * name ('SLUICE_EINVAL' ...), the message the library's one-line reason. */
class SluiceError extends Error {
  constructor(message, errno) {
    super(message);
    this.name = 'SluiceError';
    this.errno = errno === undefined ? native.EINVAL : errno;
    this.code = CODES[this.errno] || 'SLUICE_E' + String(-this.errno);
  }
}

/** A spec the grammar refuses; the message names the offending token. */
class SpecError extends SluiceError {
  constructor(message, errno) {
    super(message, errno);
    this.name = 'SpecError';
  }
}

native._init(SluiceError, SpecError);

const {
  limiterNew, limiterTry, limiterTryNow, limiterDecide, limiterPeek, limiterSpec, limiterClose,
  tableNew, sharedNew, tableTry, tableDecide, tableDecideReset, tablePeek, tableRemove,
  tableReset, tableSize, tableClose,
} = native;

// A decide() or peek() returns `allowed` and leaves its details in the
// addon's scratch (src/sluice_node.c): read them into a Result here.
const F = new Float64Array(native._scratch, 0, 5);
const B = new BigInt64Array(native._scratch, 48, 2);

function result(allowed) {
  return {
    allowed,
    remaining: F[0],
    retryAfterMs: F[1],
    waitMs: F[2],
    retryAfterNs: B[0],
    waitNs: B[1],
    error: F[3],
  };
}

function tableFlags(options, cls) {
  if (options === undefined || options === null) return 0;
  if (typeof options !== 'object') {
    throw new TypeError(`sluice: ${cls} options must be an object, not ${typeof options}`);
  }
  for (const k of Object.keys(options)) {
    if (k !== 'evictLru' && (k !== 'maxKeyBytes' || cls !== 'SharedTable')) {
      throw new TypeError(`sluice: unknown ${cls} option "${k}"`);
    }
  }
  return options.evictLru ? native.EVICT_LRU : 0;
}

/** One limiter: `new Limiter('token-bucket 100/s burst=20')`. */
class Limiter {
  #h;

  constructor(spec) {
    this.#h = limiterNew(spec);
  }

  /** Ask for `permits` (default 1) at nowNs (default now()): true if granted. */
  tryAcquire(permits, nowNs) {
    if (permits === undefined && nowNs === undefined) return limiterTryNow(this.#h);
    return limiterTry(this.#h, permits, nowNs);
  }

  /** tryAcquire with the decision's details (a Result). */
  decide(permits, nowNs) {
    return result(limiterDecide(this.#h, permits, nowNs));
  }

  /** The state at nowNs: a probe, which changes nothing. */
  peek(nowNs) {
    return result(limiterPeek(this.#h, nowNs));
  }

  /** The canonical spec. */
  get spec() {
    return limiterSpec(this.#h);
  }

  /** Free the C limiter now (idempotent); later calls throw SluiceError. */
  close() {
    limiterClose(this.#h);
  }
}

const kHandle = Symbol('sluice handle');

/** One limiter per key, for up to maxKeys keys, in this process:
 * `new Table('sliding-wheel 10/s', 100000, { evictLru: false })`. */
class Table {
  #h;

  constructor(spec, maxKeys, options) {
    // SharedTable passes its handle, made by sharedNew
    this.#h = spec === kHandle ? maxKeys : tableNew(spec, maxKeys, tableFlags(options, 'Table'));
  }

  /** Ask for `permits` (default 1) for `key` at nowNs: true if granted. */
  tryAcquire(key, permits, nowNs) {
    return tableTry(this.#h, key, permits, nowNs);
  }

  /** tryAcquire with the decision's details (a Result). */
  decide(key, permits, nowNs) {
    return result(tableDecide(this.#h, key, permits, nowNs));
  }

  /** decide() at the table's clock, for lib/flexible.js and
   * lib/express.js: returns `allowed` and leaves the details in the
   * scratch (`scratch` below: [remaining, retryAfterMs, waitMs, error,
   * resetMs], resetMs the ms until the key holds no permit), so the
   * adapters make their own answer and no Result. */
  _decideReset(key, permits) {
    return tableDecideReset(this.#h, key, permits);
  }

  /** What a request for `permits` (default 0) would get, changing nothing. */
  peek(key, permits, nowNs) {
    return result(tablePeek(this.#h, key, permits, nowNs));
  }

  /** Drop the key's state: true if it was held. */
  remove(key) {
    return tableRemove(this.#h, key);
  }

  /** Put the key back at rest (as remove; idempotent). */
  reset(key) {
    tableReset(this.#h, key);
  }

  /** Keys held now (in use or at rest). */
  get size() {
    return tableSize(this.#h);
  }

  /** Free the handle now (idempotent); later calls throw SluiceError. */
  close() {
    tableClose(this.#h);
  }
}

/** A table every process that opens `path` shares ("/name": POSIX shared
 * memory; anything else a file): cluster and PM2 workers share one limit
 * per key.  options: { maxKeyBytes = 64, evictLru = false }. */
class SharedTable extends Table {
  constructor(path, spec, maxKeys, options) {
    const flags = tableFlags(options, 'SharedTable');
    const mkb = options && options.maxKeyBytes !== undefined ? options.maxKeyBytes : 64;
    super(kHandle, sharedNew(path, spec, maxKeys, mkb, flags));
  }

  /** Remove the name (processes that have it open keep using it): true if
   * it was there. */
  static unlink(path) {
    return native.unlink(path);
  }
}

const api = {
  Limiter,
  Table,
  SharedTable,
  SluiceError,
  SpecError,
  now: native.now,
  version: native.version,
  checkSpec: native.checkSpec,
  parseSpec: native.parseSpec,
  strerror: native.strerror,
  EINVAL: native.EINVAL,
  ENOMEM: native.ENOMEM,
  ERANGE: native.ERANGE,
  EFULL: native.EFULL,
  ENOENT: native.ENOENT,
  MAX_KEY_BYTES: native.MAX_KEY_BYTES,
};

const { makeFlexible } = require('./lib/flexible');
const { makeStore } = require('./lib/express');

// the adapters read a decision's details from the scratch (F)
Object.assign(api, makeFlexible(api, F));
api.SluiceStore = makeStore(api, F);

module.exports = api;
