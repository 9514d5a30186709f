/**
 * One table of cases run by both entry points of each state change: the SQL
 * functions (`<schema>.enqueue`, `requeue`, `cancel`, `sweep`, for other
 * languages) and the library's statements (`enqueue`/`enqueueMany`,
 * `requeue`, `cancel`, `sweep`). Each case seeds the same rows in two
 * databases, runs the SQL function in one and the library in the other, and
 * expects the same rows, return value and wake-ups. A combination that exists
 * on one side only is left out, with a comment saying which.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { advisoryLockKey } from '../src/db/sql.js';
import type { WakeUp } from '../src/db/wake-up.js';
import {
  type CancelFilter,
  type JobOptions,
  type RequeueFilter,
  type Skiplock,
  ValidationError,
} from '../src/index.js';
import { createTestDatabase, quoteIdent, TEST_SCHEMA, type TestDatabase } from './support/database.js';
import { listenForWakeUps, type WakeUpListener } from './support/wake-ups.js';

/** A starting row; running rows are held by `worker-1`, finished ones have finished_at. */
interface Seed {
  kind?: string;
  queue?: string;
  status?: 'waiting' | 'queued' | 'running' | 'succeeded' | 'failed' | 'dead' | 'cancelled';
  attempts?: number;
  maxAttempts?: number;
  /** max_attempts left to the kind (the row's max_attempts_default). */
  kindDefault?: boolean;
  /** Running: locked_at this many seconds ago. @default 1 (a live lease) */
  lockedAgoS?: number;
  visibilityMs?: number;
  uniqueKey?: string;
  uniqueStates?: string[];
  cancelRequestedAgoS?: number;
  errors?: number; // entries in the attempt history
  /** This row this many times, each locked a second longer ago than the one before. */
  copies?: number;
}

type Op =
  | { op: 'enqueue'; kind: string; payload?: object; options?: JobOptions }
  | { op: 'requeue'; filter: Omit<RequeueFilter, 'client'> }
  | { op: 'cancel'; filter: Omit<CancelFilter, 'client'> }
  | { op: 'sweep'; defaultVisibilityTimeoutMs?: number; lockHeld?: boolean };

interface Case {
  name: string;
  seed: Seed[];
  run: Op;
  /** Set when the two sides differ: what differs (the case then runs as it.fails). */
  drift?: string;
}

const dead = { status: 'running', lockedAgoS: 60, visibilityMs: 30_000 } as const;
/** Jobs in every state, ids 1–12 in this order. */
const mixed: Seed[] = [
  { kind: 'a', queue: 'q1' },
  { kind: 'a', queue: 'q1', status: 'running', attempts: 1, visibilityMs: 30_000, uniqueKey: 'u-run' },
  { kind: 'b', queue: 'q2', ...dead, attempts: 2, maxAttempts: 5 },
  { kind: 'a', queue: 'q1', status: 'dead', attempts: 5, maxAttempts: 5, errors: 5 },
  { kind: 'b', queue: 'q2', status: 'failed', attempts: 1, errors: 1 },
  { kind: 'a', queue: 'q2', status: 'cancelled', attempts: 1, cancelRequestedAgoS: 600 },
  {
    kind: 'b',
    queue: 'q1',
    status: 'dead',
    attempts: 3,
    uniqueKey: 'u-dead',
    uniqueStates: ['queued', 'dead'],
  },
  { kind: 'b', queue: 'q2', kindDefault: true, uniqueKey: 'u-q' },
  { kind: 'b', queue: 'q1', status: 'running', attempts: 1, cancelRequestedAgoS: 600 },
  { kind: 'a', queue: 'q1', status: 'succeeded', attempts: 1 },
  { kind: 'a', queue: 'q3', status: 'dead', attempts: 20, uniqueKey: 'u-free', kindDefault: true },
  { kind: 'b', queue: 'q1', status: 'waiting' },
];
/** Running jobs for the sweeper, ids 1–10. */
const leases: Seed[] = [
  { ...dead, attempts: 1, maxAttempts: 5 },
  { ...dead, queue: 'q2', attempts: 5, maxAttempts: 5, errors: 4 },
  { status: 'running', attempts: 1, visibilityMs: 30_000 },
  { status: 'running', attempts: 1, lockedAgoS: 600 },
  { status: 'running', attempts: 2, lockedAgoS: 120, maxAttempts: 2 },
  { ...dead, queue: 'q3', attempts: 1, cancelRequestedAgoS: 90 },
  { ...dead, attempts: 21, maxAttempts: 25, errors: 20 },
  { ...dead, attempts: 1, uniqueKey: 'u-lease' },
  { queue: 'q2' },
  { ...dead, queue: 'q4', attempts: 20, kindDefault: true },
];
/**
 * Rows as the worker's finish statement leaves them, ids 1–8: a retry (queued,
 * its attempt in the history), a snooze (queued, attempt given back, no
 * history), a permanent failure, a dead letter, a cancel that ended a running
 * job (attempt charged), a kept success; then running jobs on the edge of the
 * dead-letter rule (attempts = max_attempts − 1, = max_attempts) with dead leases.
 */
const finished: Seed[] = [
  { kind: 'a', queue: 'q1', attempts: 1, maxAttempts: 3, errors: 1 },
  { kind: 'a', queue: 'q1', attempts: 1, maxAttempts: 3 },
  { kind: 'b', queue: 'q2', status: 'failed', attempts: 1, errors: 1 },
  { kind: 'b', queue: 'q2', status: 'dead', attempts: 3, maxAttempts: 3, errors: 3 },
  { kind: 'a', queue: 'q2', status: 'cancelled', attempts: 2, cancelRequestedAgoS: 90 },
  { kind: 'a', queue: 'q1', status: 'succeeded', attempts: 1 },
  { kind: 'b', queue: 'q1', ...dead, attempts: 2, maxAttempts: 3, errors: 1 },
  { kind: 'b', queue: 'q3', ...dead, attempts: 3, maxAttempts: 3, errors: 2 },
];
const inAnHour = new Date(Date.now() + 3_600_000);

/** A case's name: its arguments as JSON, long strings by their length. */
const label = (v: unknown) =>
  JSON.stringify(v, (k, x) =>
    k === 'runAt' ? 'in an hour' : typeof x === 'string' && x.length > 20 ? `${x[0]} × ${x.length}` : x,
  );
/** One case per options object (or filter), on the jobs of `mixed`. */
const enqueues = (list: object[], kind = 'e'): Case[] =>
  list.map((options) => ({
    name: `enqueue ${label(kind)}: ${label(options)}`,
    seed: mixed,
    run: { op: 'enqueue', kind, payload: { b: [1, 'two'] }, options: options as JobOptions },
  }));
const sweep = (name: string, seed: Seed[], options: Omit<Op & { op: 'sweep' }, 'op'> = {}): Case => ({
  name: `sweep: ${name}`,
  seed,
  run: { op: 'sweep', ...options },
});
const filtered = (op: 'requeue' | 'cancel', list: object[], seed = mixed, on = ''): Case[] =>
  list.map((filter) => ({ name: `${op}${on}: ${label(filter)}`, seed, run: { op, filter } }));

// Bad arguments are in the table too: both sides refuse them and change nothing.
const cases: Case[] = [
  { name: 'enqueue: no payload, no other jobs', seed: [], run: { op: 'enqueue', kind: 'e' } },
  // The SQL enqueue has no onConflict (a held key always means 'skip'), so
  // 'replace' is left out; nor a delay: delayMs goes to it as run_at => now() + delay.
  ...enqueues([
    {},
    { queue: 'q9', priority: -3 },
    { runAt: inAnHour },
    { delayMs: 90_000 },
    { maxAttempts: 3 },
    { queue: 'q9', priority: 7, delayMs: 5_000, maxAttempts: 1, uniqueKey: 'k-all' },
    { uniqueKey: 'k-new' },
    { uniqueKey: 'u-q', queue: 'q9', maxAttempts: 2 },
    { uniqueKey: 'u-run' },
    { uniqueKey: 'u-dead' },
    { uniqueKey: 'u-free' },
    { uniqueKey: 'u-dead', uniqueStates: ['queued', 'running'] },
    { uniqueKey: 'k-states', uniqueStates: ['queued', 'dead', 'queued', 'succeeded'] },
    { uniqueKey: 'u-q', onConflict: 'skip' },
    { maxAttempts: 0 },
    { queue: '' },
    { uniqueKey: '' },
    { uniqueKey: 'k', uniqueStates: ['running'] },
    { uniqueStates: ['queued'] },
    // Names and keys at and past their limits (in bytes of UTF-8).
    { queue: 'é'.repeat(512) },
    { queue: 'q'.repeat(1025) },
    { uniqueKey: 'é'.repeat(1024) },
    { uniqueKey: 'k'.repeat(2049) },
    // Group keys: 1 to 200 characters.
    { groupKey: 'tenant-1' },
    { groupKey: 'g', uniqueKey: 'k-group', queue: 'q9' },
    { groupKey: 'é'.repeat(200) },
    { groupKey: '' },
    { groupKey: 'g'.repeat(201) },
  ]),
  ...enqueues([{}], ''),
  ...enqueues([{}], 'é'.repeat(512)),
  ...enqueues([{}], 'é'.repeat(513)),
  ...filtered('requeue', [
    { all: true, kind: ['a'] },
    { all: true, ids: ['4'] },
    { ids: ['0'] },
    { ids: [null as unknown as string] },
    { kind: [''] },
    { queue: [null as unknown as string] },
    { ids: ['4', '5', '6', '1', '2', '10'] },
    { ids: ['4', '5', '6'], status: ['dead'] },
    { kind: ['a'] },
    { queue: ['q2'] },
    { status: ['cancelled'] },
    { status: ['dead', 'failed'], kind: ['b'] },
    { ids: ['6', '7'], queue: ['q1'] },
    { all: true },
    { queue: ['nowhere'] },
    { ids: [] },
    { status: [] },
    { kind: 'b', queue: 'q2', status: 'failed' },
    {},
    { status: ['queued'] },
  ]),
  ...filtered('cancel', [
    { ids: ['1', '2', '3', '4'] },
    { ids: ['-1'] },
    { kind: [null as unknown as string] },
    { queue: [''] },
    { kind: ['a'] },
    { queue: ['q1'] },
    { status: ['queued'] },
    { status: ['running'] },
    { status: ['waiting'] },
    { ids: ['12'] },
    { kind: ['b'], status: ['running'] },
    { ids: ['8', '9'], queue: ['q2'] },
    { ids: ['10', '11'] },
    { kind: [] },
    { status: [] },
    { kind: 'b', queue: 'q1', status: 'running' },
    {},
    { status: ['dead'] },
  ]),
  // The rows the worker's finish statement leaves, under each function that touches finished jobs.
  ...filtered(
    'requeue',
    [{ status: ['dead', 'failed', 'cancelled'] }, { ids: ['1', '2', '3', '4', '5', '6'] }, { kind: ['a'] }],
    finished,
    ' (rows as finish leaves them)',
  ),
  ...filtered(
    'cancel',
    [{}, { status: ['queued'] }, { kind: ['b'] }],
    finished,
    ' (rows as finish leaves them)',
  ),
  sweep('the dead-letter edge, among rows as finish leaves them', finished),
  sweep('default visibility timeout', leases),
  sweep('among jobs in every state', mixed),
  sweep('a shorter default visibility timeout', leases, { defaultVisibilityTimeoutMs: 60_000 }),
  sweep('another sweep holds the lock', leases, { lockHeld: true }),
  sweep('the shortest default visibility timeout', leases, { defaultVisibilityTimeoutMs: 100 }),
  sweep('a default visibility timeout below the shortest', leases, { defaultVisibilityTimeoutMs: 99 }),
  sweep('a default visibility timeout of 0', leases, { defaultVisibilityTimeoutMs: 0 }),
  // Distinct lease times, so both sides take the same 1,000.
  sweep('1,000 per call, the oldest leases first', [
    { ...dead, lockedAgoS: 2000 },
    { ...dead, attempts: 1, copies: 1003 },
    { ...dead, lockedAgoS: 45 },
  ]),
];

/** What one side left behind. */
interface Outcome {
  returned: unknown;
  rows: Record<string, unknown>[];
  wakeUps: WakeUp[];
}

interface Side {
  db: TestDatabase;
  skiplock: Skiplock;
  listener: WakeUpListener;
}

let sqlSide: Side;
let librarySide: Side;
const fn = (name: string) => `${quoteIdent(TEST_SCHEMA)}.${name}`;

beforeAll(async () => {
  const open = async (): Promise<Side> => {
    const db = await createTestDatabase();
    return { db, skiplock: db.skiplock(), listener: await listenForWakeUps(db.url) };
  };
  [sqlSide, librarySide] = await Promise.all([open(), open()]);
});
afterAll(async () => {
  for (const side of [sqlSide, librarySide]) {
    await side?.listener.close();
    await side?.db.close();
  }
});

/** Empties the jobs table (ids from 1 again) and inserts `seed`; returns how many rows. */
async function reset(db: TestDatabase, seed: Seed[]): Promise<number> {
  await db.query(`DELETE FROM ${db.jobs}`);
  await db.query(`SELECT setval(pg_get_serial_sequence($1, 'id'), 1, false)`, [db.jobs]);
  // Copies are made here, not with generate_series in SQL: its row estimates made the planner JIT-compile.
  const rows = seed.flatMap((s) =>
    Array.from({ length: s.copies ?? 1 }, (_, copy) => ({
      ...{ kind: 'k', queue: 'q1', status: 'queued', attempts: 0, maxAttempts: 20, kindDefault: false },
      ...s,
      lockedAgoS: (s.lockedAgoS ?? 1) + copy,
      errors: s.errors
        ? Array.from({ length: s.errors }, (_, i) => ({ attempt: i + 1, error: 'boom', worker: 'worker-0' }))
        : null,
    })),
  );
  await db.query(
    `INSERT INTO ${db.jobs} (kind, queue, status, run_at, attempts, max_attempts, max_attempts_default,
                             locked_at, locked_by, lease_seq, visibility_timeout_ms, last_error, finished_at,
                             unique_key, unique_states, cancel_requested_at, errors)
     SELECT r.kind, r.queue, r.status, now() - interval '1 second', r.attempts, r."maxAttempts", r."kindDefault",
            CASE WHEN r.status = 'running' THEN now() - r."lockedAgoS" * interval '1 second' END,
            CASE WHEN r.status = 'running' THEN 'worker-1' END, r.attempts, r."visibilityMs",
            CASE WHEN r.status IN ('dead', 'failed') THEN 'boom' END,
            CASE WHEN r.status NOT IN ('queued', 'running') THEN now() END,
            r."uniqueKey", r."uniqueStates", now() - r."cancelRequestedAgoS" * interval '1 second', r.errors
     FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (kind text, queue text, status text, attempts int,
            "maxAttempts" int, "kindDefault" boolean, "lockedAgoS" int, "visibilityMs" int, "uniqueKey" text,
            "uniqueStates" text[], "cancelRequestedAgoS" int, errors jsonb)) WITH ORDINALITY AS r
     ORDER BY r.ordinality`,
    [JSON.stringify(rows)],
  );
  return rows.length;
}

/** Every column a state change may touch; times as null-ness or relative to now. */
async function snapshot(db: TestDatabase): Promise<Record<string, unknown>[]> {
  return db.query(
    `SELECT id::int, kind, queue, payload, status, priority, attempts, max_attempts, max_attempts_default,
            extract(epoch FROM run_at - now())::float8 * 1000 AS run_in_ms, last_error,
            COALESCE(jsonb_array_length(errors), 0) AS history, (errors->-1->>'attempt')::int AS history_attempt,
            errors->-1->>'error' AS history_error, errors->-1->>'worker' AS history_worker,
            locked_by, locked_at IS NULL AS unlocked, lease_seq::int, visibility_timeout_ms,
            finished_at IS NULL AS unfinished, unique_key, unique_states, unique_lock, group_key,
            CASE WHEN cancel_requested_at IS NULL THEN 'never'
                 WHEN cancel_requested_at > now() - interval '1 minute' THEN 'now' ELSE 'earlier' END
              AS cancel_requested
     FROM ${db.jobs} ORDER BY id`,
  );
}

/** SQL named arguments from the library's options, values as parameters. */
function sqlArgs(args: [name: string, value: unknown, type: string][]): { text: string; values: unknown[] } {
  const given = args.filter(([, value]) => value !== undefined);
  return {
    text: given.map(([name, , type], i) => `${name} => ${type.replace('$', () => `$${i + 1}`)}`).join(', '),
    values: given.map(([, value]) => value),
  };
}

/** Runs `op` through the SQL function. */
async function runSql(db: TestDatabase, run: Op, seeded: number): Promise<unknown> {
  if (run.op === 'enqueue') {
    const o = run.options ?? {};
    const { text, values } = sqlArgs([
      ['kind', run.kind, '$::text'],
      ['payload', run.payload && JSON.stringify(run.payload), '$::jsonb'],
      ['queue', o.queue, '$::text'],
      ['priority', o.priority, '$::int'],
      ['run_at', o.runAt, '$::timestamptz'],
      ['run_at', o.delayMs, "now() + $::float8 * interval '1 millisecond'"],
      ['max_attempts', o.maxAttempts, '$::int'],
      ['unique_key', o.uniqueKey, '$::text'],
      ['unique_states', o.uniqueStates, '$::text[]'],
      ['group_key', o.groupKey, '$::text'],
    ]);
    const [row] = await db.query<{ id: string }>(`SELECT ${fn('enqueue')}(${text}) AS id`, values);
    return { id: row!.id, duplicate: Number(row!.id) <= seeded };
  }
  if (run.op === 'sweep') {
    const ms = run.defaultVisibilityTimeoutMs;
    const [row] = await db.query<{ n: number }>(
      `SELECT ${fn('sweep')}(${ms === undefined ? '' : '$1'}) AS n`,
      ms === undefined ? [] : [ms],
    );
    return row!.n;
  }
  const list = (v: string | string[] | undefined) => (typeof v === 'string' ? [v] : v);
  const f = run.filter;
  const { text, values } = sqlArgs([
    ['ids', f.ids, '$::bigint[]'],
    ['kinds', list(f.kind), '$::text[]'],
    ['queues', list(f.queue), '$::text[]'],
    ['statuses', list(f.status), '$::text[]'],
    ['all_jobs', 'all' in f ? f.all : undefined, '$::boolean'],
  ]);
  if (run.op === 'requeue') {
    const [row] = await db.query<{ n: number }>(`SELECT ${fn('requeue')}(${text}) AS n`, values);
    return row!.n;
  }
  const [row] = await db.query(`SELECT * FROM ${fn('cancel')}(${text})`, values);
  return row;
}

/** Runs `op` through the library; enqueues through `enqueue` or `enqueueMany`. */
async function runLibrary({ db, skiplock }: Side, run: Op, many: boolean): Promise<unknown> {
  switch (run.op) {
    case 'enqueue': {
      const job = many
        ? (await skiplock.enqueueMany([{ kind: run.kind, payload: run.payload, ...run.options }]))[0]!
        : await skiplock.enqueue(run.kind, run.payload, run.options);
      return { id: job.id, duplicate: job.duplicate };
    }
    case 'requeue':
      return skiplock.requeue(run.filter);
    case 'cancel':
      return skiplock.cancel(run.filter);
    case 'sweep': {
      const { locked, requeued, dead } = await skiplock.sweep(run.defaultVisibilityTimeoutMs);
      // The library does not count a reclaimed job whose cancel was requested (it ends cancelled); the SQL does.
      const [{ n }] = (await db.query(
        `SELECT count(*)::int AS n FROM ${db.jobs}
         WHERE status = 'cancelled' AND last_error = 'reclaimed: visibility timeout'`,
      )) as [{ n: number }];
      return locked ? requeued + dead + n : 0;
    }
  }
}

/** Holds the sweeper's advisory lock on another connection while `fn` runs. */
async function withSweepLockHeld<T>(db: TestDatabase, body: () => Promise<T>): Promise<T> {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [
      advisoryLockKey('sweep', TEST_SCHEMA),
    ]);
    return await body();
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

/** Seeds `side`, runs `op` there, and reads what it left. */
async function outcome(side: Side, c: Case, op: (seeded: number) => Promise<unknown>): Promise<Outcome> {
  const seeded = await reset(side.db, c.seed);
  await side.listener.settle();
  const go = () => op(seeded);
  const returned = await (c.run.op === 'sweep' && c.run.lockHeld
    ? withSweepLockHeld(side.db, go)
    : go()
  ).catch((error: unknown) => {
    // Refused as bad input: ValidationError, or the SQL functions' invalid_parameter_value.
    if (error instanceof ValidationError || (error as { code?: unknown }).code === '22023') return 'refused';
    throw error;
  });
  const wakeUps = (await side.listener.settle())
    .map((w) => ({ ...w, ...(w.ids && { ids: [...w.ids].sort((a, b) => Number(a) - Number(b)) }) }))
    .sort((a, b) => `${a.type} ${a.queue}`.localeCompare(`${b.type} ${b.queue}`));
  return { returned, rows: await snapshot(side.db), wakeUps };
}

/** Times read at different moments on the two sides match within this many milliseconds. */
const TOLERANCE_MS = 5_000;

/** `actual` with each time that lies within the tolerance of `expected`'s replaced by it, for toEqual. */
function aligned(actual: Outcome, expected: Outcome): Outcome {
  const near = (a: unknown, b: unknown) =>
    typeof a === 'number' && typeof b === 'number' && Math.abs(a - b) < TOLERANCE_MS ? b : a;
  const rows = actual.rows.map((r, i) => ({
    ...r,
    run_in_ms: near(r.run_in_ms, expected.rows[i]?.run_in_ms),
  }));
  const wakeUps = actual.wakeUps.map((w, i) => ({
    ...w,
    delayMs: near(w.delayMs, expected.wakeUps[i]?.delayMs),
  }));
  return { returned: actual.returned, rows, wakeUps: wakeUps as WakeUp[] };
}

describe('the SQL functions and the library leave the same state', () => {
  for (const c of cases) {
    (c.drift ? it.fails : it)(c.name, async () => {
      const sql = await outcome(sqlSide, c, (seeded) => runSql(sqlSide.db, c.run, seeded));
      for (const many of c.run.op === 'enqueue' ? [false, true] : [false]) {
        const library = await outcome(librarySide, c, () => runLibrary(librarySide, c.run, many));
        expect(aligned(library, sql), many ? 'enqueueMany' : 'library').toEqual(sql);
      }
    });
  }
});
