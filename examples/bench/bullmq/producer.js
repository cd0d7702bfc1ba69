// The BullMQ peer's producer (examples/bench/peer/): one job scheduler
// per job, j00000 … (the benchmark's job names), every one on the whole
// second (`pattern: '* * * * * *'`), each iteration a no-op job named
// `noop` with BullMQ's default options. Prints one line and exits.
//
//   node producer.js PORT JOBS
'use strict';

const { Queue } = require('bullmq');

const BATCH = 500;

async function main() {
  const port = Number(process.argv[2]);
  const jobs = Number(process.argv[3]);
  if (!Number.isInteger(port) || !Number.isInteger(jobs) || jobs < 1) {
    throw new Error('usage: node producer.js PORT JOBS');
  }
  const queue = new Queue('bench', { connection: { host: '127.0.0.1', port } });
  await queue.waitUntilReady();
  const started = Date.now();
  for (let first = 0; first < jobs; first += BATCH) {
    const upserts = [];
    for (let n = first; n < Math.min(first + BATCH, jobs); n += 1) {
      const id = `j${String(n).padStart(5, '0')}`;
      upserts.push(
        queue.upsertJobScheduler(id, { pattern: '* * * * * *' }, { name: 'noop', data: {} }),
      );
    }
    await Promise.all(upserts);
  }
  console.log(`upserted ${jobs} job schedulers in ${Date.now() - started} ms`);
  await queue.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
