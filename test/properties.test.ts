import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JobQueries } from '../src/db/queries/jobs.js';
import { BACKOFF_CAP_MS, backoffDelayMs, ValidationError } from '../src/index.js';
import { BACKOFF_MAX_EXPONENT } from '../src/job/backoff.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

describe('backoff rule', () => {
  it('is finite, ≥ 500 ms, at most the one-hour cap, and within [0.5, 1] of min(2^attempts s, 1 h)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (attempts, r) => {
          const delay = backoffDelayMs(attempts, r);
          const base = Math.min(1000 * 2 ** Math.min(attempts, BACKOFF_MAX_EXPONENT), BACKOFF_CAP_MS);
          expect(Number.isFinite(delay)).toBe(true);
          expect(delay).toBeGreaterThanOrEqual(500);
          // The factor is below 1, but 0.5 + r × 0.5 may round up to 1 in floating point.
          expect(delay).toBeLessThanOrEqual(BACKOFF_CAP_MS);
          expect(delay).toBeGreaterThanOrEqual(base * 0.5);
          expect(delay).toBeLessThanOrEqual(base);
        },
      ),
    );
  });

  it('the SQL computes the same rule on the database clock, for any attempts count', async () => {
    const worker = 'property-worker';
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1, max: 100_000 }), async (attempts) => {
        const [job] = await t.query<{ id: string }>(
          `INSERT INTO ${t.jobs} (kind, status, attempts, max_attempts, locked_at, locked_by)
           VALUES ('backoff', 'running', $1, 2147483647, now(), $2) RETURNING id`,
          [attempts, worker],
        );
        const client = await t.db.pool.connect();
        try {
          // now() is fixed per transaction: run on that transaction, the delay is exact.
          await client.query('BEGIN');
          const [outcome] = (
            await new JobQueries(t.schema).finish.finish(
              client,
              [{ id: job!.id, attempts, leaseSeq: '0', outcome: 'failed', error: 'x', permanent: false }],
              worker,
              'delete',
            )
          ).values();
          const [row] = (
            await client.query<{ delay_ms: number }>(
              `SELECT (EXTRACT(EPOCH FROM run_at - now()) * 1000)::float8 AS delay_ms FROM ${t.jobs} WHERE id = $1`,
              [job!.id],
            )
          ).rows;
          await client.query('COMMIT');
          const base = Math.min(1000 * 2 ** Math.min(attempts, BACKOFF_MAX_EXPONENT), BACKOFF_CAP_MS);
          expect(outcome?.outcome).toBe('retry');
          // The same now() in the statement and in this read: within [0.5, 1] of the base, to the millisecond.
          expect(outcome!.retryDelayMs).toBeCloseTo(row!.delay_ms, 6);
          expect(row!.delay_ms).toBeGreaterThanOrEqual(base * 0.5);
          expect(row!.delay_ms).toBeLessThanOrEqual(base);
        } finally {
          client.release();
          await t.query(`DELETE FROM ${t.jobs} WHERE id = $1`, [job!.id]);
        }
      }),
      { numRuns: 60 },
    );
  });
});

/** What JSON.parse(JSON.stringify(v)) gives: the value as jsonb should read it back. */
function jsonNormal(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value));
}

describe('payload round-trip', () => {
  it('any JSON value enqueued reads back equal (handlers see what producers sent)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 4 }), async (payload) => {
        const storable =
          !JSON.stringify(payload).includes('\\u0000') && JSON.stringify(payload).isWellFormed();
        if (!storable) {
          await expect(t.skiplock.enqueue('roundtrip', payload)).rejects.toBeInstanceOf(ValidationError);
          return;
        }
        const job = await t.skiplock.enqueue('roundtrip', payload);
        const read = await t.skiplock.getJob(job.id);
        expect(read?.payload).toEqual(jsonNormal(payload));
        expect(job.payload).toEqual(jsonNormal(payload));
      }),
      { numRuns: 200 },
    );
  });

  it('strings of any unicode round-trip byte for byte in payload, kind and queue', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }), async (text) => {
        if (text.includes('\u0000')) return;
        const job = await t.skiplock.enqueue(text, { text }, { queue: text });
        const read = await t.skiplock.getJob(job.id);
        expect(Buffer.from(read!.kind)).toEqual(Buffer.from(text));
        expect(Buffer.from(read!.queue)).toEqual(Buffer.from(text));
        expect(Buffer.from((read!.payload as { text: string }).text)).toEqual(Buffer.from(text));
      }),
      { numRuns: 100 },
    );
  });
});

describe('option validation', () => {
  const option = fc.constantFrom('priority', 'delayMs', 'maxAttempts', 'runAt', 'queue');
  it('any value either works or throws a ValidationError naming the option, and inserts nothing when it throws', async () => {
    await fc.assert(
      fc.asyncProperty(
        option,
        fc.anything({ withBigInt: true, withDate: true, withNullPrototype: true }),
        async (name, value) => {
          const before = await t.jobCount();
          const result = await t.skiplock.enqueue('opt', {}, { [name]: value } as never).then(
            (job) => ({ job }),
            (error: unknown) => ({ error }),
          );
          if ('error' in result) {
            expect(result.error).toBeInstanceOf(ValidationError);
            expect((result.error as ValidationError).field.endsWith(name)).toBe(true);
            expect(await t.jobCount()).toBe(before);
          } else {
            expect(await t.jobCount()).toBe(before + 1);
            const read = await t.skiplock.getJob(result.job.id);
            // An option given as undefined takes its default.
            const defaults: Record<string, unknown> = { priority: 0, maxAttempts: 20, queue: 'default' };
            if (value === undefined) value = defaults[name];
            // An int column has no -0: it reads back as 0.
            if (name === 'priority') expect(read?.priority).toBe(value === 0 ? 0 : value);
            if (name === 'maxAttempts') expect(read?.maxAttempts).toBe(value);
            if (name === 'queue') expect(read?.queue).toBe(value);
            if (name === 'runAt' && value !== undefined)
              expect(read?.runAt.getTime()).toBe((value as Date).getTime());
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('claimed timestamps', () => {
  // The claim statements send run_at and created_at as milliseconds; computed
  // from float8 seconds, some whole-millisecond instants would land 1 ms early.
  // Instants from 1970 to now (a claim takes due jobs only), whole milliseconds or not.
  const instantUs = () => {
    const nowMs = Date.now();
    return fc.oneof(
      fc.integer({ min: 0, max: nowMs }).map((ms) => BigInt(ms) * 1000n),
      fc.bigInt({ min: 0n, max: BigInt(nowMs) * 1000n }),
    );
  };
  const asMs = (us: bigint) => Number(us / 1000n);

  it('reach the handler to the millisecond (truncated), from the plain and the limited claim', async () => {
    const queries = new JobQueries(t.schema);
    await t.skiplock.setQueueLimits('limited', { concurrency: 1_000 });
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(instantUs(), instantUs()), { minLength: 1, maxLength: 8 }),
        async (times) => {
          await t.query(`DELETE FROM ${t.jobs}`);
          for (const [i, [runAtUs, createdAtUs]] of times.entries()) {
            await t.query(
              `INSERT INTO ${t.jobs} (kind, queue, run_at, created_at)
             VALUES ('timed', $1, to_timestamp(0) + $2::bigint * interval '1 microsecond',
                     to_timestamp(0) + $3::bigint * interval '1 microsecond')`,
              [i % 2 === 0 ? 'plain' : 'limited', runAtUs.toString(), createdAtUs.toString()],
            );
          }
          const request = { kinds: ['timed'], limit: 100, workerId: 'w', visibilityTimeoutMs: 60_000 };
          const plain = await queries.claim.claim(t.db.pool, { ...request, queues: ['plain'] });
          const limited = await queries.limitedClaim.claim(t.db.pool, { ...request, queues: ['limited'] });
          const claimed = [...plain, ...limited.jobs];
          expect(claimed).toHaveLength(times.length);
          const expected = times.map(([runAtUs, createdAtUs]) => [asMs(runAtUs), asMs(createdAtUs)]);
          const got = claimed.map((job) => [job.runAt.getTime(), job.createdAt.getTime()]);
          const byValue = (a: number[], b: number[]) => a[0]! - b[0]! || a[1]! - b[1]!;
          expect(got.sort(byValue)).toEqual(expected.sort(byValue));
        },
      ),
      {
        numRuns: 60,
        // Whole milliseconds whose float8 seconds, times 1,000, fall just below them.
        examples: [[[[1_090_424_581_087_000n, 539_892_391_392_000n]]]],
      },
    );
  });
});
