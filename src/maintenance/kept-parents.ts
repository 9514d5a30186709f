/**
 * Parents kept for their children, a service of the maintenance loop: a job
 * that succeeds under the 'delete' or 'archive' success policy while some of
 * its children have not started stays in the jobs table as `succeeded`, with
 * its result, so that `getJob` and the children's `parents()` read it. Each
 * turn applies the policy (delete, or move to the archive) to those whose
 * children have all left `waiting` and `queued`, in batches of
 * {@link KEPT_PARENTS_BATCH_LIMIT}.
 */
import type { JobQueries } from '../db/queries/jobs.js';
import type { MaintenanceService } from './maintainer.js';

/** Parents locked and settled per statement. */
export const KEPT_PARENTS_BATCH_LIMIT = 1000;

/** Batches in one turn of the maintenance loop; a larger backlog waits for the next turns. */
const BATCHES_PER_TURN = 10;

/** The service; it runs every `intervalMs` milliseconds (the worker's sweep interval). */
export function keptParentsService(queries: JobQueries, options: { intervalMs: number }): MaintenanceService {
  return {
    name: 'parents',
    intervalMs: options.intervalMs,
    async run(client) {
      for (let batch = 0; batch < BATCHES_PER_TURN; batch++) {
        const { locked } = await queries.dependencies.settleKeptParents(client, KEPT_PARENTS_BATCH_LIMIT);
        if (locked < KEPT_PARENTS_BATCH_LIMIT) break;
      }
    },
  };
}
