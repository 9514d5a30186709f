/**
 * Listening on a schema's wake-up channel in tests. To show that something
 * woke nobody without sleeping, `settle()` sends a marker through the server
 * and returns what arrived before it: notifications are delivered in commit
 * order, so anything the earlier transactions sent is already in.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { channelName, quoteIdent } from '../../src/db/sql.js';
import { parseWakeUp, type WakeUp } from '../../src/db/wake-up.js';
import { TEST_SCHEMA } from './database.js';

/** A LISTEN connection on a schema's channel that keeps what it hears. */
export interface WakeUpListener {
  /** Resolves with the wake-ups received since the last settle, once a marker sent now has come back. */
  settle(timeoutMs?: number): Promise<WakeUp[]>;
  /** Resolves with the first wake-up (since the last settle) that `match` accepts. */
  next(match: (w: WakeUp) => boolean, timeoutMs?: number): Promise<WakeUp>;
  close(): Promise<void>;
}

/** Starts listening on the wake-up channel of `schema` in the database at `url`. */
export async function listenForWakeUps(url: string, schema = TEST_SCHEMA): Promise<WakeUpListener> {
  const channel = channelName(schema);
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  let received: { raw: string; wakeUp: WakeUp }[] = [];
  const waiters = new Set<() => void>();
  client.on('notification', (message) => {
    if (message.channel !== channel) return;
    received.push({ raw: message.payload ?? '', wakeUp: parseWakeUp(message.payload) });
    for (const w of waiters) w();
  });
  await client.query(`LISTEN ${quoteIdent(channel)}`);

  const waitUntil = (found: () => boolean, timeoutMs: number, what: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!found()) return;
        clearTimeout(timer);
        waiters.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(
          new Error(
            `no ${what} within ${timeoutMs} ms; received: ${JSON.stringify(received.map((r) => r.raw))}`,
          ),
        );
      }, timeoutMs);
      waiters.add(check);
      check();
    });

  return {
    async settle(timeoutMs = 10_000) {
      const marker = `marker:${randomBytes(6).toString('hex')}`;
      await client.query('SELECT pg_notify($1, $2)', [channel, marker]);
      await waitUntil(() => received.some((r) => r.raw === marker), timeoutMs, `marker ${marker}`);
      const index = received.findIndex((r) => r.raw === marker);
      const before = received.slice(0, index).map((r) => r.wakeUp);
      received = received.slice(index + 1);
      return before;
    },
    async next(match, timeoutMs = 10_000) {
      await waitUntil(() => received.some((r) => match(r.wakeUp)), timeoutMs, 'matching wake-up');
      return received.find((r) => match(r.wakeUp))!.wakeUp;
    },
    async close() {
      await client.end().catch(() => {});
    },
  };
}
