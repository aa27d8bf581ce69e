'use strict';
// flexible.js -- the verbs rate-limiter-flexible users know, on a sluice
// table: consume, get, delete, penalty, reward.  docs/node.md
// ("rate-limiter-flexible") says what maps exactly and what does not.
//
//   const limiter = new RateLimiterSluice({ points: 10, duration: 1 });
//   limiter.consume(ip).then(ok).catch((res) => tooMany(res.msBeforeNext));
//
// `points` per `duration` seconds become the spec "fixed-window POINTS/Nms"
// (another algorithm: `algorithm`); `shared: '/name'` puts the keys in a
// SharedTable, so every cluster or PM2 worker that makes the same limiter
// shares one limit per key, with no Redis.  The promises are settled at
// once: every decision is one synchronous call.
//
// The answers keep rate-limiter-flexible's shape (RateLimiterRes:
// msBeforeNext, remainingPoints, consumedPoints, isFirstInDuration).  Two
// rules of sluice make them differ where noted in docs/node.md: a refusal
// takes nothing (rate-limiter-flexible counts the refused points too), and
// fixed windows are aligned to the clock (rate-limiter-flexible's start at
// a key's first request).

const SUPPORTED = new Set(['points', 'duration', 'keyPrefix', 'algorithm', 'shared', 'maxKeys',
  'maxKeyBytes', 'evictLru']);
const PARTIAL_REWARD = new Set(['fixed-window', 'token-bucket', 'leaky-bucket']);

class RateLimiterRes {
  constructor(remainingPoints = 0, msBeforeNext = 0, consumedPoints = 0, isFirstInDuration = false) {
    this.remainingPoints = remainingPoints;
    this.msBeforeNext = msBeforeNext;
    this.consumedPoints = consumedPoints;
    this.isFirstInDuration = isFirstInDuration;
  }

  toString() {
    return JSON.stringify(this.toJSON());
  }

  toJSON() {
    return {
      remainingPoints: this.remainingPoints,
      msBeforeNext: this.msBeforeNext,
      consumedPoints: this.consumedPoints,
      isFirstInDuration: this.isFirstInDuration,
    };
  }
}

function makeFlexible(sluice, scratch) {
  class RateLimiterSluice {
    constructor(opts = {}) {
      if (opts === null || typeof opts !== 'object') {
        throw new TypeError('sluice: RateLimiterSluice options must be an object');
      }
      for (const k of Object.keys(opts)) {
        if (!SUPPORTED.has(k)) {
          throw new TypeError(`sluice: RateLimiterSluice does not support the option "${k}" ` +
                              '(docs/node.md, "rate-limiter-flexible")');
        }
      }
      const points = opts.points === undefined ? 4 : opts.points;
      const duration = opts.duration === undefined ? 1 : opts.duration;
      if (!Number.isSafeInteger(points) || points < 1) {
        throw new RangeError(`sluice: points must be a positive integer, not ${points}`);
      }
      const ms = duration * 1000;
      if (typeof duration !== 'number' || !Number.isSafeInteger(ms) || ms < 1) {
        throw new RangeError('sluice: duration must be a positive number of seconds, in whole ms ' +
                             `(rate-limiter-flexible's 0, "never expires", has no spec), not ${duration}`);
      }
      this.points = points;
      this.duration = duration;
      this.keyPrefix = opts.keyPrefix === undefined ? 'rlflx' : String(opts.keyPrefix);
      this.algorithm = opts.algorithm === undefined ? 'fixed-window' : opts.algorithm;
      this.spec = `${this.algorithm} ${points}/${ms}ms`;
      this.info = sluice.parseSpec(this.spec); // a bad algorithm: SpecError
      const maxKeys = opts.maxKeys === undefined ? 100000 : opts.maxKeys;
      const tableOpts = { evictLru: Boolean(opts.evictLru) };
      if (opts.shared !== undefined) {
        if (opts.maxKeyBytes !== undefined) tableOpts.maxKeyBytes = opts.maxKeyBytes;
        this.table = new sluice.SharedTable(opts.shared, this.spec, maxKeys, tableOpts);
      } else {
        if (opts.maxKeyBytes !== undefined) {
          throw new TypeError('sluice: maxKeyBytes is an option of a shared limiter (shared: path)');
        }
        this.table = new sluice.Table(this.spec, maxKeys, tableOpts);
      }
      this.shared = opts.shared !== undefined;
    }

    getKey(key) {
      return `${this.keyPrefix}:${key}`;
    }

    // ms until every point the key has consumed is back (a fixed window's
    // end): the wait for a request of the whole capacity.
    _msToReset(k) {
      const r = this.table.peek(k, this.info.capacity);
      return r.retryAfterMs < 0 ? 0 : r.retryAfterMs;
    }

    // The decision Table._decideReset just made, from the scratch
    // ([remaining, retryAfterMs, waitMs, error, resetMs]), as
    // rate-limiter-flexible answers it.
    _res(allowed, points) {
      const remaining = scratch[0];
      const consumed = this.info.capacity - remaining;
      if (allowed) {
        return new RateLimiterRes(remaining, scratch[4], consumed, consumed === points);
      }
      // refused: nothing taken, but the answer reads as
      // rate-limiter-flexible's, which counts the refused points:
      // consumedPoints includes them (so consumedPoints > points holds) and
      // remainingPoints is 0 (isFirstInDuration: the key held nothing)
      const ms = scratch[1] >= 0 ? scratch[1] : scratch[4];
      return new RateLimiterRes(0, ms, consumed + points, consumed === 0);
    }

    _points(points) {
      if (!Number.isSafeInteger(points) || points < 0) {
        throw new RangeError(`sluice: points must be an integer >= 0, not ${points}`);
      }
      return points;
    }

    /** Take `points` for `key`: resolves with a RateLimiterRes, or rejects
     * with one when the key has not got them (an Error for a bad call). */
    consume(key, points = 1) {
      try {
        const allowed = this.table._decideReset(this.getKey(key), this._points(points));
        const res = this._res(allowed, points);
        return allowed ? Promise.resolve(res) : Promise.reject(res);
      } catch (e) {
        return Promise.reject(e);
      }
    }

    /** The key's state, or null when it has consumed nothing (at rest). */
    get(key) {
      try {
        const k = this.getKey(key);
        const r = this.table.peek(k, 0);
        const consumed = this.info.capacity - r.remaining;
        if (consumed === 0) return Promise.resolve(null);
        return Promise.resolve(new RateLimiterRes(r.remaining, this._msToReset(k), consumed, false));
      } catch (e) {
        return Promise.reject(e);
      }
    }

    /** Forget the key: resolves true when it was held. */
    delete(key) {
      try {
        return Promise.resolve(this.table.remove(this.getKey(key)));
      } catch (e) {
        return Promise.reject(e);
      }
    }

    /** Charge `points` without refusing: up to what the key has left
     * (sluice never admits past the limit; a fixed window is then closed
     * to its end, as rate-limiter-flexible's penalty would). */
    penalty(key, points = 1) {
      try {
        const k = this.getKey(key);
        this._points(points);
        let r = this.table.decide(k, points);
        for (let i = 0; i < 4 && !r.allowed && r.remaining > 0; i++) {
          r = this.table.decide(k, Math.min(points, r.remaining));
        }
        const p = this.table.peek(k, 0);
        return Promise.resolve(new RateLimiterRes(p.remaining, this._msToReset(k),
          this.info.capacity - p.remaining, false));
      } catch (e) {
        return Promise.reject(e);
      }
    }

    /** Give `points` back.  All of what the key consumed (or more): the key
     * is reset, on every algorithm and table.  Part of it: on an in-process
     * table of fixed-window (exact), token-bucket or leaky-bucket (exact
     * but for a fraction of a permit, never more); elsewhere a SluiceError
     * (sluice's tables keep admission times a partial give-back cannot
     * rewrite, and a shared table cannot do it atomically). */
    reward(key, points = 1) {
      try {
        const k = this.getKey(key);
        this._points(points);
        const consumed = this.info.capacity - this.table.peek(k, 0).remaining;
        if (points >= consumed) {
          this.table.reset(k);
        } else if (!this.shared && PARTIAL_REWARD.has(this.info.algorithm)) {
          const now = sluice.now();
          this.table.reset(k);
          this.table.decide(k, consumed - points, now);
        } else {
          throw new sluice.SluiceError(
            `sluice: reward of ${points} of the ${consumed} points consumed is not supported ` +
            `on ${this.shared ? 'a shared table' : 'a ' + this.info.algorithm + ' table'} ` +
            '(reward them all to reset the key)', sluice.EINVAL);
        }
        const p = this.table.peek(k, 0);
        return Promise.resolve(new RateLimiterRes(p.remaining, this._msToReset(k),
          this.info.capacity - p.remaining, false));
      } catch (e) {
        return Promise.reject(e);
      }
    }

    /** Free the table (a shared table's region stays for the others). */
    close() {
      this.table.close();
    }
  }
  return { RateLimiterSluice, RateLimiterRes };
}

module.exports = { makeFlexible, RateLimiterRes };
