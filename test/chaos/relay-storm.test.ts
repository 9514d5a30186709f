/**
 * Relay storm: two relay processes move a queue to the broker and two
 * broker-side worker processes run an idempotent handler (its effect keyed by
 * the job's id, ON CONFLICT DO NOTHING), while producers enqueue in
 * transactions they commit or roll back at random and the parent SIGKILLs
 * random relays and workers and starts their replacements. Then:
 *
 * - every committed job has its effect exactly once (lost 0);
 * - no rolled-back job was ever delivered to a handler;
 * - the jobs table is empty: every committed job was relayed.
 *
 * Replay a run's choices with `CHAOS_SEED=<the printed seed>`.
 */
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { brokerTest, effectLedger } from '../brokers/support.js';
import { waitFor } from '../support/database.js';
import { useTestDatabase } from '../support/fixture.js';
import { NATS_URL } from '../support/nats.js';
import { exited, forkScript, killedAfterTest, sent } from '../support/processes.js';
import { RABBITMQ_URL } from '../support/rabbitmq.js';
import { chaosSeed, SeededRandom } from './support/random.js';

const t = useTestDatabase();
const b = brokerTest(t);

const QUEUE = 'relay-storm';
const PRODUCERS = 3;
/** Transactions each producer runs, committing about two in three. */
const TRANSACTIONS = 40;
const RELAYS = 2;
const WORKERS = 2;
const KILLS = 8;

const brokers = [
  { name: 'NATS', env: () => ({ NATS_URL, NATS_STREAM: b.stream('relay_storm') }) },
  { name: 'RabbitMQ', env: () => ({ AMQP_URL: RABBITMQ_URL, AMQP_QUEUE: b.rabbitmqPrefix([QUEUE]) }) },
];

describe.each(brokers)('chaos: relay storm through $name', (broker) => {
  it('relays and workers SIGKILLed at random while producers commit and roll back: every committed job has its effect once, no rolled-back one is delivered', async () => {
    const seed = chaosSeed();
    console.log(`[chaos] relay-storm (${broker.name}): seed=${seed} (replay with CHAOS_SEED=${seed})`);
    const random = new SeededRandom(seed);
    const brokerEnv = { ...broker.env(), BROKER_QUEUE: QUEUE };
    const ledger = await effectLedger(t);

    const startRelay = async () => {
      const child = killedAfterTest(
        t,
        forkScript('../processes/relay-crash.ts', {
          DATABASE_URL: t.url,
          SKIPLOCK_SCHEMA: t.schema,
          RELAY_QUEUE: QUEUE,
          RELAY_BATCH_SIZE: '20',
          RELAY_CRASH_AFTER_BATCHES: '0',
          // The relays sweep: a killed relay's batch goes back once its 1 s lease ran out.
          RELAY_SWEEP_INTERVAL_MS: '500',
          ...brokerEnv,
        }),
      );
      await sent(child, 'ready');
      return child;
    };
    const fleet: { kind: 'relay' | 'worker'; child: ChildProcess }[] = [];
    const start = async (kind: 'relay' | 'worker') => {
      const child = kind === 'relay' ? await startRelay() : await ledger.startWorker(brokerEnv);
      fleet.push({ kind, child });
    };
    await Promise.all([
      ...Array.from({ length: RELAYS }, () => start('relay')),
      ...Array.from({ length: WORKERS }, () => start('worker')),
    ]);

    const committed: string[] = [];
    const rolledBack: string[] = [];
    const producer = async () => {
      for (let i = 0; i < TRANSACTIONS; i++) {
        const commit = random.chance(0.65);
        const client = await t.db.pool.connect();
        try {
          await client.query('BEGIN');
          const jobs = await t.skiplock.enqueueMany(
            Array.from({ length: random.int(1, 10) }, (_, n) => ({
              kind: 'effect',
              payload: { n, commit },
              queue: QUEUE,
            })),
            { client },
          );
          await client.query(commit ? 'COMMIT' : 'ROLLBACK');
          (commit ? committed : rolledBack).push(...jobs.map((job) => job.id));
        } finally {
          client.release();
        }
        await sleep(random.int(20, 150));
      }
    };
    const producing = Promise.all(Array.from({ length: PRODUCERS }, producer));

    const killed = { relay: 0, worker: 0 };
    const replacements: Promise<void>[] = [];
    for (let k = 0; k < KILLS; k++) {
      await sleep(random.int(300, 1200));
      // A process still starting is not picked: it joins the fleet once it runs. Two at least run.
      if (fleet.length <= 2) await Promise.all(replacements);
      const victim = random.pick(fleet);
      fleet.splice(fleet.indexOf(victim), 1);
      victim.child.kill('SIGKILL');
      expect(await exited(victim.child)).toBe('SIGKILL');
      killed[victim.kind]++;
      replacements.push(start(victim.kind));
    }
    await Promise.all([producing, ...replacements]);

    await waitFor(
      async () => (await ledger.effects()) >= committed.length && (await t.jobCount()) === 0,
      60_000,
      `${committed.length} effects and every job relayed`,
      async () => ({ effects: await ledger.effects(), jobs: await t.jobCount() }),
    );
    // Deliveries that were in flight settle before they are counted.
    await Promise.all(
      fleet
        .filter((p) => p.kind === 'worker')
        .map(async ({ child }) => {
          child.kill('SIGTERM');
          expect(await exited(child)).toBe('SIGTERM');
        }),
    );
    const deliveries = await ledger.deliveries();
    console.log(
      `[chaos] relay-storm (${broker.name}): committed=${committed.length} rolledBack=${rolledBack.length} ` +
        `deliveries=${deliveries} relaysKilled=${killed.relay} workersKilled=${killed.worker}`,
    );
    expect(committed.length).toBeGreaterThan(0);
    expect(rolledBack.length).toBeGreaterThan(0);
    expect(await ledger.effectIds()).toEqual([...committed].sort());
    expect(await ledger.deliveriesOf(rolledBack)).toBe(0);
    expect(deliveries).toBeGreaterThanOrEqual(committed.length);
    expect(killed.relay + killed.worker).toBe(KILLS);
  });
});
