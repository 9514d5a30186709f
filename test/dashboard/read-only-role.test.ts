/**
 * The read-only role of sql/grants.sql: a read-only dashboard connected as it
 * answers every page (archive, schedules and metrics included), and the role
 * can change nothing.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDashboard } from '../../src/dashboard/index.js';
import { Skiplock } from '../../src/index.js';
import { onServer, quoteIdent, TEST_SCHEMA } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { hasPsql } from '../support/psql.js';
import { type Seeded, seed } from './support/seed.js';

const GRANTS = fileURLToPath(new URL('../../sql/grants.sql', import.meta.url));

const suffix = randomBytes(4).toString('hex');
const roles = {
  producer: { name: `skiplock_ro_producer_${suffix}`, password: randomBytes(8).toString('hex') },
  worker: { name: `skiplock_ro_worker_${suffix}`, password: randomBytes(8).toString('hex') },
  // A name that needs quoting: the script quotes it.
  reader: { name: `skiplock "reader" ${suffix}`, password: randomBytes(8).toString('hex') },
};

const { db } = useFileDatabase();
let seeded: Seeded;
let archivedId: string;
const opened: Skiplock[] = [];

function urlAs(role: { name: string; password: string }): string {
  const url = new URL(db.url);
  url.username = encodeURIComponent(role.name);
  url.password = encodeURIComponent(role.password);
  return url.toString();
}

beforeAll(async () => {
  for (const role of Object.values(roles)) {
    await onServer(`CREATE ROLE ${quoteIdent(role.name)} LOGIN PASSWORD '${role.password}'`);
  }
  seeded = await seed(db);
  // One succeeded job moved to the archive, as onSuccess 'archive' does, and one schedule.
  archivedId = seeded.ids.succeeded[0]!;
  await db.query(
    `WITH moved AS (DELETE FROM ${db.jobs} WHERE id = $1 RETURNING *)
     INSERT INTO ${db.archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                created_at, finished_at)
     SELECT id, queue, kind, payload, status, priority, run_at, attempts, max_attempts, created_at, finished_at
     FROM moved`,
    [archivedId],
  );
  await db.skiplock().schedule('nightly-resize', '0 3 * * *', 'resize_image', { n: 0 });
});
afterAll(async () => {
  await Promise.all(opened.map((s) => s.close()));
  const names = Object.values(roles).map((r) => quoteIdent(r.name));
  await db?.query(`DROP OWNED BY ${names.join(', ')}`).catch(() => {});
  for (const role of Object.values(roles)) await onServer(`DROP ROLE IF EXISTS ${quoteIdent(role.name)}`);
});

describe('the read-only role of sql/grants.sql', () => {
  it.skipIf(!hasPsql())('a read-only dashboard connected as it answers every page with 200', async () => {
    await promisify(execFile)('psql', [
      db.url,
      '-X',
      '-q',
      '-v',
      'ON_ERROR_STOP=1',
      '-v',
      `schema=${TEST_SCHEMA}`,
      '-v',
      `producer_role=${roles.producer.name}`,
      '-v',
      `worker_role=${roles.worker.name}`,
      '-v',
      `reader_role=${roles.reader.name}`,
      '-f',
      GRANTS,
    ]);
    const asReader = new Skiplock({ connectionString: urlAs(roles.reader), schema: TEST_SCHEMA });
    opened.push(asReader);
    const dashboard = createDashboard(asReader, { readOnly: true });
    const pages = [
      '/',
      '/?partial=1',
      '/schedules',
      '/jobs',
      '/jobs?partial=1',
      '/jobs?status=dead',
      '/jobs?status=succeeded&queue=media',
      '/jobs?kind=send_invoice_email',
      `/jobs/${seeded.ids.queued[0]}`,
      `/jobs/${seeded.ids.running[0]}`,
      `/jobs/${seeded.ids.dead[0]}`,
      `/jobs/${archivedId}`,
      '/metrics',
    ];
    for (const path of pages) {
      const res = await dashboard.request(path);
      expect(res.status, `${path}: ${res.status === 200 ? '' : await res.text()}`).toBe(200);
    }
    const archived = await (await dashboard.request(`/jobs/${archivedId}`)).text();
    expect(archived).toContain('archive');
    expect(await (await dashboard.request('/schedules')).text()).toContain('nightly-resize');
    // A job in neither table is a 404, not a 500.
    expect((await dashboard.request('/jobs/999999999')).status).toBe(404);
  });

  it.skipIf(!hasPsql())(
    'the role changes nothing: no insert, update, delete or function that writes',
    async () => {
      const client = new pg.Client({ connectionString: urlAs(roles.reader) });
      await client.connect();
      const s = quoteIdent(TEST_SCHEMA);
      const codeOf = (text: string) =>
        client.query(text).then(
          () => undefined,
          (error: { code?: string }) => error.code,
        );
      try {
        for (const text of [
          `INSERT INTO ${s}.jobs (kind) VALUES ('reader')`,
          `UPDATE ${s}.jobs SET priority = 1`,
          `DELETE FROM ${s}.jobs_archive`,
          `SELECT id FROM ${s}.jobs FOR UPDATE SKIP LOCKED`,
          `INSERT INTO ${s}.queues (name, paused) VALUES ('q', true)`,
          `DELETE FROM ${s}.schedules`,
          `SELECT ${s}.enqueue('reader')`,
          `SELECT ${s}.requeue(all_jobs => true)`,
          `TRUNCATE ${s}.jobs`,
          `CREATE TABLE ${s}.reader_x (id int)`,
        ]) {
          expect(await codeOf(text), text).toBe('42501');
        }
      } finally {
        await client.end();
      }
    },
  );
});
