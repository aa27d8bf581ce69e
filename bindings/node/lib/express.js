'use strict';
// express.js -- a store for express-rate-limit (its Store interface: init,
// increment, decrement, resetKey, get, shutdown), so an Express app
// switches with one line:
//
//   app.use(rateLimit({ windowMs: 60000, limit: 100,
//                       store: new SluiceStore({ shared: '/my-app' }) }));
//
// With `shared`, every cluster or PM2 worker opens the same SharedTable and
// they share one exact limit per client, with no Redis; without it the
// store is one process's (as express-rate-limit's MemoryStore).
//
// express-rate-limit counts hits and refuses when the count passes its
// limit; here sluice decides.  init() takes express-rate-limit's windowMs
// and limit and makes the table "ALGORITHM LIMIT/WINDOWms" (fixed-window
// unless `algorithm` says otherwise).  increment() asks the table for one
// permit: admitted, totalHits is the permits the key has taken in its
// window (at most the limit); refused, it is limit + 1, so express-rate-limit
// answers 429 -- and the refusal took nothing, so a client that keeps
// knocking does not extend its own ban.  resetTime is when the key is back
// at rest (a fixed window's end).
//
// decrement() would give back a hit, which express-rate-limit asks for with
// skipFailedRequests or skipSuccessfulRequests.  A refused request took
// nothing, and the store cannot tell which hit a decrement is for (giving
// back one taken by another request would admit past the limit), so those
// options are refused: init() records the error (express-rate-limit logs
// an init error and goes on) and every increment() throws it, so the
// misconfiguration cannot pass unnoticed.

function makeStore(sluice, scratch) {
  class SluiceStore {
    /**
     * @param {object} [opts]
     * @param {string} [opts.shared] a SharedTable path ("/name" or a file):
     *   every process with this store shares one limit per key
     * @param {string} [opts.algorithm='fixed-window']
     * @param {number} [opts.maxKeys=100000]
     * @param {number} [opts.maxKeyBytes] (shared only)
     * @param {string} [opts.prefix=''] prepended to every key
     */
    constructor(opts = {}) {
      const known = new Set(['shared', 'algorithm', 'maxKeys', 'maxKeyBytes', 'prefix']);
      for (const k of Object.keys(opts)) {
        if (!known.has(k)) throw new TypeError(`sluice: unknown SluiceStore option "${k}"`);
      }
      this.shared = opts.shared;
      this.algorithm = opts.algorithm || 'fixed-window';
      this.maxKeys = opts.maxKeys === undefined ? 100000 : opts.maxKeys;
      this.maxKeyBytes = opts.maxKeyBytes;
      this.prefix = opts.prefix === undefined ? '' : String(opts.prefix);
      // express-rate-limit: keys of a store with localKeys are this
      // process's alone
      this.localKeys = this.shared === undefined;
      this.table = null;
      this.error = new sluice.SluiceError('sluice: SluiceStore used before init()', sluice.EINVAL);
    }

    init(options) {
      this.error = null;
      if (options.skipFailedRequests || options.skipSuccessfulRequests) {
        this.error = new sluice.SluiceError(
          'sluice: SluiceStore cannot give hits back: skipFailedRequests and ' +
          'skipSuccessfulRequests are not supported (docs/node.md)', sluice.EINVAL);
        throw this.error;
      }
      const limit = options.limit !== undefined ? options.limit : options.max;
      if (!Number.isSafeInteger(limit) || limit < 1) {
        const what = typeof limit === 'function' ? 'a function' : limit;
        this.error = new sluice.SluiceError(
          `sluice: SluiceStore needs a fixed limit >= 1 (a number), not ${what}`, sluice.EINVAL);
        throw this.error;
      }
      if (!Number.isSafeInteger(options.windowMs) || options.windowMs < 1) {
        this.error = new sluice.SluiceError(
          `sluice: windowMs must be a whole number of ms >= 1, not ${options.windowMs}`, sluice.EINVAL);
        throw this.error;
      }
      this.limit = limit;
      this.windowMs = options.windowMs;
      const spec = `${this.algorithm} ${limit}/${options.windowMs}ms`;
      this.capacity = sluice.parseSpec(spec).capacity;
      if (this.table) this.table.close();
      try {
        this.table = this.shared === undefined
          ? new sluice.Table(spec, this.maxKeys)
          : new sluice.SharedTable(this.shared, spec, this.maxKeys,
            this.maxKeyBytes === undefined ? undefined : { maxKeyBytes: this.maxKeyBytes });
      } catch (e) {
        this.error = e;
        throw e;
      }
      this.spec = spec;
    }

    increment(key) {
      if (this.error) throw this.error;
      // one call: the decision, and in the scratch [remaining,
      // retryAfterMs, waitMs, error, resetMs] the ms until the key holds
      // no permit
      const allowed = this.table._decideReset(this.prefix + key);
      return {
        totalHits: allowed ? this.capacity - scratch[0] : this.limit + 1,
        resetTime: new Date(Date.now() + scratch[4]),
      };
    }

    decrement() {
      // init() refuses the options that call this (see the head comment)
      throw new sluice.SluiceError('sluice: SluiceStore cannot give hits back', sluice.EINVAL);
    }

    resetKey(key) {
      if (this.error) throw this.error;
      this.table.reset(this.prefix + key);
    }

    get(key) {
      if (this.error) throw this.error;
      const k = this.prefix + key;
      const r = this.table.peek(k, 0);
      if (r.remaining === this.capacity) return undefined;
      const back = this.table.peek(k, this.capacity).retryAfterMs;
      return { totalHits: this.capacity - r.remaining, resetTime: new Date(Date.now() + Math.max(back, 0)) };
    }

    shutdown() {
      if (this.table) this.table.close();
      this.table = null;
      this.error = new sluice.SluiceError('sluice: SluiceStore is shut down', sluice.EINVAL);
    }
  }
  return SluiceStore;
}

module.exports = { makeStore };
