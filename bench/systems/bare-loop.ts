/**
 * The bare loop as a drain: skiplock's own claim and fenced delete (the
 * engine's statements, as in the ceiling scenario) in a loop on a few
 * connections, with no library around them, started in a forked worker
 * process like every drain row, its connections opened at the start signal.
 * Only the drain scenario runs it, beside skiplock's rows at the same claim
 * size; it is not one of the compared systems.
 */
import pg from 'pg';
import { claimAndComplete, engineStatements } from './raw-pg.js';
import { skiplockSystem } from './skiplock.js';
import type { BenchPayload, BenchSystem, SystemClient, Target, WorkerSpec } from './system.js';

/** Connection counts the drain scenario runs the bare loop with, one claim-then-delete cycle each. */
export const BARE_LOOP_CONNECTIONS = [2, 4] as const;
/** How long a connection that found no job waits before claiming again (milliseconds). */
const IDLE_POLL_MS = 5;

export const bareLoopSystem: BenchSystem = {
  name: 'bare-loop',
  postgres: true,
  settings:
    "skiplock's claim and fenced DELETE in a loop, one cycle per connection with the worker's session settings, no library",
  available: async () => true,
  create: (serverUrl, namespace) => skiplockSystem.create(serverUrl, namespace),
  destroy: (target) => skiplockSystem.destroy(target),

  async attach(target: Target): Promise<SystemClient> {
    const client = await skiplockSystem.attach(target);
    return { ...client, startWorker: (spec) => startBareLoop(target, spec) };
  },
};

/** `spec.concurrency` connections, each claiming `spec.tuning.batchSize` jobs at a time. */
async function startBareLoop(target: Target, spec: WorkerSpec) {
  const batch = spec.tuning?.batchSize ?? 510;
  const queries = await engineStatements();
  const clients = await Promise.all(
    Array.from({ length: spec.concurrency }, async () => {
      const client = new pg.Client({
        connectionString: target.databaseUrl,
        options: '-c synchronous_commit=off',
      });
      await client.connect();
      return client;
    }),
  );
  let stopped = false;
  const loops = clients.map(async (client, k) => {
    while (!stopped) {
      const n = await claimAndComplete(queries, client, batch, `bare-${k}`, (payload) =>
        spec.handler(payload as BenchPayload),
      );
      if (n === 0) await new Promise((resolve) => setTimeout(resolve, IDLE_POLL_MS));
    }
  });
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
      await Promise.all(clients.map((c) => c.end()));
    },
  };
}
