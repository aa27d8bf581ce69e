'use strict';
// load_client.js -- test/fixtures/load.js as a process of its own, for
// bench/express.js: node load_client.js PORT DURATION_MS CONCURRENCY;
// prints {done, codes, hung, errors, ms} as JSON.
const { run } = require('../test/fixtures/load');

const [port, durationMs, concurrency] = process.argv.slice(2).map(Number);
run({ port, durationMs, concurrency, path: () => '/' }).then((r) => {
  process.stdout.write(JSON.stringify({
    done: r.done, codes: Object.fromEntries(r.codes), hung: r.hung, errors: r.errors,
    ms: Number(r.t1 - r.t0) / 1e6,
  }) + '\n');
});
