/**
 * Payloads are bounded where they come in (maxPayloadBytes) and list views
 * read only a preview of each; queue operations check names as enqueue does.
 */
import { describe, expect, it } from 'vitest';
import { Skiplock, ValidationError } from '../src/index.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

async function refused(call: () => Promise<unknown>): Promise<ValidationError> {
  const error = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ValidationError);
  return error as ValidationError;
}

describe('maxPayloadBytes', () => {
  it('refuses a payload above the 1 MiB default with a ValidationError naming payload; nothing is inserted', async () => {
    const big = { blob: 'x'.repeat(1_048_576) };
    const error = await refused(() => t.skiplock.enqueue('k', big));
    expect(error.field).toBe('payload');
    expect(error.reason).toBe('is 1048587 bytes of JSON, more than maxPayloadBytes (1048576)');
    const many = await refused(() =>
      t.skiplock.enqueueMany([
        { kind: 'k', payload: {} },
        { kind: 'k', payload: big },
      ]),
    );
    expect(many.field).toBe('jobs[1].payload');
    expect(await t.jobCount()).toBe(0);
    // Just below the limit is accepted.
    const fits = { blob: 'x'.repeat(1_048_576 - 11) };
    expect(JSON.stringify(fits)).toHaveLength(1_048_576);
    await t.skiplock.enqueue('k', fits);
    expect(await t.jobCount()).toBe(1);
  });

  it('counts bytes of UTF-8, and is set per Skiplock', async () => {
    const small = new Skiplock({ pool: t.db.pool, schema: t.schema, maxPayloadBytes: 20 });
    try {
      await small.enqueue('k', { s: 'éééééé' }); // {"s":"éééééé"}: 8 + 6 × 2 = 20 bytes
      const error = await refused(() => small.enqueue('k', { s: 'ééééééé' }));
      expect(error.reason).toBe('is 22 bytes of JSON, more than maxPayloadBytes (20)');
      const bad = (() => {
        try {
          return new Skiplock({ pool: t.db.pool, maxPayloadBytes: 0 });
        } catch (e) {
          return e;
        }
      })();
      expect((bad as ValidationError).field).toBe('maxPayloadBytes');
    } finally {
      await small.close();
    }
    expect(await t.jobCount()).toBe(1);
  });
});

describe('maxPayloadBytes of a schedule', () => {
  it('refuses a schedule whose payload every slot would enqueue above the bound, naming payload; nothing is stored', async () => {
    const small = new Skiplock({ pool: t.db.pool, schema: t.schema, maxPayloadBytes: 64 });
    try {
      const error = await refused(() => small.schedule('big', '* * * * *', 'k', { s: 'x'.repeat(100) }));
      expect(error.field).toBe('payload');
      expect(error.reason).toBe('is 108 bytes of JSON, more than maxPayloadBytes (64)');
      expect(await small.schedules()).toEqual([]);
      await small.schedule('fits', '* * * * *', 'k', { s: 'x' });
      expect((await small.schedules()).map((s) => s.name)).toEqual(['fits']);
    } finally {
      await small.close();
    }
  });
});

describe('listJobs with payloadPreviewChars', () => {
  it('reads each payload only as its first characters, and says which were cut', async () => {
    const roomy = new Skiplock({ pool: t.db.pool, schema: t.schema, maxPayloadBytes: 2 ** 28 });
    try {
      const large = await roomy.enqueue('k', { blob: 'y'.repeat(5_000_000) }, { queue: 'preview' });
      const small = await roomy.enqueue('k', { a: 1 }, { queue: 'preview' });
      const page = await t.skiplock.listJobs({ queue: 'preview', payloadPreviewChars: 20 });
      expect(page.map((j) => [j.id, j.payloadPreview, j.payloadTruncated])).toEqual([
        [small.id, '{"a": 1}', false],
        [large.id, '{"blob": "yyyyyyyyyy', true],
      ]);
      expect(page[0]).not.toHaveProperty('payload');
      expect(page[0]).toMatchObject({ kind: 'k', status: 'queued', attempts: 0, queue: 'preview' });
      // Without the option, whole payloads as before.
      const whole = await t.skiplock.listJobs({ ids: [small.id] });
      expect(whole[0]!.payload).toEqual({ a: 1 });
    } finally {
      await roomy.close();
    }
  });

  it('refuses a preview length out of range, naming it', async () => {
    const error = await refused(() => t.skiplock.listJobs({ payloadPreviewChars: 0 }));
    expect(error.field).toBe('filter.payloadPreviewChars');
  });
});

describe('queue names in pause, resume and limits', () => {
  it('are refused above 1024 bytes as enqueue refuses them, naming name; nothing changes', async () => {
    const long = 'q'.repeat(1025);
    const enqueueError = await refused(() => t.skiplock.enqueue('k', {}, { queue: long }));
    expect(enqueueError.field).toBe('options.queue');
    for (const call of [
      () => t.skiplock.pauseQueue(long),
      () => t.skiplock.resumeQueue(long),
      () => t.skiplock.setQueueLimits(long, { concurrency: 1 }),
    ]) {
      const error = await refused(call);
      expect(error.field).toBe('name');
      expect(error.reason).toBe('must be at most 1024 bytes of UTF-8');
    }
    expect(await t.skiplock.queues()).toEqual([]);
    // 1024 bytes is a name like any other.
    expect(await t.skiplock.pauseQueue('q'.repeat(1024))).toBe(true);
  });
});
