/**
 * The LISTEN connection's loop on a fake clock, its connections injected: the
 * pause before each reconnect, and the probe that replaces a connection that
 * hears nothing. What a real connection hears, and how it survives a database
 * restart, is tested on PostgreSQL (reconnect, listen-probe, deaf-listen).
 */
import { EventEmitter } from 'node:events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { WakeUp } from '../../src/db/wake-up.js';
import { type ListenClient, Notifier, type NotifierDeps } from '../../src/worker/notifier.js';
import { type FakeClock, fakeClock } from '../support/fake-clock.js';

/** A connection that refuses, or accepts and then holds until the test breaks it. */
class FakeListenClient extends EventEmitter {
  readonly queries: string[] = [];
  constructor(readonly accept: boolean) {
    super();
  }
  async connect(): Promise<void> {
    if (!this.accept) throw new Error('connection refused');
  }
  async query(text: string): Promise<void> {
    this.queries.push(text);
  }
  async end(): Promise<void> {}
  /** The server hangs up. */
  breakOff(): void {
    this.emit('error', new Error('terminating connection due to administrator command'));
  }
  /** A message on `channel`. */
  notify(channel: string, message: Partial<WakeUp>): void {
    this.emit('notification', { channel, payload: JSON.stringify(message) });
  }
}

beforeEach(() => {
  // No jitter: each pause is its full backoff (100 ms doubling to 5 s).
  vi.spyOn(Math, 'random').mockReturnValue(1);
});
afterEach(() => {
  vi.restoreAllMocks();
});

/** A notifier whose n-th connection attempt (from 1) is accepted when `accepts(n)`. */
function notifier(clock: FakeClock, accepts: (n: number) => boolean, deps: Partial<NotifierDeps> = {}) {
  const startedAt = clock.monotonic();
  const clients: FakeListenClient[] = [];
  const attemptsAt: number[] = [];
  const events: string[] = [];
  const n = new Notifier(
    {},
    'wake',
    {
      onWakeUp: (message) => events.push(`wake:${message.queue}`),
      onListening: () => events.push(`listening@${clock.monotonic() - startedAt}`),
      onError: (error) => events.push(`error:${error.message}`),
      newClient: () => {
        attemptsAt.push(clock.monotonic() - startedAt);
        const client = new FakeListenClient(accepts(attemptsAt.length));
        clients.push(client);
        return client as unknown as ListenClient;
      },
      ...deps,
    },
    clock,
  );
  return { n, clients, attemptsAt, events };
}

describe('Notifier', () => {
  it('reconnects after a pause of 100 ms doubling to 5 s, and start() resolves after the first attempt', async () => {
    const clock = fakeClock();
    const { n, attemptsAt, events } = notifier(clock, () => false);
    await n.start();
    expect(attemptsAt).toEqual([0]);
    await clock.tick(16_300);
    expect(attemptsAt).toEqual([0, 100, 300, 700, 1500, 3100, 6300, 11_300, 16_300]);
    expect(events).toHaveLength(9);
    expect(new Set(events)).toEqual(new Set(['error:connection refused']));
    await n.stop();
    expect(n.state).toBe('stopped');
    await clock.tick(60_000);
    expect(attemptsAt).toHaveLength(9);
    expect(clock.pending()).toBe(0);
  });

  it('listens once connected, passes its messages on, and after a lost connection starts the backoff over', async () => {
    const clock = fakeClock();
    const { n, clients, attemptsAt, events } = notifier(clock, (attempt) => attempt === 3 || attempt === 4);
    await n.start();
    await clock.tick(300);
    expect(attemptsAt).toEqual([0, 100, 300]);
    expect(clients[2]?.queries).toEqual(['LISTEN "wake"']);
    clients[2]?.notify('wake', { type: 'insert', queue: 'mail' });
    clients[2]?.notify('other', { type: 'insert', queue: 'other' });
    await clock.tick(1_000);
    clients[2]?.breakOff();
    await clock.tick(99);
    expect(attemptsAt).toEqual([0, 100, 300]);
    await clock.tick(1);
    expect(attemptsAt).toEqual([0, 100, 300, 1400]);
    expect(events).toEqual([
      'error:connection refused',
      'error:connection refused',
      'listening@300',
      'wake:mail',
      'error:terminating connection due to administrator command',
      'listening@1400',
    ]);
    await n.stop();
    expect(clock.pending()).toBe(0);
  });

  it('replaces a connection whose probe does not come back in time, and probes a heard one every interval', async () => {
    const clock = fakeClock();
    const probes: number[] = [];
    const deaf: number[] = [];
    let heard = 0;
    const { n, clients, attemptsAt } = notifier(clock, () => true, {
      probeIntervalMs: 1_000,
      probeTimeoutMs: 500,
      sendProbe: async (token) => {
        probes.push(clock.monotonic());
        // The first connection hears its probes until 2 s; the second hears them all.
        const client = clients.at(-1);
        if (clients.length > 1 || clock.monotonic() < 2_000)
          client?.notify('wake', { type: 'probe', queue: token });
      },
      onHeard: () => heard++,
      onDeaf: (timeoutMs) => deaf.push(timeoutMs),
    });
    await n.start();
    await clock.tick(0);
    expect(probes).toEqual([0]);
    expect(heard).toBe(1);
    await clock.tick(2_000);
    expect(probes).toEqual([0, 1000, 2000]);
    expect(heard).toBe(2);
    await clock.tick(499);
    expect(deaf).toEqual([]);
    await clock.tick(1);
    expect(deaf).toEqual([500]);
    // The backoff was reset by the heard probes: the next connection comes 100 ms later and hears.
    await clock.tick(100);
    expect(attemptsAt).toEqual([0, 2600]);
    expect(probes).toEqual([0, 1000, 2000, 2600]);
    expect(heard).toBe(3);
    await n.stop();
    expect(clock.pending()).toBe(0);
  });
});
