/**
 * Cancel and pause on the worker's side. A cancel message (or a heartbeat that
 * finds a cancel requested) names held jobs: a running one has its handler's
 * signal aborted with a {@link CancelledError}, which ends the attempt at once
 * (its result then ends the job `cancelled`); a buffered one is given back,
 * which ends it `cancelled` too. A pause message gives back the buffered jobs
 * of that queue, so that nothing of a paused queue starts here.
 */
import { leaseKey } from '../db/queries/job-row.js';
import type { WakeUp } from '../db/wake-up.js';
import { CancelledError } from '../errors.js';
import type { Execution, Executions } from './executions.js';

/** Why buffered jobs are given back: their cancel, or their queue was paused. */
export type GiveBackReason = 'cancel' | 'pause';

/** Applies cancel and pause messages to one worker's executions. */
export class Cancellation {
  readonly #executions: Executions;
  readonly #queues: readonly string[];
  readonly #giveBack: (executions: Execution[], reason: GiveBackReason) => void;

  /**
   * @param queues - the worker's queues (pause messages of other queues are ignored).
   * @param giveBack - releases buffered jobs (the release statement ends cancelled ones `cancelled`).
   */
  constructor(
    executions: Executions,
    queues: readonly string[],
    giveBack: (executions: Execution[], reason: GiveBackReason) => void,
  ) {
    this.#executions = executions;
    this.#queues = queues;
    this.#giveBack = giveBack;
  }

  /**
   * Acts on a control message; returns true when it was one (cancel, pause)
   * and so wakes no claim. Resume and every other type are plain wake-ups.
   */
  onMessage(message: WakeUp): boolean {
    if (message.type === 'cancel') {
      if (message.ids && message.ids.length > 0) {
        const ids = new Set(message.ids);
        this.#cancel((e) => ids.has(e.id));
      }
      return true;
    }
    if (message.type === 'pause') {
      const { queue } = message;
      if (queue !== null && this.#queues.includes(queue)) {
        const taken = this.#executions.takeBufferedWhere((e) => e.job.queue === queue);
        if (taken.length > 0) this.#giveBack(taken, 'pause');
      }
      return true;
    }
    return false;
  }

  /** The heartbeat found these held jobs' cancel requested. */
  onCancelRequested(held: readonly Execution[]): void {
    const keys = new Set(held.map(leaseKey));
    this.#cancel((e) => keys.has(leaseKey(e)));
  }

  #cancel(match: (e: Execution) => boolean): void {
    const buffered = this.#executions.takeBufferedWhere(match);
    if (buffered.length > 0) this.#giveBack(buffered, 'cancel');
    for (const e of this.#executions.running()) {
      if (e.state === 'running' && match(e)) e.control?.abort(new CancelledError(e.id));
    }
  }
}
