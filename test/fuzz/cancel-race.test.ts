/**
 * Random orderings of cancel against a job's life cycle (claim, complete,
 * fail, snooze, release, heartbeat, the worker's cancel of a flagged result,
 * lease expiry and sweep, requeue), driven straight through the statements by
 * two simulated workers. After every step:
 *
 * - a cancel counts the job exactly when it was queued or running, and changes
 *   nothing of a finished one;
 * - once a cancel counted the job, until a requeue, it is `cancelled` or still
 *   `running` with its cancel requested: never deleted, succeeded, failed,
 *   dead or queued again;
 * - a `cancelled` job is finished and holds no lease, and no result statement
 *   changes its attempts.
 */
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import type { LeasedJob } from '../../src/db/queries/job-row.js';
import { JobQueries } from '../../src/db/queries/jobs.js';
import { TEST_SCHEMA } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';

const { db } = useFileDatabase();
let queries: JobQueries;

beforeAll(async () => {
  queries = new JobQueries(TEST_SCHEMA);
});

const RUNS = Number(process.env.SKIPLOCK_FUZZ_RUNS ?? 200);
const WORKERS = ['w1', 'w2'] as const;

type Op =
  | { op: 'claim'; worker: 0 | 1 }
  | {
      op: 'complete' | 'keep' | 'fail' | 'permanent' | 'snooze' | 'release' | 'heartbeat' | 'finish';
      lease: number;
    }
  | { op: 'cancel' | 'expire' | 'requeue' };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ op: fc.constant('claim' as const), worker: fc.constantFrom(0 as const, 1 as const) }),
  fc.record({
    op: fc.constantFrom(
      'complete' as const,
      'keep' as const,
      'fail' as const,
      'permanent' as const,
      'snooze' as const,
      'release' as const,
      'heartbeat' as const,
      'finish' as const,
    ),
    lease: fc.nat(3),
  }),
  fc.record({ op: fc.constantFrom('cancel' as const, 'expire' as const, 'requeue' as const) }),
);

interface Row {
  status: string;
  attempts: number;
  locked_by: string | null;
  finished: boolean;
  flagged: boolean;
}

async function read(id: string): Promise<Row | undefined> {
  const [row] = await db.query<Row>(
    `SELECT status, attempts, locked_by, finished_at IS NOT NULL AS finished,
            cancel_requested_at IS NOT NULL AS flagged
     FROM ${db.jobs} WHERE id = $1`,
    [id],
  );
  return row;
}

let run = 0;

async function check(ops: Op[]): Promise<void> {
  const queue = `race-${run++}`;
  const [inserted] = await db.query<{ id: string }>(
    `INSERT INTO ${db.jobs} (kind, queue, max_attempts) VALUES ('k', $1, 3) RETURNING id`,
    [queue],
  );
  const id = inserted!.id;
  const leases: { worker: string; lease: LeasedJob }[] = [];
  let cancelledForGood = false;
  const trace: string[] = [];
  for (const step of ops) {
    const before = await read(id);
    trace.push(`${JSON.stringify(step)} on ${JSON.stringify(before)}`);
    const held = 'lease' in step ? leases[step.lease % Math.max(1, leases.length)] : undefined;
    switch (step.op) {
      case 'claim': {
        const worker = WORKERS[step.worker];
        const [job] = await queries.claim.claim(db.pool, {
          queues: [queue],
          kinds: ['k'],
          limit: 1,
          workerId: worker,
          visibilityTimeoutMs: 60_000,
        });
        if (job) leases.push({ worker, lease: { id, attempts: job.attempts, leaseSeq: job.leaseSeq } });
        break;
      }
      case 'cancel': {
        const counts = await queries.cancel.cancel(db.pool, { ids: [id] });
        const expected =
          before?.status === 'queued'
            ? { cancelled: 1, running: 0 }
            : before?.status === 'running'
              ? { cancelled: 0, running: 1 }
              : { cancelled: 0, running: 0 };
        expect(counts, trace.join('\n')).toEqual(expected);
        if (counts.cancelled + counts.running > 0) cancelledForGood = true;
        if (counts.cancelled + counts.running === 0) expect(await read(id)).toEqual(before);
        break;
      }
      case 'expire':
        await db.query(
          `UPDATE ${db.jobs} SET locked_at = now() - interval '1 hour' WHERE id = $1 AND locked_at IS NOT NULL`,
          [id],
        );
        await queries.sweep.sweep(db.pool, 60_000, 10);
        break;
      case 'requeue':
        if (
          (await queries.requeue.requeue(db.pool, { ids: [id], status: ['dead', 'failed', 'cancelled'] })) > 0
        )
          cancelledForGood = false;
        break;
      default: {
        if (!held) break;
        const { worker, lease } = held;
        if (step.op === 'complete' || step.op === 'keep')
          await queries.finish.finish(
            db.pool,
            [{ ...lease, outcome: 'succeeded' }],
            worker,
            step.op === 'keep' ? 'keep' : 'delete',
          );
        else if (step.op === 'fail' || step.op === 'permanent')
          await queries.finish.finish(
            db.pool,
            [{ ...lease, outcome: 'failed', error: 'boom', permanent: step.op === 'permanent' }],
            worker,
            'delete',
          );
        else if (step.op === 'snooze')
          await queries.finish.finish(
            db.pool,
            [{ ...lease, outcome: 'snoozed', delayMs: 0 }],
            worker,
            'delete',
          );
        else if (step.op === 'release') await queries.results.release(db.pool, [lease], worker);
        else if (step.op === 'heartbeat') await queries.results.beat(db.pool, [lease], worker);
        else {
          const ended = await queries.finish.finish(
            db.pool,
            [{ ...lease, outcome: 'cancelled' }],
            worker,
            'delete',
          );
          if (ended.size > 0) {
            const after = await read(id);
            expect(after?.attempts, trace.join('\n')).toBe(lease.attempts);
          }
        }
      }
    }
    const after = await read(id);
    if (cancelledForGood) {
      expect(after, trace.join('\n')).toBeDefined();
      const stillRunning = after!.status === 'running' && after!.flagged;
      expect(
        after!.status === 'cancelled' || stillRunning,
        `${trace.join('\n')}\n→ ${JSON.stringify(after)}`,
      ).toBe(true);
    }
    if (after?.status === 'cancelled') {
      expect(
        after.finished && after.locked_by === null,
        `${trace.join('\n')}\n→ ${JSON.stringify(after)}`,
      ).toBe(true);
    }
  }
}

describe('fuzz: cancel against the life cycle', () => {
  it('random orderings of cancel, results, release, sweep and requeue keep cancel final', async () => {
    await fc.assert(fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 25 }), check), {
      numRuns: RUNS,
    });
  });
});
