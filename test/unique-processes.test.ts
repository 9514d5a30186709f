import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, TEST_SCHEMA, type TestDatabase } from './support/database.js';

const PRODUCER = fileURLToPath(new URL('./processes/unique-enqueue-process.ts', import.meta.url));
const PROCESSES = 8;
const ENQUEUES = 200;

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.close();
});

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
