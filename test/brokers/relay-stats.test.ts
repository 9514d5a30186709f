/**
 * relayStats(), the relay gauges and the dashboard's relayed queues: which
 * queues are relayed (the relays table), the jobs waiting and their lag, the
 * jobs in flight, and a stopped relay leaving no trace.
 */
import { describe, expect, it } from 'vitest';
import { natsTarget } from '../../src/brokers/nats.js';
import { createDashboard } from '../../src/dashboard/index.js';
import type { Relay } from '../../src/index.js';
import { createMetrics } from '../../src/telemetry/metrics.js';
import { runCli } from '../cli/cli-process.js';
import { useTestDatabase } from '../support/fixture.js';
import { NATS_URL, until } from '../support/nats.js';
import { brokerTest } from './support.js';

const t = useTestDatabase();
const b = brokerTest(t);

/** A relay whose broker cannot be reached (nothing listens on port 1): it registers, and never claims. */
function stuckRelay(queues: string[]): Relay {
  return b.relay({
    target: natsTarget({ servers: 'nats://127.0.0.1:1', stream: 'unreachable' }),
    queues,
    retryDelayMs: 50,
  });
}

const HOUR_MS = 3_600_000;

/** This test's relays table, quoted. */
const relaysTable = () => t.jobs.replace(/\.jobs$/, '.relays');

/** Enqueues `n` jobs of `queue` that became due an hour ago. */
async function dueJobs(queue: string, n: number): Promise<string[]> {
  const jobs = await t.skiplock.enqueueMany(
    Array.from({ length: n }, (_, i) => ({ kind: 'k', payload: { i }, queue })),
  );
  const ids = jobs.map((job) => job.id);
  await t.query(`UPDATE ${t.jobs} SET run_at = now() - interval '1 hour' WHERE id = ANY($1::bigint[])`, [
    ids,
  ]);
  return ids;
}

describe('relayStats()', () => {
  it('lists nothing while no relay runs', async () => {
    await dueJobs('relayed', 2);
    expect(await t.skiplock.relayStats()).toEqual([]);
  });

  it('counts the waiting jobs of the queues a running relay relays, their lag and the jobs in flight', async () => {
    const ids = await dueJobs('relayed', 3);
    await t.skiplock.enqueue('k', {}, { queue: 'relayed', runAt: new Date(Date.now() + HOUR_MS) });
    await dueJobs('other', 2);
    const relay = stuckRelay(['relayed', 'idle']);
    relay.start();
    await until(async () => (await t.skiplock.relayStats()).length === 2, 'the relay registered');
    // As if the relay had claimed one: running, locked_by the relay.
    await t.query(
      `UPDATE ${t.jobs} SET status = 'running', locked_at = now(), locked_by = $2 WHERE id = $1`,
      [ids[0], relay.id],
    );
    const stats = await t.skiplock.relayStats();
    expect(stats.map(({ lagMs, ...rest }) => rest)).toEqual([
      { queue: 'idle', relays: 1, waiting: 0, inFlight: 0, published: 0 },
      { queue: 'relayed', relays: 1, waiting: 2, inFlight: 1, published: 0 },
    ]);
    expect(stats[0]!.lagMs).toBeNull();
    expect(stats[1]!.lagMs).toBeGreaterThanOrEqual(HOUR_MS);
    expect(stats[1]!.lagMs).toBeLessThan(HOUR_MS + 10 * 60_000);
  });

  it('two relays of one queue count as two; a stopped relay leaves no row', async () => {
    await dueJobs('relayed', 1);
    const first = stuckRelay(['relayed']);
    const second = stuckRelay(['relayed']);
    first.start();
    second.start();
    await until(async () => (await t.skiplock.relayStats())[0]?.relays === 2, 'both relays registered');
    await first.stop();
    expect((await t.skiplock.relayStats()).map((s) => [s.queue, s.relays, s.waiting])).toEqual([
      ['relayed', 1, 1],
    ]);
    await second.stop();
    expect(await t.skiplock.relayStats()).toEqual([]);
    expect((await t.query(`SELECT count(*)::int AS n FROM ${relaysTable()}`))[0]!.n).toBe(0);
  });

  it("a killed relay's registration stops counting once it expires", async () => {
    await dueJobs('relayed', 1);
    const relay = stuckRelay(['relayed']);
    relay.start();
    await until(async () => (await t.skiplock.relayStats()).length === 1, 'the relay registered');
    await t.query(`UPDATE ${relaysTable()} SET expires_at = now() - interval '1 second'`);
    expect(await t.skiplock.relayStats()).toEqual([]);
  });

  it('counts what a working relay published (as of its heartbeat) and nothing waits once it is done', async () => {
    const stream = b.stream('relay_stats');
    await dueJobs('relayed', 3);
    b.relay({ target: natsTarget({ servers: NATS_URL, stream }), queues: ['relayed'] }).start();
    await until(async () => (await t.jobCount("queue = 'relayed'")) === 0, 'relayed jobs removed');
    await until(
      async () => (await t.skiplock.relayStats())[0]?.published === 3,
      'the heartbeat counted them',
    );
    expect(await t.skiplock.relayStats()).toEqual([
      { queue: 'relayed', relays: 1, waiting: 0, lagMs: null, inFlight: 0, published: 3 },
    ]);
  });
});

describe('the relay gauges, the dashboard and skiplock stats', () => {
  it('report the lag, the waiting and the in-flight jobs per relayed queue', async () => {
    await dueJobs('relayed', 2);
    const relay = stuckRelay(['relayed']);
    const metrics = await createMetrics(t.skiplock);
    metrics.observeRelay(relay);
    relay.start();
    await until(async () => (await t.skiplock.relayStats()).length === 1, 'the relay registered');
    const text = await metrics.text();
    expect(text).toContain('skiplock_relay_waiting_jobs{queue="relayed"} 2');
    expect(text).toContain('skiplock_relay_in_flight_jobs{queue="relayed"} 0');
    const lag = /skiplock_relay_lag_seconds\{queue="relayed"\} ([0-9.e+]+)/.exec(text);
    expect(lag).not.toBeNull();
    expect(Number(lag![1])).toBeGreaterThanOrEqual(3600);

    const res = await createDashboard(t.skiplock, { refreshIntervalMs: 0 }).request('/');
    expect(res.status).toBe(200);
    const body = await res.text();
    const row = body.slice(body.indexOf('data-relayed-queue="relayed"'));
    expect(row).toMatch(/data-field="waiting">2</);
    expect(row).toMatch(/data-field="in-flight">0</);
    expect(row).toMatch(/data-field="lag">1 h /);

    const cli = await runCli(['stats', '--database-url', t.db.url, '--schema', t.schema]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stdout).toMatch(/^relayed queue\s+relays\s+waiting\s+lag\s+in flight\s+published$/m);
    expect(cli.stdout).toMatch(/^relayed\s+1\s+2\s+1\.0 h\s+0\s+0$/m);
  });
});
