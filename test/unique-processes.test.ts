import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { BatchResult } from './processes/unique-batch-process.js';
import { TEST_SCHEMA, waitFor } from './support/database.js';
import { useFileDatabase } from './support/file-database.js';
import { forkScript, sent } from './support/processes.js';

const PRODUCER = fileURLToPath(new URL('./processes/unique-enqueue-process.ts', import.meta.url));
const PROCESSES = 8;
const ENQUEUES = 200;

const { db } = useFileDatabase();

async function startProducer(key: string): Promise<ChildProcess> {
  const child = fork(PRODUCER, [], {
    execArgv: ['--import', 'tsx'],
    env: {
      ...process.env,
      SKIPLOCK_URL: db.url,
      SKIPLOCK_SCHEMA: TEST_SCHEMA,
      UNIQUE_KEY: key,
      ENQUEUES: String(ENQUEUES),
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [message] = (await Promise.race([once(child, 'message'), once(child, 'exit')])) as unknown[];
  if (message !== 'ready') throw new Error(`producer exited before ready (code ${String(message)})`);
  return child;
}

describe('unique keys across processes', () => {
  it(`${PROCESSES} processes × ${ENQUEUES} concurrent enqueues of one key make exactly one job`, async () => {
    const producers = await Promise.all(Array.from({ length: PROCESSES }, () => startProducer('race-1')));
    const replies = producers.map((p) => once(p, 'message') as Promise<[unknown[]]>);
    for (const p of producers) p.send('go');
    const results = (await Promise.all(replies)).flatMap(([r]) => r) as {
      id?: string;
      duplicate?: boolean;
      error?: string;
    }[];
    await Promise.all(producers.map((p) => (p.exitCode === null ? once(p, 'exit') : undefined)));

    expect(results.filter((r) => r.error !== undefined)).toEqual([]);
    expect(results).toHaveLength(PROCESSES * ENQUEUES);
    const rows = await db.query<{ id: string }>(
      `SELECT id::text FROM ${db.jobs} WHERE unique_key = 'race-1'`,
    );
    expect(rows).toHaveLength(1);
    const id = rows[0]!.id;
    expect(new Set(results.map((r) => r.id))).toEqual(new Set([id]));
    expect(results.filter((r) => r.duplicate === false)).toHaveLength(1);
    const [all] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.jobs}`);
    expect(all!.n).toBe(1);
  });
});

const BATCH_PRODUCERS = 6;
const BATCHES = 60;

describe('overlapping batches with unique keys', () => {
  it(`${BATCH_PRODUCERS} processes × ${BATCHES} batches over shared keys, with workers finishing the holders: no batch fails, every key has one job at a time`, async () => {
    const skiplock = db.skiplock();
    const running = new Set<string>();
    const overlaps: string[] = [];
    const ran = new Map<string, number>();
    const worker = skiplock.worker({
      queues: ['default'],
      concurrency: 8,
      handleSignals: false,
      handlers: {
        batch: async (job) => {
          ran.set(job.id, (ran.get(job.id) ?? 0) + 1);
          const key = (job.payload as { key: string }).key;
          if (running.has(key)) overlaps.push(key);
          running.add(key);
          await new Promise((r) => setImmediate(r));
          running.delete(key);
        },
      },
    });
    worker.on('error', () => {});
    await worker.start();
    try {
      const producers = Array.from({ length: BATCH_PRODUCERS }, () =>
        forkScript('../processes/unique-batch-process.ts', {
          SKIPLOCK_URL: db.url,
          SKIPLOCK_SCHEMA: TEST_SCHEMA,
          BATCHES: String(BATCHES),
          BATCH_SIZE: '15',
          KEYS: '30',
        }),
      );
      await Promise.all(producers.map((p) => sent(p, 'ready')));
      const replies = producers.map((p) => once(p, 'message') as Promise<[BatchResult[]]>);
      for (const p of producers) p.send('go');
      const batches = (await Promise.all(replies)).flatMap(([r]) => r);
      await Promise.all(producers.map((p) => (p.exitCode === null ? once(p, 'exit') : undefined)));

      expect(batches.filter((b) => 'error' in b)).toEqual([]);
      expect(batches).toHaveLength(BATCH_PRODUCERS * BATCHES);
      const inserted = new Set<string>();
      const duplicates = new Set<string>();
      for (const batch of batches) {
        if (!('items' in batch)) continue;
        const idOfKey = new Map<string, string>();
        for (const item of batch.items) {
          // Within a batch, every item of a key ends with the same job.
          expect(idOfKey.get(item.key) ?? item.id).toBe(item.id);
          idOfKey.set(item.key, item.id);
          if (item.duplicate) duplicates.add(item.id);
          else {
            expect(inserted.has(item.id)).toBe(false);
            inserted.add(item.id);
          }
        }
      }
      // A duplicate is always of a job some batch inserted.
      expect([...duplicates].filter((id) => !inserted.has(id))).toEqual([]);
      await waitFor(
        async () =>
          (
            await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${db.jobs} WHERE kind = 'batch'`)
          )[0]!.n === 0,
        60_000,
        'the workers to finish every job',
      );
      // Each inserted job ran once, and never two jobs of one key at a time.
      expect([...ran.keys()].sort()).toEqual([...inserted].sort());
      expect([...ran.values()].filter((n) => n !== 1)).toEqual([]);
      expect(overlaps).toEqual([]);
    } finally {
      await worker.stop();
    }
  }, 180_000);
});
