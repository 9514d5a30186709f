/**
 * The limited and grouped claims as one statement: what a claim that waited
 * for the queue's lock sees of the claims and failures committed meanwhile,
 * and how many statements a claim sends.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { ClaimRequest } from '../src/db/queries/claim.js';
import { JobQueries } from '../src/db/queries/jobs.js';
import { tableIn, waitFor } from './support/database.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

const request = (queue: string): ClaimRequest => ({
  queues: [queue],
  kinds: ['step'],
  limit: 10,
  workerId: 'claimer',
  visibilityTimeoutMs: 60_000,
});

/** The limited claim of `queries` on `queue`, on the test's pool. */
const limitedClaim = (queries: JobQueries, queue: string) =>
  queries.limitedClaim.claim(t.db.pool, request(queue));

/**
 * Runs `change` in a transaction that holds `queue`'s lock, as a claim in
 * flight would; starts the limited claim of `queries` on `queue` meanwhile,
 * commits once it waits for the lock, and returns what the claim took.
 */
async function claimBehind(
  queries: JobQueries,
  queue: string,
  change: (client: pg.PoolClient) => Promise<unknown>,
) {
  const holder = await t.db.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query(`SELECT FROM ${tableIn(t.schema, 'queues')} WHERE name = $1 FOR UPDATE`, [queue]);
    await change(holder);
    const claimed = limitedClaim(queries, queue);
    await waitFor(
      async () =>
        (
          await t.query(
            `SELECT FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR UPDATE%'`,
          )
        ).length === 1,
      5000,
      'the claim to wait for the lock',
    );
    await holder.query('COMMIT');
    return await claimed;
  } finally {
    holder.release();
  }
}

describe('the limited claim in one statement', () => {
  it('counts the running jobs of a key started while it waited for the lock', async () => {
    await t.skiplock.setQueueLimits('g', { groupConcurrency: 1 });
    const queries = new JobQueries(t.schema);
    // A first claim finds the queue's group limits: the next sends the grouped statement alone.
    expect((await limitedClaim(queries, 'g')).jobs).toEqual([]);
    const [a1, , b1] = await t.skiplock.enqueueMany([
      { kind: 'step', payload: {}, queue: 'g', groupKey: 'a' },
      { kind: 'step', payload: {}, queue: 'g', groupKey: 'a' },
      { kind: 'step', payload: {}, queue: 'g', groupKey: 'b' },
    ]);
    const claimed = await claimBehind(queries, 'g', (holder) =>
      holder.query(`UPDATE ${t.jobs} SET status = 'running', locked_at = now(), attempts = 1 WHERE id = $1`, [
        a1!.id,
      ]),
    );
    expect(claimed.jobs.map((j) => j.id)).toEqual([b1!.id]);
    expect(claimed.groupHeld).toBe(true);
  });

  it('strictOrder: a key whose first job went back to wait for a retry while the claim waited starts nothing', async () => {
    await t.skiplock.setQueueLimits('s', { strictOrder: true });
    const queries = new JobQueries(t.schema);
    expect((await limitedClaim(queries, 's')).jobs).toEqual([]);
    const [first] = await t.skiplock.enqueueMany([
      { kind: 'step', payload: {}, queue: 's', groupKey: 'a' },
      { kind: 'step', payload: {}, queue: 's', groupKey: 'a' },
    ]);
    // The claim's snapshot sees both jobs queued and due; by the time it holds the lock, the first one was
    // claimed, failed and waits an hour to retry.
    const claimed = await claimBehind(queries, 's', (holder) =>
      holder.query(
        `UPDATE ${t.jobs} SET attempts = 1, lease_seq = 1, run_at = now() + interval '1 hour' WHERE id = $1`,
        [first!.id],
      ),
    );
    expect(claimed.jobs).toEqual([]);
    expect(await t.jobCount("status = 'queued'")).toBe(2);
  });

  it('sends one statement per claim once it knows whether the queue has group limits', async () => {
    await t.skiplock.setQueueLimits('c', { concurrency: 5 });
    await t.skiplock.setQueueLimits('g', { groupConcurrency: 1 });
    await t.skiplock.enqueueMany(
      Array.from({ length: 4 }, (_, i) => ({
        kind: 'step',
        payload: {},
        queue: i % 2 === 0 ? 'c' : 'g',
        groupKey: `k${i}`,
      })),
    );
    const sent: string[] = [];
    class CountingClient extends pg.Client {
      override query(config: unknown, ...rest: unknown[]): never {
        const c = config as { name?: string } | string;
        sent.push(typeof c === 'string' ? c : (c.name ?? 'unnamed'));
        return (super.query as (...args: unknown[]) => never)(config, ...rest);
      }
    }
    const pool = new pg.Pool({ connectionString: t.url, max: 1, Client: CountingClient });
    pool.on('error', () => {});
    t.defer(() => pool.end());
    const queries = new JobQueries(t.schema);
    const claim = async (queue: string) => {
      sent.length = 0;
      const { jobs } = await queries.limitedClaim.claim(pool, { ...request(queue), limit: 1 });
      return {
        jobs: jobs.length,
        sent: sent.map((name) => name.slice(name.indexOf('claim')).replace(/_[0-9a-f]{8}$/, '')),
      };
    };
    expect(await claim('c')).toEqual({ jobs: 1, sent: ['claim_limited'] });
    expect(await claim('c')).toEqual({ jobs: 1, sent: ['claim_limited'] });
    // A grouped queue: the plain statement finds group limits and claims nothing; the grouped one follows.
    expect(await claim('g')).toEqual({ jobs: 1, sent: ['claim_limited', 'claim_grouped'] });
    expect(await claim('g')).toEqual({ jobs: 1, sent: ['claim_grouped'] });
    // Its group limits removed, the grouped statement still claims right, and the next claim is plain.
    await t.skiplock.setQueueLimits('g', { groupConcurrency: null, concurrency: 10 });
    await t.skiplock.enqueue('step', {}, { queue: 'g' });
    expect(await claim('g')).toEqual({ jobs: 1, sent: ['claim_grouped'] });
    await t.skiplock.enqueue('step', {}, { queue: 'g' });
    expect(await claim('g')).toEqual({ jobs: 1, sent: ['claim_limited'] });
  });

  it('a job claimed from a grouped queue keeps its own success policy', async () => {
    await t.skiplock.setQueueLimits('g', { groupConcurrency: 1 });
    await t.skiplock.enqueue('step', {}, { queue: 'g', groupKey: 'a', onSuccess: 'keep' });
    const queries = new JobQueries(t.schema);
    const claimed = await limitedClaim(queries, 'g');
    expect(claimed.jobs.map((j) => j.onSuccess)).toEqual(['keep']);
  });

  it('says a queue may be prefetched only when its one limit is a group concurrency', async () => {
    const queries = new JobQueries(t.schema);
    const prefetchable = async (queue: string, limits: Parameters<typeof t.skiplock.setQueueLimits>[1]) => {
      await t.skiplock.setQueueLimits(queue, limits);
      return (await limitedClaim(queries, queue)).prefetchable;
    };
    expect(await prefetchable('a', { groupConcurrency: 2 })).toBe(true);
    expect(await prefetchable('b', { groupConcurrency: 1, strictOrder: true })).toBe(false);
    expect(await prefetchable('c', { groupConcurrency: 1, concurrency: 5 })).toBe(false);
    expect(await prefetchable('d', { groupConcurrency: 1, rate: { count: 5, periodMs: 1000 } })).toBe(false);
    expect(await prefetchable('e', { groupConcurrency: 1, groupRate: { count: 5, periodMs: 1000 } })).toBe(
      false,
    );
    expect(await prefetchable('f', { concurrency: 5 })).toBe(false);
  });
});
