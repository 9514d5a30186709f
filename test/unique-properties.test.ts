import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { JobStatus } from '../src/index.js';
import { useFileDatabase } from './support/file-database.js';

const { db, skiplock } = useFileDatabase();

/** A job as the model sees it. */
interface ModelJob {
  id: string;
  key: string;
  states: readonly JobStatus[];
  status: JobStatus;
  payload: number;
  holds: boolean;
  deleted: boolean;
}

type Enqueue = { key: string; states: JobStatus[]; replace: boolean; payload: number };
type Command =
  | { op: 'enqueue'; job: Enqueue }
  | { op: 'batch'; jobs: Enqueue[] }
  | { op: 'move'; pick: number; to: JobStatus }
  | { op: 'delete'; pick: number };

/** Moves the engine and operators make (claim, retry, finish, requeue). */
const MOVES: Record<JobStatus, JobStatus[]> = {
  waiting: [],
  queued: ['running', 'cancelled'],
  running: ['queued', 'succeeded', 'failed', 'dead', 'cancelled'],
  succeeded: [],
  failed: ['queued'],
  dead: ['queued'],
  cancelled: ['queued'],
};

const enqueueArb: fc.Arbitrary<Enqueue> = fc.record({
  key: fc.constantFrom('a', 'b', 'c'),
  states: fc.constantFrom<JobStatus[]>(
    ['queued', 'running'],
    ['queued'],
    ['queued', 'running', 'succeeded'],
    ['queued', 'running', 'succeeded', 'failed', 'dead'],
  ),
  replace: fc.boolean(),
  payload: fc.integer({ min: 0, max: 1000 }),
});

const commandArb: fc.Arbitrary<Command> = fc.oneof(
  { weight: 4, arbitrary: enqueueArb.map((job) => ({ op: 'enqueue' as const, job })) },
  {
    weight: 1,
    arbitrary: fc
      .array(enqueueArb, { minLength: 1, maxLength: 4 })
      .map((jobs) => ({ op: 'batch' as const, jobs })),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant('move' as const),
      pick: fc.nat(),
      to: fc.constantFrom<JobStatus>('queued', 'running', 'succeeded', 'failed', 'dead'),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('delete' as const), pick: fc.nat() }) },
);

/** What the model says one enqueue returns, applying it to the model. */
function modelEnqueue(jobs: ModelJob[], e: Enqueue): { job: ModelJob | undefined; duplicate: boolean } {
  const holder = jobs.find((j) => j.key === e.key && j.holds);
  if (holder) {
    if (e.replace && holder.status === 'queued') holder.payload = e.payload;
    return { job: holder, duplicate: true };
  }
  return { job: undefined, duplicate: false };
}

describe('unique keys against a model', () => {
  it('random enqueues (skip/replace, states, batches), moves and deletes keep one holder per key', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(commandArb, { minLength: 1, maxLength: 25 }), async (commands) => {
        await db.query(`TRUNCATE ${db.jobs}`);
        const jobs: ModelJob[] = [];
        for (const command of commands) {
          if (command.op === 'enqueue' || command.op === 'batch') {
            const batch = command.op === 'enqueue' ? [command.job] : command.jobs;
            const options = batch.map((e) => ({
              uniqueKey: e.key,
              uniqueStates: e.states,
              onConflict: e.replace ? ('replace' as const) : ('skip' as const),
            }));
            const got =
              command.op === 'enqueue'
                ? [await skiplock.enqueue('k', batch[0]!.payload, options[0])]
                : await skiplock.enqueueMany(
                    batch.map((e, i) => ({ kind: 'k', payload: e.payload, ...options[i] })),
                  );
            // A batch acts as consecutive enqueue calls: each job of a key after its first
            // finds that first one holding the key (and a 'replace' rewrites it); each
            // returns the job as it stood after its own call.
            const holders = batch.map((e, i) => {
              const expected = modelEnqueue(jobs, e);
              if (expected.job) return { job: expected.job, duplicate: true, payload: expected.job.payload };
              const job: ModelJob = {
                id: got[i]!.id,
                key: e.key,
                states: e.states,
                status: 'queued',
                payload: e.payload,
                holds: true,
                deleted: false,
              };
              jobs.push(job);
              return { job, duplicate: false, payload: e.payload };
            });
            batch.forEach((_, i) => {
              const { job, duplicate, payload } = holders[i]!;
              expect([got[i]!.id, got[i]!.duplicate, got[i]!.payload]).toEqual([job.id, duplicate, payload]);
            });
          } else {
            const alive = jobs.filter((j) => !j.deleted);
            if (alive.length === 0) continue;
            const job = alive[command.pick % alive.length]!;
            if (command.op === 'delete') {
              await db.query(`DELETE FROM ${db.jobs} WHERE id = $1`, [job.id]);
              job.deleted = true;
              job.holds = false;
            } else if (MOVES[job.status].includes(command.to)) {
              await db.query(`UPDATE ${db.jobs} SET status = $2 WHERE id = $1`, [job.id, command.to]);
              job.status = command.to;
              if (!job.states.includes(command.to)) job.holds = false;
            }
          }
        }
        const rows = await db.query<{
          id: string;
          status: string;
          payload: number;
          unique_lock: string | null;
        }>(`SELECT j.id::text AS id, j.status, j.payload, j.unique_lock FROM ${db.jobs} j ORDER BY j.id`);
        expect(rows).toEqual(
          jobs
            .filter((j) => !j.deleted)
            .sort((x, y) => (BigInt(x.id) < BigInt(y.id) ? -1 : 1))
            .map((j) => ({
              id: j.id,
              status: j.status,
              payload: j.payload,
              unique_lock: j.holds ? j.key : null,
            })),
        );
      }),
      { numRuns: 40 },
    );
  });
});
