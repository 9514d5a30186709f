/**
 * A worker's LISTEN side: routes each message on the channel to the part of
 * the worker it concerns (limits, wake-ups of its queues and resume to the
 * claim loop, cancel/pause to the cancellation), runs the
 * self-probe, and warns once per spell of a deaf listener (the poll finds jobs
 * meanwhile). Any role that can connect can send on the channel, so every
 * message is a hint: what it leads to is read from the database, and a flood
 * of them is coalesced (see the claim loop and the cancellation).
 */
import type pg from 'pg';
import type { JobQueries } from '../db/queries/jobs.js';
import type { Cancellation } from './cancellation.js';
import type { ClaimLoop } from './claim-loop.js';
import type { EventReporter } from './event-reporter.js';
import { listenClientConfig, Notifier } from './notifier.js';
import type { ResolvedWorkerOptions } from './options.js';
import { deafListenerWarning } from './server-check.js';

/** The parts of a worker its messages go to. */
export interface WorkerNotifierDeps {
  clientConfig: pg.ClientConfig;
  options: ResolvedWorkerOptions;
  queries: JobQueries;
  /** The worker's pool, which sends the probes. */
  pool: Pick<pg.Pool, 'query'>;
  claimLoop: ClaimLoop;
  cancellation: Cancellation;
  events: EventReporter;
}

/** The notifier of one worker, its messages routed. */
export function workerNotifier(deps: WorkerNotifierDeps): Notifier {
  const { options, queries, claimLoop, cancellation, events } = deps;
  /** The LISTEN connection missed a probe and no probe has come back since (warned once). */
  let deaf = false;
  const listenConfig = listenClientConfig(deps.clientConfig, options.listenConnectionString);
  return new Notifier(listenConfig, queries.channel, {
    onWakeUp: (message) => {
      if (message.type === 'limits') return claimLoop.onLimitsMessage(message.queue);
      if (cancellation.onMessage(message)) return;
      if (message.queue === null || options.queues.includes(message.queue)) {
        claimLoop.onWakeUp(message.queue);
        claimLoop.hint(message.delayMs);
      }
    },
    onListening: () => {
      events.emit('worker:listen');
      claimLoop.wake();
    },
    onError: (error) => events.error(error, 'notifier'),
    sendProbe: (token) => queries.probe.send(deps.pool, token),
    probeIntervalMs: options.listenProbeIntervalMs,
    onHeard: () => {
      deaf = false;
    },
    onDeaf: (timeoutMs) => {
      if (deaf) return;
      deaf = true;
      events.warn(deafListenerWarning(timeoutMs, options.pollIntervalMs));
    },
  });
}
