/** Messages between a chaos test and its worker processes (IPC of child_process.fork). */

/** How a worker process is configured (the `CHAOS_CONFIG` environment variable, as JSON). */
export interface WorkerProcessConfig {
  url: string;
  schema: string;
  /** application_name of the worker's pool and LISTEN connection; `<appName>-effects` for the handlers' pool. */
  appName: string;
  queues: string[];
  concurrency: number;
  pollIntervalMs: number;
  visibilityTimeoutMs: number;
  heartbeatIntervalMs?: number;
  sweepIntervalMs: number;
  shutdownTimeoutMs: number;
  /** The worker's client-side statement deadline (its default when absent). */
  statementTimeoutMs?: number;
  /** How often the LISTEN connection is probed (its default when absent). */
  listenProbeIntervalMs?: number;
  onSuccess: 'delete' | 'keep' | 'archive';
  handleSignals: boolean;
  /** Extra kinds handled by the sleeping handler (payload {@link SleepPayload}). */
  sleepKinds?: string[];
}

/** Payload of a sleeping kind: record the delivery, then sleep `ms`, honouring the signal when `cooperative`. */
export interface SleepPayload {
  ms: number;
  cooperative: boolean;
}

/** Parent → child: settle a blocked handler. */
export type ParentMessage = { type: 'finish'; id: string; outcome: 'ok' | 'permanent' };

/** Child → parent: what the worker did. */
export type ChildMessage =
  | { type: 'ready'; workerId: string; pid: number }
  | { type: 'listen' }
  | { type: 'started'; id: string; attempts: number }
  /** A blocked handler was told to finish and returns (or throws) now: its result is about to be written. */
  | { type: 'finishing'; id: string; attempts: number }
  | { type: 'finish:unknown'; id: string }
  | JobMessage<'job:start' | 'job:success' | 'job:stale' | 'job:released' | 'job:cancelled' | 'lease:lost'>
  | { type: 'job:failure'; id: string; attempts: number; status: string }
  | { type: 'sweep'; requeued: number; dead: number }
  | { type: 'error'; source: string; code: string; message: string }
  | { type: 'warning'; message: string }
  | { type: 'stop' };

/** One message type per job event, so that `Extract<ChildMessage, { type: 'job:stale' }>` finds it. */
type JobMessage<T extends string> = T extends string ? { type: T; id: string; attempts: number } : never;
