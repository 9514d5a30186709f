/** The sweeper: reclaims expired leases (queued again, or dead when out of attempts), one process at a time. */
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from './support/fixture.js';
import { sweepNow } from './support/leases.js';

const t = useTestDatabase();

describe('sweeper', () => {
  it('sends a dead lease out of attempts to the dead letter', async () => {
    const [inserted] = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, queue, status, attempts, max_attempts, locked_at)
       VALUES ('poison', 'sweep', 'running', 3, 3, now() - interval '10 minutes') RETURNING id`,
    );
    expect(await sweepNow(t.skiplock)).toEqual({ locked: true, requeued: 0, dead: 1, expired: 0 });
    expect(await t.row(inserted!.id)).toEqual({
      status: 'dead',
      attempts: 3,
      locked_by: null,
      last_error: 'reclaimed: visibility timeout',
    });
  });

  it('leaves fresh leases alone and honours each job’s visibility timeout', async () => {
    const [fresh] = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, status, attempts, locked_at, visibility_timeout_ms)
       VALUES ('fresh', 'running', 1, now() - interval '2 seconds', 60000) RETURNING id`,
    );
    const [expired] = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, status, attempts, locked_at, visibility_timeout_ms)
       VALUES ('expired', 'running', 1, now() - interval '2 seconds', 1000) RETURNING id`,
    );
    expect(await sweepNow(t.skiplock)).toEqual({ locked: true, requeued: 1, dead: 0, expired: 0 });
    expect(await t.row(fresh!.id)).toMatchObject({ status: 'running', attempts: 1 });
    expect(await t.row(expired!.id)).toMatchObject({ status: 'queued', attempts: 1 });
  });

  it('runs one sweep at a time: skips while another process holds the lock', async () => {
    const client = await t.db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [
        `skiplock:sweep:${t.skiplock.schema}`,
      ]);
      expect(await t.skiplock.sweep()).toEqual({ locked: false, requeued: 0, dead: 0, expired: 0 });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(await sweepNow(t.skiplock)).toEqual({ locked: true, requeued: 0, dead: 0, expired: 0 });
  });
});
