// index.d.ts -- the TypeScript declarations of sluice for Node.js
// (docs/node.md is the reference).

/** A key: a string (its UTF-8 bytes) or bytes (a Buffer, any TypedArray,
 * a DataView). Any length is limited: a key longer than the table's cap is
 * held by its 128-bit keyed digest. */
export type Key = string | ArrayBufferView;

/** A count or a time in ns: a safe non-negative integer Number, or a BigInt
 * up to 2n**64n-1n. */
export type U64 = number | bigint;

/** One decision. */
export interface Result {
  /** The permits were granted. */
  readonly allowed: boolean;
  /** Whole permits a request at the same instant could still get. */
  readonly remaining: number;
  /** For a refusal, the least wait in ms (rounded up) after which the same
   * request, with no other traffic, is allowed; -1: never (more permits
   * than the capacity); 0 when allowed. */
  readonly retryAfterMs: number;
  /** leaky-bucket shaper: ms to wait before proceeding (rounded up). */
  readonly waitMs: number;
  /** retryAfterMs in exact nanoseconds. */
  readonly retryAfterNs: bigint;
  /** waitMs in exact nanoseconds. */
  readonly waitNs: bigint;
  /** 0, or EFULL: a full table refused a new key (its policy). */
  readonly error: number;
}

/** A call the library refused. */
export class SluiceError extends Error {
  constructor(message: string, errno?: number);
  /** The library's negative code (EINVAL ...). */
  readonly errno: number;
  /** Its name: 'SLUICE_EINVAL', 'SLUICE_ENOMEM', ... */
  readonly code: string;
}

/** A spec the grammar refuses; the message names the offending token. */
export class SpecError extends SluiceError {}

/** One limiter, e.g. `new Limiter('token-bucket 100/s burst=20')`. */
export class Limiter {
  constructor(spec: string);
  /** Ask for `permits` (default 1) at nowNs (default now()): true if granted. */
  tryAcquire(permits?: U64, nowNs?: U64 | null): boolean;
  /** As tryAcquire, with the decision's details. */
  decide(permits?: U64, nowNs?: U64 | null): Result;
  /** The limiter's state at nowNs (a probe: changes nothing). */
  peek(nowNs?: U64 | null): Result;
  /** The canonical spec. */
  readonly spec: string;
  /** Free the limiter now (idempotent); later calls throw SluiceError. */
  close(): void;
}

export interface TableOptions {
  /** When full of keys in use, evict the least recently used key instead
   * of refusing the new one. */
  evictLru?: boolean;
}

export interface SharedTableOptions extends TableOptions {
  /** Keys up to this many bytes are stored whole (0 .. 65536, default 64);
   * longer ones by their digest. */
  maxKeyBytes?: number;
}

/** One limiter per key, for up to maxKeys keys, in this process. */
export class Table {
  constructor(spec: string, maxKeys: number, options?: TableOptions);
  /** Ask for `permits` (default 1) for `key` at nowNs: true if granted. A
   * full table refuses a new key (false). */
  tryAcquire(key: Key, permits?: U64, nowNs?: U64 | null): boolean;
  /** As tryAcquire, with the details (error EFULL for a full table). */
  decide(key: Key, permits?: U64, nowNs?: U64 | null): Result;
  /** What a request for `permits` (default 0: the key's state) would get,
   * without making the key or changing anything. */
  peek(key: Key, permits?: U64, nowNs?: U64 | null): Result;
  /** Drop the key's state: true if it was held. */
  remove(key: Key): boolean;
  /** Put the key back at rest (as remove; idempotent). */
  reset(key: Key): void;
  /** Keys held now (in use or at rest). */
  readonly size: number;
  /** Free the table now (idempotent); later calls throw SluiceError. */
  close(): void;
}

/** A table shared by every process that opens `path` ("/name": POSIX
 * shared memory; anything else: a file) with the same spec and sizes. */
export class SharedTable extends Table {
  constructor(path: string, spec: string, maxKeys: number, options?: SharedTableOptions);
  /** Remove the name (processes that have it open keep using it). */
  static unlink(path: string): boolean;
}

/** CLOCK_MONOTONIC in ns: the axis of nowNs (process.hrtime.bigint()'s). */
export function now(): bigint;
/** The library's version. */
export function version(): string;
/** The canonical form of a spec, or throws SpecError. */
export function checkSpec(spec: string): string;
/** The library's description of an error code. */
export function strerror(errno: number): string;

export const EINVAL: number;
export const ENOMEM: number;
export const ERANGE: number;
export const EFULL: number;
export const ENOENT: number;
export const MAX_KEY_BYTES: number;

/** A spec's values, defaults filled in. */
export interface SpecInfo {
  algorithm: string;
  clock: 'monotonic' | 'coarse' | 'realtime';
  limit: number;
  periodNs: bigint;
  /** The most permits one request can get (burst=, capacity=, or LIMIT). */
  capacity: number;
  slots: number;
  nodelay: boolean;
}
/** Parse a spec, or throw SpecError. */
export function parseSpec(spec: string): SpecInfo;

// ---- rate-limiter-flexible's verbs (docs/node.md) ----

export class RateLimiterRes {
  constructor(remainingPoints?: number, msBeforeNext?: number, consumedPoints?: number,
              isFirstInDuration?: boolean);
  remainingPoints: number;
  msBeforeNext: number;
  consumedPoints: number;
  isFirstInDuration: boolean;
  toJSON(): { remainingPoints: number; msBeforeNext: number; consumedPoints: number;
              isFirstInDuration: boolean };
}

export interface RateLimiterSluiceOptions {
  /** Points per duration (default 4). */
  points?: number;
  /** Seconds (default 1), a whole number of ms. */
  duration?: number;
  keyPrefix?: string;
  /** Default 'fixed-window'. */
  algorithm?: string;
  /** A SharedTable path: every process with this limiter shares the limit. */
  shared?: string;
  maxKeys?: number;
  maxKeyBytes?: number;
  evictLru?: boolean;
}

export class RateLimiterSluice {
  constructor(opts?: RateLimiterSluiceOptions);
  readonly points: number;
  readonly duration: number;
  readonly keyPrefix: string;
  readonly spec: string;
  /** Resolves when granted; rejects with a RateLimiterRes when not (an
   * Error for a bad call). */
  consume(key: string | number, points?: number): Promise<RateLimiterRes>;
  get(key: string | number): Promise<RateLimiterRes | null>;
  delete(key: string | number): Promise<boolean>;
  penalty(key: string | number, points?: number): Promise<RateLimiterRes>;
  reward(key: string | number, points?: number): Promise<RateLimiterRes>;
  close(): void;
}

// ---- express-rate-limit's Store (docs/node.md) ----

export interface SluiceStoreOptions {
  /** A SharedTable path: every worker with this store shares one limit. */
  shared?: string;
  /** Default 'fixed-window'. */
  algorithm?: string;
  maxKeys?: number;
  maxKeyBytes?: number;
  prefix?: string;
}

export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

export class SluiceStore {
  constructor(opts?: SluiceStoreOptions);
  readonly localKeys: boolean;
  init(options: { windowMs: number; limit?: unknown; max?: unknown;
                  skipFailedRequests?: boolean; skipSuccessfulRequests?: boolean }): void;
  increment(key: string): ClientRateLimitInfo;
  decrement(key: string): void;
  resetKey(key: string): void;
  get(key: string): ClientRateLimitInfo | undefined;
  shutdown(): void;
}
