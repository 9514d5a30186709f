/**
 * What a newcomer meets first: a worker with no handlers, a payload that is
 * not plain JSON, a misspelled database URL. Each is a typed error naming the
 * field, with a hint that fits.
 */
import { describe, expect, it } from 'vitest';
import { Skiplock, ValidationError } from '../src/index.js';
import { useTestDatabase } from './support/fixture.js';

const t = useTestDatabase();

/** What `fn` threw (undefined when it returned). */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  return undefined;
}

describe('a worker with no handlers', () => {
  it('is refused with a ValidationError naming handlers, before anything starts', () => {
    const error = thrown(() => t.skiplock.worker({ handlers: {} }));
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('worker.handlers');
    expect((error as ValidationError).message).toContain('maintenanceOnly: true');
  });

  it('starts when maintenanceOnly says it runs no jobs, and still enqueues schedules', async () => {
    await t.skiplock.schedule('first-use-tick', '* * * * * *', 'tick', {}, { overlap: 'allow' });
    const worker = t.worker({ handlers: {}, maintenanceOnly: true, queues: ['first-use'] });
    expect(worker.options.maintenanceOnly).toBe(true);
    await worker.start();
    await expect
      .poll(
        async () => (await t.query(`SELECT count(*)::int AS n FROM ${t.jobs} WHERE kind = 'tick'`))[0]!.n,
        {
          timeout: 15_000,
          interval: 100,
        },
      )
      .toBeGreaterThan(0);
  });

  it('refuses handlers given to a maintenance-only worker, naming maintenanceOnly', () => {
    const error = thrown(() => t.skiplock.worker({ handlers: { k: () => {} }, maintenanceOnly: true }));
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('worker.maintenanceOnly');
  });
});

describe('a payload that is not plain JSON', () => {
  it.each([
    ['a Map', new Map([['a', 1]]), 'Object.fromEntries(map)'],
    ['a Set', new Set([1]), '[...set]'],
    ['a Date', new Date(0), 'date.toISOString()'],
    ['a class instance', new (class Order {})(), 'plain object'],
  ])('%s gets a hint that fits it', async (_, value, hint) => {
    const error = await t.skiplock.enqueue('k', { v: value }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('payload.v');
    expect((error as ValidationError).reason).toContain(hint);
    if (!(value instanceof Date)) expect((error as ValidationError).reason).not.toContain('toISOString');
    expect(await t.jobCount()).toBe(0);
  });
});

describe('a connection string', () => {
  it.each(['postgress://app@localhost/app', 'http://localhost/app', 'localhost:5432/app', 'not a url'])(
    '%s is refused as the command line refuses it, naming connectionString',
    (url) => {
      const error = thrown(() => new Skiplock({ connectionString: url }));
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe('connectionString');
      expect((error as ValidationError).reason).toMatch(/^not a postgres:\/\/ URL/);
    },
  );

  it.each(['http://localhost/app', '', 42])('%j as listenConnectionString is refused, naming it', (url) => {
    const error = thrown(
      () =>
        new Skiplock({
          connectionString: 'postgres://app@localhost/app',
          listenConnectionString: url as string,
        }),
    );
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('listenConnectionString');
  });

  it('from DATABASE_URL is checked the same way, naming DATABASE_URL', () => {
    const saved = process.env.DATABASE_URL;
    process.env.DATABASE_URL = 'postgress://app:secret@localhost/app';
    try {
      const error = thrown(() => new Skiplock());
      expect((error as ValidationError).field).toBe('DATABASE_URL');
      expect((error as ValidationError).message).not.toContain('secret');
    } finally {
      if (saved === undefined) delete process.env.DATABASE_URL;
      else process.env.DATABASE_URL = saved;
    }
  });

  it('accepts postgres://, postgresql:// and the Unix-socket forms', async () => {
    for (const url of [
      'postgres://app@localhost/app',
      'postgresql://app@localhost/app',
      'socket:/var/run/postgresql?db=app',
      '/var/run/postgresql app',
    ]) {
      await new Skiplock({ connectionString: url }).close();
    }
  });

  it('for the LISTEN connection is checked the same way', () => {
    const error = thrown(() =>
      t.skiplock.worker({ handlers: { k: () => {} }, listenConnectionString: 'postgress://x@y/z' }),
    );
    expect((error as ValidationError).field).toBe('worker.listenConnectionString');
  });
});
