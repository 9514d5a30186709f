/**
 * Hostile input to every public entry: enqueue (kind, payload, options),
 * enqueueMany, the schema name of `new Skiplock({ schema })`, worker options,
 * getJob / listJobs / requeue filters. Each call either works and round-trips
 * exactly (enqueue then getJob: payload deep-equal, kind and queue byte-equal)
 * or fails with a ValidationError whose `field` names the hostile field, and
 * leaves the database unchanged. Names are data, never SQL.
 */
import fc from 'fast-check';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type JobRecord, Skiplock, ValidationError } from '../../src/index.js';
import { quoteIdent, waitFor } from '../support/database.js';
import { useTestDatabase } from '../support/fixture.js';

const t = useTestDatabase();

const RUNS = Number(process.env.SKIPLOCK_FUZZ_RUNS ?? 200);

// ---- arbitraries -------------------------------------------------------------------------------

/** Strings that look like SQL, identifiers, escapes or tricky unicode: all must be stored as given. */
const sqlish = fc.constantFrom(
  "'; DROP TABLE jobs; --",
  'x"; DROP TABLE y; --',
  "Robert'); DELETE FROM t.skiplock.jobs; --",
  '$1',
  '$$ SELECT 1 $$',
  '\\',
  "\\'",
  '%_%',
  '"',
  "'",
  ' ',
  'default ',
  'DEFAULT',
  "E'\\x00'",
  '\u202egnp.exe',
  '🙂‍↔️',
  'İ',
  '\uFEFF',
  '\r\n\t',
  '/* */',
  '; LISTEN x',
  'skiplock:skiplock',
  'a'.repeat(1024),
  'é'.repeat(512),
);

/** Any string, including NUL, lone surrogates, and very long ones. */
const anyString = fc.oneof(
  sqlish,
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.string({ unit: 'binary-ascii', minLength: 1000, maxLength: 1100 }),
);

/** Whether skiplock must refuse a kind or queue name (SPEC §9: empty, or text PostgreSQL cannot store or index). */
function badName(value: unknown): boolean {
  return (
    typeof value !== 'string' ||
    value.length === 0 ||
    value.includes('\u0000') ||
    !value.isWellFormed() ||
    Buffer.byteLength(value) > 1024
  );
}

const notAString = fc.oneof(
  fc.constantFrom(null, undefined, 0, 1, true, [], {}, ['x'], Symbol('s'), 10n, () => 'x', new Date(0)),
  fc.double(),
);

/** Values a payload must refuse, each at the top or nested. */
function hostilePayloadValue(): fc.Arbitrary<unknown> {
  const circular = () => {
    const o: Record<string, unknown> = { a: 1 };
    o.self = o;
    return o;
  };
  return fc.oneof(
    fc.constantFrom<unknown>(
      10n,
      () => 1,
      Symbol('x'),
      Number.NaN,
      Number.POSITIVE_INFINITY,
      Number.NEGATIVE_INFINITY,
      new Date(0),
      new Map([[1, 2]]),
      new Set([1]),
      /re/,
      new Uint8Array([1]),
      'nul\u0000byte',
      'lone \ud800 surrogate',
      'lone \udfff',
      { 'key\u0000': 1 },
      { '\ud800': 1 },
      { a: undefined },
      [1, undefined],
      // biome-ignore lint/suspicious/noSparseArray: an array hole is the hostile value under test.
      [1, , 3],
      new (class Thing {})(),
    ),
    fc.constant(null).map(circular),
  );
}

/** A JSON payload with one hostile value buried somewhere in it. */
const hostilePayload = fc
  .tuple(fc.array(fc.oneof(fc.string(), fc.nat({ max: 3 })), { maxLength: 4 }), hostilePayloadValue())
  .map(([path, bad]) => {
    let value: unknown = bad;
    for (const step of path.reverse()) {
      value =
        typeof step === 'number' ? [...Array.from({ length: step }, () => 0), value] : { [step]: value };
    }
    return value;
  });

const jsonPayload = fc.oneof(
  fc.jsonValue(),
  fc.jsonValue({ maxDepth: 40 }),
  fc.constantFrom(
    { __proto__: null, a: 1 },
    JSON.parse('{"__proto__": {"polluted": true}}'),
    { constructor: 'x', toString: 1 },
    { '': '' },
    1e308,
    -1e-308,
    5e-324,
    Number.MAX_SAFE_INTEGER + 2,
    -0,
    [[[[[[[[[[[]]]]]]]]]]],
    'x'.repeat(100_000),
    Array.from({ length: 1000 }, (_, i) => i),
  ),
);

/** The runAt range skiplock takes (years 1 to 9999, inside PostgreSQL's timestamptz). */
const MIN_RUN_AT = new Date('0001-01-01T00:00:00.000Z');
const MAX_RUN_AT = new Date('9999-12-31T23:59:59.999Z');
const IN_RANGE_DATE = fc.date({ min: MIN_RUN_AT, max: MAX_RUN_AT, noInvalidDate: true });

/** Option values: valid ones, and hostile ones that must be refused. */
const goodOptions = {
  priority: fc.integer({ min: -2_147_483_648, max: 2_147_483_647 }),
  runAt: fc.date({
    min: new Date('1900-01-01T00:00:00Z'),
    max: new Date('9999-12-31T00:00:00Z'),
    noInvalidDate: true,
  }),
  delayMs: fc.oneof(fc.constant(0), fc.double({ min: 0, max: 315_360_000_000_000, noNaN: true })),
  maxAttempts: fc.integer({ min: 1, max: 2_147_483_647 }),
};
const badOptions = {
  priority: fc.oneof(
    fc.constantFrom<unknown>(
      1.5,
      Number.NaN,
      2 ** 31,
      -(2 ** 31) - 1,
      '1',
      null,
      1n,
      Number.POSITIVE_INFINITY,
    ),
  ),
  runAt: fc.constantFrom<unknown>(new Date(Number.NaN), '2020-01-01', 0, null, {}),
  delayMs: fc.constantFrom<unknown>(-1, -0.5, Number.NaN, Number.POSITIVE_INFINITY, '5', null, 1e300),
  maxAttempts: fc.constantFrom<unknown>(0, -1, 1.5, 2 ** 31, Number.NaN, '3', null),
};
type OptionName = keyof typeof goodOptions;
const optionNames = Object.keys(goodOptions) as OptionName[];

// ---- checks ------------------------------------------------------------------------------------

/** Equality as JSON means it: -0 is 0, key order does not matter, nothing but JSON values. */
function jsonEqual(a: unknown, b: unknown): boolean {
  if (typeof a === 'number' && typeof b === 'number') return a === b;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return a === b;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a) && Array.isArray(b))
    return a.length === b.length && a.every((v, i) => jsonEqual(v, b[i]));
  const ka = Object.keys(a).sort();
  const kb = Object.keys(b).sort();
  return (
    ka.length === kb.length &&
    ka.every((k, i) => k === kb[i]) &&
    ka.every((k) => jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
  );
}

const jobCount = () => t.jobCount();

/** Runs `call`; a throw must be a ValidationError naming one of `fields` (exactly or as a prefix path), and change nothing. */
async function refusedOrDone<T>(
  call: () => Promise<T>,
  fields: string[],
  mustFail: boolean,
): Promise<{ ok: true; value: T } | { ok: false; error: ValidationError }> {
  const before = await jobCount();
  try {
    const value = await call();
    if (mustFail) throw new Error(`expected a ValidationError naming ${fields.join(' or ')}, but it worked`);
    return { ok: true, value };
  } catch (error) {
    if (!(error instanceof ValidationError)) {
      throw new Error(`expected a ValidationError naming ${fields.join(' or ')}, got ${String(error)}`, {
        cause: error,
      });
    }
    const named = fields.some(
      (f) =>
        error.field === f ||
        error.field.startsWith(`${f}.`) ||
        error.field.startsWith(`${f}[`) ||
        error.field.startsWith(`${f} `),
    );
    if (!named)
      throw new Error(
        `ValidationError names '${error.field}', expected ${fields.join(' or ')}: ${error.message}`,
      );
    expect(await jobCount()).toBe(before);
    return { ok: false, error };
  }
}

function expectRoundTrip(
  record: JobRecord | undefined,
  input: {
    kind: string;
    payload: unknown;
    queue?: string;
    priority?: number;
    maxAttempts?: number;
    runAt?: Date;
  },
): void {
  expect(record).toBeDefined();
  const job = record!;
  expect(job.kind).toBe(input.kind);
  expect(Buffer.from(job.kind).equals(Buffer.from(input.kind))).toBe(true);
  expect(job.queue).toBe(input.queue ?? 'default');
  if (!jsonEqual(job.payload, input.payload === undefined ? {} : input.payload)) {
    throw new Error(
      `payload did not round-trip: ${JSON.stringify(input.payload)} → ${JSON.stringify(job.payload)}`,
    );
  }
  expect(job.priority).toBe(input.priority ?? 0);
  expect(job.maxAttempts).toBe(input.maxAttempts ?? 20);
  if (input.runAt) expect(job.runAt.getTime()).toBe(input.runAt.getTime());
  expect(job.status).toBe('queued');
  expect(job.attempts).toBe(0);
}

// ---- properties --------------------------------------------------------------------------------

type Hostility =
  | { part: 'none' }
  | { part: 'kind'; value: unknown }
  | { part: 'queue'; value: unknown }
  | { part: 'payload'; value: unknown }
  | { part: 'option'; name: OptionName; value: unknown }
  | { part: 'unknownOption'; name: string; value: unknown }
  | { part: 'runAtAndDelay' };

const hostility: fc.Arbitrary<Hostility> = fc.oneof(
  fc.constant<Hostility>({ part: 'none' }),
  fc.oneof(anyString, notAString).map((value): Hostility => ({ part: 'kind', value })),
  fc.oneof(anyString, notAString).map((value): Hostility => ({ part: 'queue', value })),
  hostilePayload.map((value): Hostility => ({ part: 'payload', value })),
  fc
    .constantFrom(...optionNames)
    .chain((name) => badOptions[name].map((value): Hostility => ({ part: 'option', name, value }))),
  fc
    .tuple(
      fc
        .string({ minLength: 1 })
        .filter((k) => !['queue', 'client', ...optionNames].includes(k) && k !== '__proto__'),
      fc.anything(),
    )
    .map(([name, value]): Hostility => ({ part: 'unknownOption', name, value })),
  fc.constant<Hostility>({ part: 'runAtAndDelay' }),
);

const validJob = fc.record(
  {
    kind: anyString.filter((s) => !badName(s)),
    payload: fc.oneof(jsonPayload, fc.constant(undefined)),
    queue: anyString.filter((s) => !badName(s)),
    priority: goodOptions.priority,
    runAt: goodOptions.runAt,
    delayMs: goodOptions.delayMs,
    maxAttempts: goodOptions.maxAttempts,
  },
  { requiredKeys: ['kind', 'payload'] },
);

interface Case {
  kind: unknown;
  payload: unknown;
  options: Record<string, unknown>;
  /** Field names the error may carry. */
  fields: string[];
  mustFail: boolean;
}

type ValidJob = typeof validJob extends fc.Arbitrary<infer T> ? T : never;

function buildCase(job: ValidJob, h: Hostility): Case {
  const { kind, payload, ...rest } = job;
  const options: Record<string, unknown> = { ...rest };
  if (options.runAt !== undefined && options.delayMs !== undefined) delete options.delayMs;
  const c: Case = { kind, payload, options, fields: [], mustFail: false };
  switch (h.part) {
    case 'none':
      break;
    case 'kind':
      c.kind = h.value;
      c.fields = ['kind'];
      c.mustFail = badName(h.value);
      break;
    case 'queue':
      c.options.queue = h.value;
      c.fields = ['queue', 'options.queue'];
      // undefined means the default queue; null is refused like any other non-string.
      c.mustFail = h.value === undefined ? false : badName(h.value);
      break;
    case 'payload':
      c.payload = h.value;
      c.fields = ['payload'];
      c.mustFail = true;
      break;
    case 'option':
      c.options[h.name] = h.value;
      if (h.name === 'runAt') delete c.options.delayMs;
      if (h.name === 'delayMs') delete c.options.runAt;
      c.fields = [h.name, `options.${h.name}`];
      c.mustFail = true;
      break;
    case 'unknownOption':
      c.options[h.name] = h.value;
      c.fields = [h.name, `options.${h.name}`];
      c.mustFail = true;
      break;
    case 'runAtAndDelay':
      c.options.runAt = new Date();
      c.options.delayMs = 1;
      c.fields = ['runAt', 'delayMs', 'options.runAt', 'options.delayMs'];
      c.mustFail = true;
      break;
  }
  return c;
}

describe('fuzz: hostile input', () => {
  it('enqueue either round-trips exactly or refuses with a ValidationError naming the field', async () => {
    await fc.assert(
      fc.asyncProperty(validJob, hostility, async (job, h) => {
        const c = buildCase(job, h);
        const result = await refusedOrDone(
          () => t.skiplock.enqueue(c.kind as string, c.payload, c.options as never),
          c.fields.length > 0 ? c.fields : ['(none: this input is valid)'],
          c.mustFail,
        );
        if (!result.ok) return;
        expectRoundTrip(await t.skiplock.getJob(result.value.id), {
          kind: c.kind as string,
          payload: c.payload,
          ...(c.options as { queue?: string; priority?: number; maxAttempts?: number; runAt?: Date }),
        });
      }),
      { numRuns: RUNS },
    );
  });

  it('enqueueMany either round-trips every job in order or refuses naming the item and field', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(validJob, { minLength: 1, maxLength: 6 }),
        hostility,
        fc.nat(),
        async (jobs, h, at) => {
          const index = at % jobs.length;
          const cases = jobs.map((job, i) => buildCase(job, i === index ? h : { part: 'none' }));
          const items = cases.map((c) => ({ kind: c.kind, payload: c.payload, ...c.options }));
          const bad = cases[index]!;
          const fields = bad.fields.map((f) => `jobs[${index}].${f.replace(/^options\./, '')}`);
          const result = await refusedOrDone(
            () => t.skiplock.enqueueMany(items as never),
            fields.length > 0 ? fields : ['(none: this input is valid)'],
            bad.mustFail,
          );
          if (!result.ok) return;
          expect(result.value).toHaveLength(items.length);
          const stored = await t.skiplock.listJobs({
            ids: result.value.map((j) => j.id),
            order: 'oldest',
            limit: 100,
          });
          expect(stored.map((j) => j.id)).toEqual(result.value.map((j) => j.id));
          stored.forEach((record, i) => {
            const c = cases[i]!;
            expectRoundTrip(record, {
              kind: c.kind as string,
              payload: c.payload,
              ...(c.options as { queue?: string; priority?: number; maxAttempts?: number; runAt?: Date }),
            });
          });
        },
      ),
      { numRuns: Math.ceil(RUNS / 2) },
    );
  });

  it('any Date between the years 1 and 9999 is stored exactly as runAt; any other is refused as runAt', async () => {
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.date(), IN_RANGE_DATE), async (runAt) => {
        const ms = runAt.getTime();
        const result = await refusedOrDone(
          () => t.skiplock.enqueue('dated', {}, { runAt }),
          ['runAt', 'options.runAt'],
          Number.isNaN(ms) || ms < MIN_RUN_AT.getTime() || ms > MAX_RUN_AT.getTime(),
        );
        if (result.ok) expect((await t.skiplock.getJob(result.value.id))!.runAt.getTime()).toBe(ms);
      }),
      {
        // numRuns counts the examples too.
        numRuns: 6 + Math.ceil(RUNS / 3),
        examples: [
          [MIN_RUN_AT],
          [MAX_RUN_AT],
          [new Date(MIN_RUN_AT.getTime() - 1)],
          [new Date(MAX_RUN_AT.getTime() + 1)],
          [new Date(-8.64e15)],
          [new Date(Number.NaN)],
        ],
      },
    );
  });

  it('queue and kind names are routed as given: a worker on a hostile queue runs its hostile kind', async () => {
    const name = anyString.filter((s) => !badName(s));
    await fc.assert(
      fc.asyncProperty(name, name, fc.jsonValue(), async (queue, kind, payload) => {
        const seen: { kind: string; queue: string; payload: unknown }[] = [];
        const worker = t.skiplock.worker({
          queues: [queue],
          handleSignals: false,
          pollIntervalMs: 100,
          handlers: {
            [kind]: (job: { kind: string; queue: string; payload: unknown }) => {
              seen.push({ kind: job.kind, queue: job.queue, payload: job.payload });
            },
          },
        });
        await worker.start();
        try {
          const job = await t.skiplock.enqueue(kind, payload, { queue });
          await waitFor(
            async () => (await t.skiplock.getJob(job.id)) === undefined,
            10_000,
            'the job to run',
          );
        } finally {
          await worker.stop();
        }
        expect(seen).toHaveLength(1);
        expect(seen[0]!.kind).toBe(kind);
        expect(seen[0]!.queue).toBe(queue);
        expect(jsonEqual(seen[0]!.payload, payload)).toBe(true);
      }),
      { numRuns: Math.ceil(RUNS / 10) },
    );
  });

  it('worker options are either taken as given or refused naming the option', async () => {
    const good = {
      queues: fc.uniqueArray(
        anyString.filter((s) => !badName(s)),
        { minLength: 1, maxLength: 3 },
      ),
      concurrency: fc.integer({ min: 1, max: 10_000 }),
      pollIntervalMs: fc.integer({ min: 10, max: 2_147_483_647 }),
      sweepIntervalMs: fc.integer({ min: 10, max: 2_147_483_647 }),
      shutdownTimeoutMs: fc.integer({ min: 0, max: 2_147_483_647 }),
      onSuccess: fc.constantFrom('delete', 'keep', 'archive'),
      handleSignals: fc.boolean(),
    };
    const bad: Record<string, fc.Arbitrary<unknown>> = {
      queues: fc.constantFrom<unknown>([], [''], ['a\u0000'], 'default', [1], null, ['\ud800']),
      concurrency: fc.constantFrom<unknown>(0, -1, 1.5, 10_001, Number.NaN, '4', null),
      batchSize: fc.constantFrom<unknown>(0, 2.5, '1'),
      pollIntervalMs: fc.constantFrom<unknown>(
        0,
        9,
        -1,
        Number.NaN,
        Number.POSITIVE_INFINITY,
        2 ** 31,
        '100',
      ),
      visibilityTimeoutMs: fc.constantFrom<unknown>(99, -1, Number.NaN, 2 ** 31),
      heartbeatIntervalMs: fc.constantFrom<unknown>(9, 300_000, 10 ** 9, Number.NaN),
      sweepIntervalMs: fc.constantFrom<unknown>(0, Number.NaN, null),
      jobTimeoutMs: fc.constantFrom<unknown>(0, -5, Number.NaN, 'x'),
      shutdownTimeoutMs: fc.constantFrom<unknown>(-1, Number.NaN),
      onSuccess: fc.constantFrom<unknown>('DELETE', 'drop', '', null, 1),
      handleSignals: fc.constantFrom<unknown>('yes', 1, null),
      workerId: fc.constantFrom<unknown>('', 'x'.repeat(201), 5),
      handlers: fc.constantFrom<unknown>(null, [], 'x', { job: 'not a function' }, { '': () => {} }),
      bogusOption: fc.anything(),
    };
    const badEntry = fc.constantFrom(...Object.keys(bad)).chain((k) => bad[k]!.map((v) => [k, v] as const));
    await fc.assert(
      fc.property(fc.record(good, { requiredKeys: [] }), fc.option(badEntry), (options, hostile) => {
        const input: Record<string, unknown> = { handlers: { noop: () => {} }, ...options };
        if (hostile) input[hostile[0]] = hostile[1];
        let worker: ReturnType<Skiplock['worker']>;
        try {
          worker = t.skiplock.worker(input as never);
        } catch (error) {
          if (!(error instanceof ValidationError)) throw error;
          expect(hostile).not.toBeNull();
          const [key] = hostile!;
          const named = error.field === `worker.${key}` || error.field.startsWith(`worker.${key}`);
          if (!named) throw new Error(`ValidationError names '${error.field}', expected worker.${key}`);
          return;
        }
        if (hostile) throw new Error(`worker accepted ${hostile[0]} = ${String(hostile[1])}`);
        if (options.queues) expect(worker.options.queues).toEqual(options.queues);
        if (options.concurrency) expect(worker.options.concurrency).toBe(options.concurrency);
        if (options.onSuccess) expect(worker.options.onSuccess).toBe(options.onSuccess);
      }),
      { numRuns: RUNS * 2 },
    );
  });

  const filterCalls = (value: unknown) => [
    () => t.skiplock.getJob(value as string),
    () => t.skiplock.listJobs({ ids: [value as string] }),
    () => t.skiplock.listJobs({ kind: value as string, queue: value as string }),
    () => t.skiplock.requeue({ kind: value as string }),
    () => t.skiplock.requeue({ queue: [value as string] }),
    () => t.skiplock.requeue({ ids: [value as string] }),
  ];

  it('getJob, listJobs and requeue treat ids and names as data or refuse them', async () => {
    const kept = await t.skiplock.enqueue('keep-me', { n: 1 });
    await fc.assert(
      fc.asyncProperty(fc.oneof(anyString, notAString), async (value) => {
        const before = await jobCount();
        for (const call of filterCalls(value)) {
          try {
            await call();
          } catch (error) {
            if (!(error instanceof ValidationError)) throw error;
          }
        }
        expect(await jobCount()).toBe(before);
        expect((await t.skiplock.getJob(kept.id))?.status).toBe('queued');
      }),
      { numRuns: RUNS },
    );
  });

  // Regression test of engine bug 3: a NUL in a name filter reached the database (DatabaseError 22021).
  it('a NUL character in a listJobs or requeue filter is refused as a ValidationError', async () => {
    const before = await jobCount();
    for (const call of filterCalls('a\u0000b')) {
      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toMatch(/^(id|filter\.(ids|kind|queue))/);
    }
    expect(await jobCount()).toBe(before);
  });
});

describe('fuzz: schema names', () => {
  async function schemas(): Promise<string[]> {
    return (await t.query<{ nspname: string }>('SELECT nspname FROM pg_namespace ORDER BY nspname')).map(
      (r) => r.nspname,
    );
  }

  /** The functions of `schema`, as regprocedure text (schema-qualified, with argument types). */
  async function functionsIn(schema: unknown): Promise<string[]> {
    if (typeof schema !== 'string' || schema.includes('\u0000') || !schema.isWellFormed()) return [];
    return (
      await t.query<{ fn: string }>(
        `SELECT p.oid::regprocedure::text AS fn FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = $1`,
        [schema],
      )
    ).map((r) => r.fn);
  }

  const hostileSchemas: unknown[] = [
    'x"; DROP TABLE y; --',
    'y',
    "'; DROP SCHEMA public CASCADE; --",
    'Skiplock',
    'SKIPLOCK',
    'with space',
    'select',
    '"',
    '""',
    'a.b',
    '$1',
    '🙂',
    'é'.repeat(27),
    'x'.repeat(54),
    'x'.repeat(55),
    '',
    'a\u0000b',
    '\ud800',
    'public',
    'pg_x',
    'pg_temp',
    'information_schema',
  ];
  const schemaName = fc.oneof(
    fc.constantFrom(...hostileSchemas),
    fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 }),
    fc.string({ unit: 'binary', maxLength: 12 }),
    notAString,
  );

  it('a hostile schema name works in its own quoted schema or is refused as schema', async () => {
    await t.query('CREATE TABLE IF NOT EXISTS public.y (id int)');
    await t.query('CREATE TABLE IF NOT EXISTS public.witness (id int)');
    const pool = t.db.pool;
    await fc.assert(
      fc.asyncProperty(schemaName, async (schema) => {
        // null and undefined mean the default schema; the test's own schema is not ours to drop.
        fc.pre(schema !== t.schema && schema !== null && schema !== undefined && schema !== 'skiplock');
        const before = await schemas();
        // Functions already in the schema (an existing one such as public): all others are ours to drop.
        const functionsBefore = await functionsIn(schema);
        let instance: Skiplock;
        try {
          instance = new Skiplock({ pool, schema: schema as string });
        } catch (error) {
          if (!(error instanceof ValidationError) || error.field !== 'schema') throw error;
          expect(await schemas()).toEqual(before);
          return;
        }
        try {
          await instance.migrate();
          const job = await instance.enqueue('k', { schema });
          expect((await instance.getJob(job.id))?.payload).toEqual({ schema });
          const after = await schemas();
          // Exactly one schema, named byte for byte as given, was added (or it already existed).
          const added = after.filter((s) => !before.includes(s));
          expect(added).toEqual(before.includes(schema as string) ? [] : [schema]);
          const [where] = await t.query<{ schema: string }>(
            `SELECT n.nspname AS schema FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE c.relname = 'jobs' AND n.nspname = $1`,
            [schema],
          );
          expect(where?.schema).toBe(schema);
          // Nothing was executed from the name: the witness tables are still there.
          expect(
            await t.query("SELECT relname FROM pg_class WHERE relname IN ('y', 'witness') ORDER BY relname"),
          ).toEqual([{ relname: 'witness' }, { relname: 'y' }]);
        } finally {
          await instance.close();
          if (!before.includes(schema as string)) {
            await t.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema as string)} CASCADE`);
          } else {
            const q = quoteIdent(schema as string);
            await t.query(
              `DROP TABLE IF EXISTS ${q}.jobs, ${q}.jobs_archive, ${q}.queues, ${q}.schedules, ${q}.migrations CASCADE`,
            );
            for (const fn of await functionsIn(schema))
              if (!functionsBefore.includes(fn)) await t.query(`DROP FUNCTION IF EXISTS ${fn} CASCADE`);
          }
        }
      }),
      // numRuns counts the examples too.
      {
        numRuns: hostileSchemas.length + Math.ceil(RUNS / 5),
        examples: hostileSchemas.map((schema) => [schema]),
      },
    );
  });

  // Regression test of engine bug 4: a pg_ schema name passed validation and failed in migrate() (42939).
  it('a schema name PostgreSQL reserves (pg_…) is refused as schema', async () => {
    for (const schema of ['pg_x', 'pg_temp']) {
      let instance: Skiplock;
      try {
        instance = new Skiplock({ pool: t.db.pool, schema });
      } catch (error) {
        if (error instanceof ValidationError && error.field === 'schema') continue;
        throw error;
      }
      try {
        await instance.migrate();
      } finally {
        await instance.close();
      }
    }
  });

  // Regression test of engine bug 5: prepared statement names carried only the first 20 bytes
  // of the schema, so two such schemas collided on a shared pool connection.
  it('two schemas that share a long prefix work side by side on one pool', async () => {
    const pool = new pg.Pool({ connectionString: t.db.url, max: 1 });
    // A pool's owner hears its idle clients' errors (the file's database is dropped with FORCE at the end).
    pool.on('error', () => {});
    const names = ['tenant_0123456789abcd_a', 'tenant_0123456789abcd_b'];
    try {
      for (const schema of names) {
        const instance = new Skiplock({ pool, schema });
        await instance.migrate();
        const job = await instance.enqueue('k', { schema });
        const worker = instance.worker({
          handleSignals: false,
          pollIntervalMs: 50,
          handlers: { k: () => {} },
        });
        const errors: unknown[] = [];
        worker.on('error', (error) => errors.push(error));
        await worker.start();
        await waitFor(
          async () => (await instance.getJob(job.id)) === undefined || errors.length > 0,
          10_000,
          `the job of ${schema} to run`,
        );
        await worker.stop();
        await instance.close();
        expect(errors).toEqual([]);
      }
    } finally {
      for (const schema of names) await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    }
  });
});
