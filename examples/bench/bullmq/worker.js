// A BullMQ peer worker (examples/bench/peer/): processes the queue `bench`
// with a no-op processor at the given concurrency. The first thing the
// processor does is read the wall clock (µs); it notes that with the job's
// scheduler, the tick the job was meant for and BullMQ's `processedOn`
// (ms, set when the job was moved to active), one
//   SCHEDULER \t TICK_MS \t CALLED_US \t PROCESSED_ON_MS
// line per job, appended to OUT every second and on SIGTERM, after which
// the worker closes (waiting for its active jobs) and exits 0. A job
// scheduler's job id is `repeat:<scheduler id>:<tick ms>`: the tick is read
// from it (timestamp + delay when it does not parse). Prints `ready` once
// its connection is.
//
//   node worker.js PORT CONCURRENCY OUT
'use strict';

const fs = require('node:fs');
const { Worker } = require('bullmq');

const port = Number(process.argv[2]);
const concurrency = Number(process.argv[3]);
const out = process.argv[4];
if (!Number.isInteger(port) || !Number.isInteger(concurrency) || !out) {
  console.error('usage: node worker.js PORT CONCURRENCY OUT');
  process.exit(2);
}

let lines = [];

function nowUs() {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

function tickOf(job) {
  const id = String(job.id || '');
  const tick = Number(id.slice(id.lastIndexOf(':') + 1));
  if (id.startsWith('repeat:') && Number.isSafeInteger(tick)) {
    return tick;
  }
  return job.timestamp + (job.delay || 0);
}

function flush() {
  if (lines.length > 0) {
    fs.appendFileSync(out, lines.join(''));
    lines = [];
  }
}

const worker = new Worker(
  'bench',
  async (job) => {
    const calledUs = nowUs();
    lines.push(`${job.repeatJobKey}\t${tickOf(job)}\t${calledUs}\t${job.processedOn ?? ''}\n`);
  },
  { connection: { host: '127.0.0.1', port }, concurrency },
);
worker.on('error', (error) => console.error(`worker error: ${error.message}`));

const flusher = setInterval(flush, 1000);

let stopping = false;
async function stop() {
  if (stopping) {
    return;
  }
  stopping = true;
  clearInterval(flusher);
  try {
    await worker.close();
  } finally {
    flush();
    process.exit(0);
  }
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

worker
  .waitUntilReady()
  .then(() => console.log('ready'))
  .catch((error) => {
    console.error(error);
    process.exit(1);
  });
