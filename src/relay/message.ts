/**
 * The message a relayed job becomes: its JSON body (the job as a handler sees
 * it, plus what a broker-side worker needs to write it back) and its message
 * id, which stays the same when a crashed relay publishes the job again.
 */
import { createHash } from 'node:crypto';
import type { Queryable } from '../db/executor.js';
import type { RelayQueries, RelayRow } from '../db/queries/relay.js';
import type { Job } from '../job/job.js';

/** A relayed job, as published (dates as ISO 8601 text). */
export interface RelayedJob {
  id: string;
  kind: string;
  queue: string;
  payload: unknown;
  priority: number;
  runAt: string;
  createdAt: string;
  /** Attempts made before the job was relayed (0 unless it ran in PostgreSQL before). */
  attempts: number;
  maxAttempts: number;
  /** Whether `maxAttempts` was left out by the producer (a kind's `maxAttempts` then applies). */
  maxAttemptsDefault: boolean;
  /** The job's lease number when it was relayed; part of the message id. */
  leaseSeq: string;
  /** The job's attempt history so far, as stored. */
  errors: unknown[];
  /** The job's tags, written back with it if it ends dead or failed; absent when it has none. */
  tags?: string[];
  /** The job's group key; absent when it has none. A key's jobs are published in order. */
  groupKey?: string;
  /** The database and schema it came from (see {@link relayNamespace}). */
  namespace: string;
  /** The job's message id: `<namespace>.<id>.<leaseSeq>.<created>` (see {@link relayMessageId}); consumers deduplicate by it. */
  messageId: string;
  /**
   * Times a broker-side worker published the job again (a retry or a snooze);
   * the broker's message id is `<messageId>.<hop>` then. Absent on the relay's message.
   */
  hop?: number;
  /** Not to run before this instant (ISO 8601; a retry's backoff or a snooze). */
  notBefore?: string;
}

/** The broker's message id of `job` (the job's own, then one per hop). */
export function brokerMessageId(job: RelayedJob): string {
  return job.hop ? `${job.messageId}.${job.hop}` : job.messageId;
}

/**
 * The namespace of one database and schema: a short hash of the cluster's
 * system identifier, the database's name and the schema, so that two databases
 * relaying to one stream never share a message id.
 */
export function relayNamespace(systemIdentifier: string, database: string, schema: string): string {
  return createHash('sha256')
    .update(`${systemIdentifier}\u0000${database}\u0000${schema}`)
    .digest('hex')
    .slice(0, 16);
}

/**
 * The namespace of `schema` in the database `db` reaches (one round trip for the
 * database's identity): what the relay stamps on its messages, and what a
 * broker-side worker compares them with before it writes a job back.
 */
export async function readNamespace(queries: RelayQueries, db: Queryable, schema: string): Promise<string> {
  const { systemIdentifier, database } = await queries.database(db);
  return relayNamespace(systemIdentifier, database, schema);
}

/**
 * The message id of a relayed job: the job id under its namespace; the lease
 * number, which a requeue after a dead letter moves on (so the job is relayed
 * again, not dropped as a duplicate); and the job's creation instant
 * (milliseconds since the epoch), so that a job that reuses an id (the schema
 * dropped and made again, or its id sequence restarted) is not dropped as a
 * duplicate of the earlier job of that id.
 */
export function relayMessageId(namespace: string, id: string, leaseSeq: string, createdAt: Date): string {
  return `${namespace}.${id}.${leaseSeq}.${createdAt.getTime()}`;
}

/** The message of a claimed row. */
export function toRelayedJob(row: RelayRow, namespace: string): RelayedJob {
  return {
    id: row.id,
    kind: row.kind,
    queue: row.queue,
    payload: row.payload,
    priority: row.priority,
    runAt: row.run_at.toISOString(),
    createdAt: row.created_at.toISOString(),
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    maxAttemptsDefault: row.max_attempts_default,
    leaseSeq: row.lease_seq,
    errors: Array.isArray(row.errors) ? row.errors : [],
    ...(row.tags && row.tags.length > 0 ? { tags: row.tags } : {}),
    ...(row.group_key !== null ? { groupKey: row.group_key } : {}),
    namespace,
    messageId: relayMessageId(namespace, row.id, row.lease_seq, row.created_at),
  };
}

/** The body bytes of a message. */
export function encodeRelayedJob(job: RelayedJob): Uint8Array {
  return Buffer.from(JSON.stringify(job), 'utf8');
}

/**
 * Reads a message body.
 *
 * @throws {SyntaxError} when the body is not a relayed job's JSON.
 */
export function decodeRelayedJob(body: Uint8Array): RelayedJob {
  const job = JSON.parse(Buffer.from(body).toString('utf8')) as RelayedJob;
  if (typeof job?.id !== 'string' || typeof job.kind !== 'string' || typeof job.messageId !== 'string')
    throw new SyntaxError('not a relayed skiplock job');
  return job;
}

/** The job as a handler sees it, on its attempt number `attempts`. */
export function toHandlerJob(job: RelayedJob, attempts: number, maxAttempts: number): Job {
  return {
    id: job.id,
    kind: job.kind,
    queue: job.queue,
    payload: job.payload,
    priority: job.priority,
    runAt: new Date(job.runAt),
    attempts,
    maxAttempts,
    createdAt: new Date(job.createdAt),
  };
}
