/**
 * A model-based test of the job state machine on real PostgreSQL. Random
 * interleavings of enqueue, claim, heartbeat, complete, fail, release, lease
 * expiry, sweep, requeue and "time passing" are driven straight through the
 * JobQueries statements by several simulated workers, and after every step the
 * jobs table must equal the model:
 *
 * - a job has at most one live lease, and only its holder's writes land;
 * - attempts change only as the life cycle says: claim adds one, graceful
 *   release takes back the one it charged, requeue resets to 0;
 * - a stale lease (reclaimed, or an older attempt of the same worker) changes nothing;
 * - nothing disappears that should not (only completed jobs leave the table).
 */
import fc from 'fast-check';
import { beforeEach, describe, expect, it } from 'vitest';
import type { NewJob } from '../../src/db/queries/insert.js';
import { leaseKey } from '../../src/db/queries/job-row.js';
import { JobQueries } from '../../src/db/queries/jobs.js';
import { type TestContext, useTestDatabase } from '../support/fixture.js';

const t = useTestDatabase();
/** The statements under test, on the test's schema. */
let queries: JobQueries;

beforeEach(() => {
  queries = new JobQueries(t.schema);
});

const RUNS = Number(process.env.SKIPLOCK_FUZZ_RUNS ?? 200);
const WORKERS = ['w1', 'w2', 'w3'] as const;
const QUEUES = ['a', 'b', "c'; --"] as const;
const VISIBILITY_MS = 60_000;
/** Every job of this model has kind 'k'. */
const ALL_KINDS = ['k'];
const RECLAIMED = 'reclaimed: visibility timeout';

type Status = 'queued' | 'running' | 'succeeded' | 'failed' | 'dead';

interface ModelJob {
  id: string;
  queue: string;
  priority: number;
  maxAttempts: number;
  status: Status;
  attempts: number;
  lockedBy: string | null;
  /** locked_at was set back past the visibility timeout. */
  expired: boolean;
  /** run_at <= now(). */
  due: boolean;
  lastError: string | null;
  finished: boolean;
  /** Claims ever: +1 per claim, never reset (the lease number that fences results). */
  leaseSeq: number;
}

interface Lease {
  id: string;
  attempts: number;
  leaseSeq: string;
}

interface Model {
  jobs: Map<string, ModelJob>;
  archived: Set<string>;
  deleted: Set<string>;
  /** What each worker believes it holds; stale entries stay until the worker learns otherwise. */
  leases: Map<string, Lease[]>;
  step: number;
  /** Writes made with a lease the worker no longer held (each must have changed nothing). */
  staleWrites: number;
}

interface Real {
  pool: TestContext['db']['pool'];
}

// ---- helpers -----------------------------------------------------------------------------------

function holds(m: Model, worker: string, lease: Lease): boolean {
  const job = m.jobs.get(lease.id);
  return (
    job?.status === 'running' &&
    job.lockedBy === worker &&
    job.attempts === lease.attempts &&
    String(job.leaseSeq) === lease.leaseSeq
  );
}

/** The leases of `leases` the database will honour, one per lease key. */
function live(m: Model, worker: string, leases: Lease[]): Lease[] {
  const seen = new Set<string>();
  return leases.filter((l) => {
    if (!holds(m, worker, l) || seen.has(leaseKey(l))) return false;
    seen.add(leaseKey(l));
    return true;
  });
}

function pick<T>(items: T[], mask: number): T[] {
  return items.filter((_, i) => (mask >> i) & 1);
}

function sorted(ids: Iterable<string>): string[] {
  return [...ids].sort((a, b) => Number(a) - Number(b));
}

/** The whole jobs table against the model, plus the invariants. */
async function checkState(m: Model): Promise<void> {
  const rows = await t.query<{
    id: string;
    queue: string;
    priority: number;
    max_attempts: number;
    status: Status;
    attempts: number;
    locked_by: string | null;
    lease_seq: string;
    locked: boolean;
    due: boolean;
    last_error: string | null;
    finished: boolean;
  }>(
    `SELECT id, queue, priority, max_attempts, status, attempts, locked_by, lease_seq::text,
            locked_at IS NOT NULL AS locked,
            run_at <= now() AS due, last_error, finished_at IS NOT NULL AS finished
     FROM ${t.jobs} ORDER BY id`,
  );
  const expected = sorted(m.jobs.keys()).map((id) => {
    const j = m.jobs.get(id)!;
    return {
      id,
      queue: j.queue,
      priority: j.priority,
      max_attempts: j.maxAttempts,
      status: j.status,
      attempts: j.attempts,
      locked_by: j.lockedBy,
      lease_seq: String(j.leaseSeq),
      locked: j.status === 'running',
      due: j.due,
      last_error: j.lastError,
      finished: j.finished,
    };
  });
  expect(rows).toEqual(expected);
  const archived = await t.query<{ id: string; status: string }>(
    `SELECT id, status FROM ${t.archive} ORDER BY id`,
  );
  expect(archived).toEqual(sorted(m.archived).map((id) => ({ id, status: 'succeeded' })));
  // At most one live lease per job: of all the leases workers believe they hold, only one can match.
  for (const id of m.jobs.keys()) {
    const live = WORKERS.filter((w) => (m.leases.get(w) ?? []).some((l) => l.id === id && holds(m, w, l)));
    expect(live.length).toBeLessThanOrEqual(1);
  }
  // Attempts stay within the life cycle's bounds.
  for (const j of m.jobs.values()) {
    expect(j.attempts).toBeGreaterThanOrEqual(0);
    if (j.status === 'running') expect(j.attempts).toBeGreaterThanOrEqual(1);
  }
}

// ---- commands ----------------------------------------------------------------------------------

type Cmd = fc.AsyncCommand<Model, Real>;

class Enqueue implements Cmd {
  constructor(readonly items: { queue: string; priority: number; maxAttempts: number; delayed: boolean }[]) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const jobs: NewJob[] = this.items.map((i) => ({
      kind: 'k',
      queue: i.queue,
      payloadJson: '{}',
      priority: i.priority,
      runAt: null,
      delayMs: i.delayed ? 86_400_000 : null,
      maxAttempts: i.maxAttempts,
    }));
    const records =
      jobs.length === 1
        ? [await queries.insert.one(r.pool, jobs[0]!)]
        : await queries.insert.many(r.pool, jobs);
    expect(records).toHaveLength(jobs.length);
    records.forEach((rec, i) => {
      const item = this.items[i]!;
      if ('queue' in rec) expect(rec.queue).toBe(item.queue);
      m.jobs.set(rec.id, {
        id: rec.id,
        queue: item.queue,
        priority: item.priority,
        maxAttempts: item.maxAttempts,
        status: 'queued',
        attempts: 0,
        lockedBy: null,
        expired: false,
        due: !item.delayed,
        lastError: null,
        finished: false,
        leaseSeq: 0,
      });
    });
    await checkState(m);
  }
  toString = () => `enqueue(${JSON.stringify(this.items)})`;
}

class Claim implements Cmd {
  constructor(
    readonly worker: string,
    readonly queues: string[],
    readonly limit: number,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const eligible = await t.query<{ id: string; priority: number; run_at: Date }>(
      `SELECT id, priority, run_at FROM ${t.jobs}
       WHERE status = 'queued' AND queue = ANY($1::text[]) AND run_at <= now()`,
      [this.queues],
    );
    const modelEligible = [...m.jobs.values()].filter(
      (j) => j.status === 'queued' && j.due && this.queues.includes(j.queue),
    );
    expect(sorted(eligible.map((e) => e.id))).toEqual(sorted(modelEligible.map((j) => j.id)));
    const claimed = await queries.claim.claim(r.pool, {
      queues: this.queues,
      kinds: ALL_KINDS,
      limit: this.limit,
      workerId: this.worker,
      visibilityTimeoutMs: VISIBILITY_MS,
    });
    expect(claimed).toHaveLength(Math.min(this.limit, eligible.length));
    const taken = new Set(claimed.map((c) => c.id));
    // The claim takes the best jobs: higher priority first, then older run_at.
    for (const c of eligible.filter((e) => taken.has(e.id))) {
      for (const e of eligible.filter((x) => !taken.has(x.id))) {
        const better = c.priority > e.priority || (c.priority === e.priority && c.run_at <= e.run_at);
        expect(better, `claimed ${c.id} over ${e.id}`).toBe(true);
      }
    }
    const leases = m.leases.get(this.worker) ?? [];
    for (const c of claimed) {
      const j = m.jobs.get(c.id)!;
      j.status = 'running';
      j.attempts += 1;
      j.lockedBy = this.worker;
      j.expired = false;
      // The lease number grows by one with every claim and never repeats (requeue and release keep it).
      j.leaseSeq += 1;
      expect(c.attempts).toBe(j.attempts);
      expect(c.leaseSeq).toBe(String(j.leaseSeq));
      leases.push({ id: c.id, attempts: c.attempts, leaseSeq: c.leaseSeq });
    }
    m.leases.set(this.worker, leases);
    await checkState(m);
  }
  toString = () => `claim(${this.worker}, ${JSON.stringify(this.queues)}, ${this.limit})`;
}

class Heartbeat implements Cmd {
  constructor(readonly worker: string) {}
  check = (m: Readonly<Model>) => (m.leases.get(this.worker) ?? []).length > 0;
  async run(m: Model, r: Real): Promise<void> {
    const leases = m.leases.get(this.worker)!;
    const predicted = live(m, this.worker, leases);
    m.staleWrites += leases.filter((l) => !holds(m, this.worker, l)).length;
    const held = await queries.results.heartbeat(r.pool, leases, this.worker);
    expect([...held].sort()).toEqual(predicted.map(leaseKey).sort());
    for (const l of predicted) m.jobs.get(l.id)!.expired = false;
    // Like the worker: a lease the heartbeat no longer holds is dropped (its handler is aborted).
    m.leases.set(
      this.worker,
      leases.filter((l) => held.has(leaseKey(l))),
    );
    await checkState(m);
  }
  toString = () => `heartbeat(${this.worker})`;
}

/** The leases a mask picks from a worker's list (at least one when the list is not empty). */
function chooseLeases(leases: Lease[], mask: number): Lease[] {
  const chosen = pick(leases, mask);
  return chosen.length > 0 || leases.length === 0 ? chosen : [leases[mask % leases.length]!];
}

/** Takes the chosen leases out of the worker's list: it has finished with them either way. */
function takeLeases(m: Model, worker: string, mask: number): Lease[] {
  const leases = m.leases.get(worker) ?? [];
  const chosen = chooseLeases(leases, mask);
  m.staleWrites += chosen.filter((l) => !holds(m, worker, l)).length;
  m.leases.set(
    worker,
    leases.filter((l) => !chosen.includes(l)),
  );
  return chosen;
}

class Complete implements Cmd {
  constructor(
    readonly worker: string,
    readonly mask: number,
    readonly policy: 'delete' | 'keep' | 'archive',
  ) {}
  check = (m: Readonly<Model>) => (m.leases.get(this.worker) ?? []).length > 0;
  async run(m: Model, r: Real): Promise<void> {
    const chosen = takeLeases(m, this.worker, this.mask);
    const predicted = live(m, this.worker, chosen);
    const succeeded = chosen.map((l) => ({ ...l, outcome: 'succeeded' as const }));
    const done = await queries.finish.finish(r.pool, succeeded, this.worker, this.policy);
    expect([...done.keys()].sort()).toEqual(predicted.map(leaseKey).sort());
    for (const { id } of predicted) {
      const j = m.jobs.get(id)!;
      if (this.policy === 'keep') {
        Object.assign(j, { status: 'succeeded', lockedBy: null, expired: false, finished: true });
      } else {
        m.jobs.delete(id);
        (this.policy === 'archive' ? m.archived : m.deleted).add(id);
      }
    }
    await checkState(m);
  }
  toString = () => `complete(${this.worker}, mask ${this.mask}, ${this.policy})`;
}

class Fail implements Cmd {
  constructor(
    readonly worker: string,
    readonly mask: number,
    readonly permanent: boolean,
  ) {}
  check = (m: Readonly<Model>) => (m.leases.get(this.worker) ?? []).length > 0;
  async run(m: Model, r: Real): Promise<void> {
    const chosen = takeLeases(m, this.worker, this.mask);
    const error = `error at step ${m.step}`;
    const valid = live(m, this.worker, chosen);
    const written = await queries.finish.finish(
      r.pool,
      chosen.map((l) => ({ ...l, outcome: 'failed' as const, error, permanent: this.permanent })),
      this.worker,
      'delete',
    );
    const outcomes = [...written.values()];
    expect(outcomes.map(leaseKey).sort()).toEqual(valid.map(leaseKey).sort());
    const retried: string[] = [];
    for (const o of outcomes) {
      const j = m.jobs.get(o.id)!;
      const status: Status = this.permanent ? 'failed' : j.attempts >= j.maxAttempts ? 'dead' : 'queued';
      expect(o.outcome).toBe(status === 'queued' ? 'retry' : status);
      Object.assign(j, { status, lockedBy: null, expired: false, lastError: error });
      if (status === 'queued') {
        // The guide's backoff: min(2^attempts s, 1 h) × [0.5, 1.0).
        const baseMs = Math.min(1000 * 2 ** Math.min(j.attempts, 12), 3_600_000);
        expect(o.retryDelayMs).toBeGreaterThanOrEqual(baseMs * 0.5 - 1);
        expect(o.retryDelayMs).toBeLessThan(baseMs + 1);
        j.due = false;
        retried.push(o.id);
      } else {
        expect(o.retryDelayMs).toBe(0);
        j.finished = true;
      }
    }
    // Pin the retries a day ahead so the wall clock cannot make them due during the run.
    if (retried.length > 0) {
      await t.query(`UPDATE ${t.jobs} SET run_at = now() + interval '1 day' WHERE id = ANY($1::bigint[])`, [
        retried,
      ]);
    }
    await checkState(m);
  }
  toString = () => `fail(${this.worker}, mask ${this.mask}, ${this.permanent ? 'permanent' : 'retryable'})`;
}

class Release implements Cmd {
  constructor(
    readonly worker: string,
    readonly mask: number,
  ) {}
  check = (m: Readonly<Model>) => (m.leases.get(this.worker) ?? []).length > 0;
  async run(m: Model, r: Real): Promise<void> {
    const chosen = takeLeases(m, this.worker, this.mask);
    const predicted = live(m, this.worker, chosen);
    const released = await queries.results.release(r.pool, chosen, this.worker);
    expect([...released].sort()).toEqual(predicted.map(leaseKey).sort());
    for (const { id } of predicted) {
      const j = m.jobs.get(id)!;
      Object.assign(j, {
        status: 'queued',
        attempts: j.attempts - 1,
        lockedBy: null,
        expired: false,
        due: true,
      });
    }
    await checkState(m);
  }
  toString = () => `release(${this.worker}, mask ${this.mask})`;
}

class Expire implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => [...m.jobs.values()].some((j) => j.status === 'running');
  async run(m: Model): Promise<void> {
    const running = [...m.jobs.values()].filter((j) => j.status === 'running');
    const j = running[this.index % running.length]!;
    await t.query(`UPDATE ${t.jobs} SET locked_at = locked_at - interval '1 day' WHERE id = $1`, [j.id]);
    j.expired = true;
    await checkState(m);
  }
  toString = () => `expire(#${this.index})`;
}

/** A lease dies and the sweeper takes it back at once: the holder's later writes are stale. */
class Reclaim implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => new Expire(this.index).check(m);
  async run(m: Model, r: Real): Promise<void> {
    await new Expire(this.index).run(m);
    await new Sweep().run(m, r);
  }
  toString = () => `reclaim(#${this.index})`;
}

class Sweep implements Cmd {
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const expired = [...m.jobs.values()].filter((j) => j.status === 'running' && j.expired);
    const dead = expired.filter((j) => j.attempts >= j.maxAttempts);
    const result = await queries.sweep.sweep(r.pool, VISIBILITY_MS, 1000);
    expect(result).toEqual({ requeued: expired.length - dead.length, dead: dead.length });
    for (const j of expired) {
      const out = j.attempts >= j.maxAttempts;
      Object.assign(j, {
        status: out ? 'dead' : 'queued',
        lockedBy: null,
        expired: false,
        lastError: RECLAIMED,
        finished: out,
      });
    }
    await checkState(m);
  }
  toString = () => 'sweep()';
}

class Requeue implements Cmd {
  constructor(
    readonly by: 'status' | 'ids' | 'queue',
    readonly status: ('dead' | 'failed')[],
    readonly mask: number,
    readonly queue: string,
  ) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const finished = [...m.jobs.values()].filter((j) => j.status === 'dead' || j.status === 'failed');
    let matching: ModelJob[];
    let count: number;
    if (this.by === 'status') {
      matching = finished.filter((j) => this.status.includes(j.status as 'dead' | 'failed'));
      count = await queries.requeue.requeue(r.pool, { status: this.status });
    } else if (this.by === 'ids') {
      const ids = pick(sorted(m.jobs.keys()), this.mask);
      matching = finished.filter((j) => ids.includes(j.id));
      count = await queries.requeue.requeue(r.pool, { ids });
    } else {
      matching = finished.filter((j) => j.queue === this.queue);
      count = await queries.requeue.requeue(r.pool, { queue: [this.queue] });
    }
    expect(count).toBe(matching.length);
    for (const j of matching) {
      Object.assign(j, { status: 'queued', attempts: 0, due: true, lastError: null, finished: false });
    }
    await checkState(m);
  }
  toString = () =>
    `requeue(${this.by}: ${this.by === 'status' ? this.status : this.by === 'ids' ? this.mask : this.queue})`;
}

class TimePasses implements Cmd {
  constructor(readonly index: number) {}
  check = (m: Readonly<Model>) => [...m.jobs.values()].some((j) => j.status === 'queued' && !j.due);
  async run(m: Model): Promise<void> {
    const waiting = [...m.jobs.values()].filter((j) => j.status === 'queued' && !j.due);
    const j = waiting[this.index % waiting.length]!;
    await t.query(`UPDATE ${t.jobs} SET run_at = now() - $2 * interval '1 millisecond' WHERE id = $1`, [
      j.id,
      this.index,
    ]);
    j.due = true;
    await checkState(m);
  }
  toString = () => `timePasses(#${this.index})`;
}

// ---- the property ------------------------------------------------------------------------------

const worker = fc.constantFrom(...WORKERS);
const mask = fc.integer({ min: 1, max: 255 });
const commands = [
  fc
    .array(
      fc.record({
        queue: fc.constantFrom(...QUEUES),
        priority: fc.integer({ min: -2, max: 2 }),
        maxAttempts: fc.integer({ min: 1, max: 3 }),
        delayed: fc.boolean(),
      }),
      { minLength: 1, maxLength: 3 },
    )
    .map((items) => new Enqueue(items)),
  fc
    .tuple(worker, fc.subarray([...QUEUES], { minLength: 1 }), fc.integer({ min: 1, max: 4 }))
    .map(([w, q, n]) => new Claim(w, q, n)),
  worker.map((w) => new Heartbeat(w)),
  fc
    .tuple(
      worker,
      mask,
      fc.constantFrom('delete', 'keep', 'archive') as fc.Arbitrary<'delete' | 'keep' | 'archive'>,
    )
    .map(([w, k, p]) => new Complete(w, k, p)),
  fc.tuple(worker, mask, fc.boolean()).map(([w, k, p]) => new Fail(w, k, p)),
  fc.tuple(worker, mask).map(([w, k]) => new Release(w, k)),
  fc.nat({ max: 20 }).map((i) => new Expire(i)),
  fc.constant(new Sweep()),
  fc
    .tuple(
      fc.constantFrom('status', 'ids', 'queue') as fc.Arbitrary<'status' | 'ids' | 'queue'>,
      fc.subarray(['dead', 'failed'] as ('dead' | 'failed')[], { minLength: 1 }),
      fc.integer({ min: 1, max: 2 ** 20 }),
      fc.constantFrom(...QUEUES),
    )
    .map(([by, s, k, q]) => new Requeue(by, s, k, q)),
  fc.nat({ max: 20 }).map((i) => new TimePasses(i)),
  fc.nat({ max: 20 }).map((i) => new Reclaim(i)),
];

/** How often each command above is drawn: claims and lease writes more than the rest. */
const WEIGHTS = [3, 4, 1, 3, 3, 2, 2, 2, 2, 2, 2];

describe('fuzz: state machine', () => {
  it('random interleavings of the job statements keep the model and its invariants', async () => {
    const ran = new Map<string, number>();
    let stale = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(...commands.map((arbitrary, i) => ({ arbitrary, weight: WEIGHTS[i]! }))), {
          minLength: 20,
          maxLength: 80,
          size: 'max',
        }),
        async (cmds) => {
          await t.query(`TRUNCATE ${t.jobs}, ${t.archive}`);
          const model: Model = {
            jobs: new Map(),
            archived: new Set(),
            deleted: new Set(),
            leases: new Map(),
            step: 0,
            staleWrites: 0,
          };
          const real: Real = { pool: t.db.pool };
          // A step whose precondition does not hold in this model is skipped, as fc.modelRun does.
          for (const c of cmds) {
            if (!c.check(model)) continue;
            model.step++;
            const name = c.constructor.name;
            ran.set(name, (ran.get(name) ?? 0) + 1);
            await c.run(model, real);
          }
          stale += model.staleWrites;
          // Nothing left the jobs table but completed jobs (deleted or archived).
          const everSeen = model.jobs.size + model.archived.size + model.deleted.size;
          const [row] = await t.query<{ n: number }>(
            `SELECT (SELECT count(*) FROM ${t.jobs}) + (SELECT count(*) FROM ${t.archive}) AS n`,
          );
          expect(Number(row!.n)).toBe(everSeen - model.deleted.size);
        },
      ),
      { numRuns: Math.ceil(RUNS / 3) },
    );
    const steps = [...ran.values()].reduce((a, b) => a + b, 0);
    console.log(
      `[fuzz] state-machine: ${steps} steps, ${stale} stale-lease writes, ${JSON.stringify(Object.fromEntries(ran))}`,
    );
    expect(stale).toBeGreaterThan(0);
    // Every kind of step ran, many times.
    expect([...ran.keys()].sort()).toEqual([
      'Claim',
      'Complete',
      'Enqueue',
      'Expire',
      'Fail',
      'Heartbeat',
      'Reclaim',
      'Release',
      'Requeue',
      'Sweep',
      'TimePasses',
    ]);
  });

  // Regression test of engine bug 6: the fence was (id, attempts, worker), and requeue resets
  // attempts, so a stale lease from before a requeue matched the same worker's new claim.
  it('a stale lease from before a requeue cannot complete the same worker’s new attempt', async () => {
    await t.query(`TRUNCATE ${t.jobs}, ${t.archive}`);
    const [job] = await queries.insert.many(t.db.pool, [
      { kind: 'k', queue: 'q', payloadJson: '{}', priority: 0, runAt: null, delayMs: null, maxAttempts: 1 },
    ]);
    const [first] = await queries.claim.claim(t.db.pool, {
      queues: ['q'],
      kinds: ALL_KINDS,
      limit: 1,
      workerId: 'w1',
      visibilityTimeoutMs: VISIBILITY_MS,
    });
    // w1 is cut off; its lease dies and the sweeper moves the job to the dead letter.
    await t.query(`UPDATE ${t.jobs} SET locked_at = locked_at - interval '1 day' WHERE id = $1`, [job!.id]);
    expect(await queries.sweep.sweep(t.db.pool, VISIBILITY_MS, 1000)).toEqual({ requeued: 0, dead: 1 });
    // A person requeues it and w1, back again, claims the new attempt.
    expect(await queries.requeue.requeue(t.db.pool, { ids: [job!.id] })).toBe(1);
    const [second] = await queries.claim.claim(t.db.pool, {
      queues: ['q'],
      kinds: ALL_KINDS,
      limit: 1,
      workerId: 'w1',
      visibilityTimeoutMs: VISIBILITY_MS,
    });
    expect(second!.id).toBe(first!.id);
    // The first execution finishes late: its result must change nothing.
    const done = await queries.finish.finish(t.db.pool, [{ ...first!, outcome: 'succeeded' }], 'w1', 'keep');
    expect(done.size).toBe(0);
    expect((await queries.inspect.getById(t.db.pool, job!.id))?.status).toBe('running');
  });
});
