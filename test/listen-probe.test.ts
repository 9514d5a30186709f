/**
 * The LISTEN self-probe on a half-open connection: a listener whose socket
 * stays open but carries nothing is found deaf within two probe intervals
 * (plus the probe's deadline), warned about once, and replaced; jobs keep
 * running meanwhile.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { useFileDatabase } from './support/file-database.js';
import { type NetProxy, startNetProxy } from './support/net-proxy.js';

const { db, skiplock } = useFileDatabase();
let proxy: NetProxy;

beforeAll(async () => {
  const server = new URL(db.url);
  proxy = await startNetProxy({ host: server.hostname, port: Number(server.port || 5432) });
});
afterAll(async () => {
  await proxy?.close();
});

const PROBE_INTERVAL_MS = 300;
const PROBE_TIMEOUT_MS = 2_000;

describe('a half-open LISTEN connection', () => {
  it('is detected within two probe intervals, warned about once, and replaced', async () => {
    const viaProxy = new URL(db.url);
    viaProxy.host = `127.0.0.1:${proxy.port}`;
    const ran: string[] = [];
    const warnings: { at: number; message: string }[] = [];
    const worker = skiplock.worker({
      handleSignals: false,
      pollIntervalMs: 500,
      listenConnectionString: viaProxy.toString(),
      listenProbeIntervalMs: PROBE_INTERVAL_MS,
      handlers: { half_open: (job) => void ran.push(job.id) },
    });
    worker.on('worker:warning', (message) => warnings.push({ at: performance.now(), message }));
    worker.on('error', () => {});
    const listening = nextEvent(worker, 'worker:listen');
    await worker.start();
    await listening;

    const replaced = nextEvent(worker, 'worker:listen', 20_000);
    const frozenAt = performance.now();
    proxy.freeze();
    const warning = await waitFor(
      () => warnings.find((w) => w.message.includes('probe')),
      15_000,
      'a warning about the probe',
    );
    const detectedMs = warning.at - frozenAt;
    console.log(`half-open listener detected after ${Math.round(detectedMs)} ms`);
    // The freeze may fall just after a probe: the next one is due an interval later, then its deadline runs.
    expect(detectedMs).toBeLessThan(2 * PROBE_INTERVAL_MS + PROBE_TIMEOUT_MS + 1_000);
    expect(warning.message).toContain(`did not hear its own probe within ${PROBE_TIMEOUT_MS} ms`);

    // Meanwhile the poll finds jobs.
    const polled = await skiplock.enqueue('half_open', {});
    await waitFor(() => ran.includes(polled.id), 10_000, 'a job found by polling');

    // The replacement listens through a fresh (forwarded) connection and hears again.
    await replaced;
    const woken = await skiplock.enqueue('half_open', {});
    await waitFor(() => ran.includes(woken.id), 10_000, 'a job after the listener came back');
    await worker.stop();
    expect(warnings.filter((w) => w.message.includes('probe'))).toHaveLength(1);
  });
});
