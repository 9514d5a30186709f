/** A job as a worker holds it, for unit tests without a database. */
import type { Job } from '../../src/job/job.js';

/** Job 1 of kind `k`, first attempt of 20, due now, with `overrides`. */
export function sampleJob(overrides: Partial<Job> = {}): Job {
  return {
    id: '1',
    kind: 'k',
    queue: 'default',
    payload: {},
    priority: 0,
    runAt: new Date(),
    attempts: 1,
    maxAttempts: 20,
    createdAt: new Date(),
    ...overrides,
  };
}
