/**
 * The frame of a test's worker process (no vitest here: it runs in the
 * child). Configured by environment: SKIPLOCK_URL, SKIPLOCK_SCHEMA (default
 * `skiplock`) and WORKER_OPTIONS (JSON, spread into the worker's options).
 */
import pg from 'pg';
import { type Handlers, type JobMap, Skiplock, type Worker } from '../../src/index.js';
import { STOP } from './events.js';

/** The process's connection to the test's database. */
export interface ProcessDatabase<Jobs extends JobMap> {
  /** 4 connections; errors of idle clients ignored (the parent may restart the server). */
  pool: pg.Pool;
  schema: string;
  skiplock: Skiplock<Jobs>;
}

/** A pool and a Skiplock on SKIPLOCK_URL in SKIPLOCK_SCHEMA. */
export function databaseFromEnv<Jobs extends JobMap = JobMap>(): ProcessDatabase<Jobs> {
  const schema = process.env.SKIPLOCK_SCHEMA ?? 'skiplock';
  const pool = new pg.Pool({ connectionString: process.env.SKIPLOCK_URL, max: 4 });
  pool.on('error', () => {});
  return { pool, schema, skiplock: new Skiplock<Jobs>({ pool, schema }) };
}

/**
 * Starts a worker with `handlers`, the default signal handling and
 * WORKER_OPTIONS; ignores its `error` events, ends the pool once it stopped,
 * and sends 'ready' to the parent once it runs.
 */
export async function startWorkerFromEnv<Jobs extends JobMap>(
  { pool, skiplock }: ProcessDatabase<Jobs>,
  handlers: Handlers<Jobs>,
): Promise<Worker> {
  const worker = skiplock.worker({
    handleSignals: true,
    ...JSON.parse(process.env.WORKER_OPTIONS ?? '{}'),
    handlers,
  });
  worker.on('error', () => {});
  worker.on(STOP, () => {
    void pool.end();
  });
  await worker.start();
  process.send?.('ready');
  return worker;
}
