/**
 * Every statement of one schema, grouped by family (one file each): insert,
 * claim (and the limited claim), finish, results, sweep, requeue, inspect,
 * archive, cancel, queues (and their limits), prune. Built once per Skiplock for its schema; holds no connection. The schema is quoted once; every value is a bind
 * parameter; every state change of a running job is guarded by its lease.
 */

import { ArchiveQueries } from './archive.js';
import { CancelQueries } from './cancel.js';
import { ClaimQueries } from './claim.js';
import { LimitedClaimQueries } from './claim-limited.js';
import { DependencyQueries } from './dependencies.js';
import { FinishQueries } from './finish.js';
import { InsertQueries } from './insert.js';
import { InspectQueries } from './inspect.js';
import { ProbeQueries } from './probe.js';
import { ProgressQueries } from './progress.js';
import { PruneQueries } from './prune.js';
import { QueueLimitQueries } from './queue-limits.js';
import { QueueQueries } from './queues.js';
import { RequeueQueries } from './requeue.js';
import { ResultQueries } from './results.js';
import { ScheduleQueries } from './schedules.js';
import { type SchemaNames, schemaNames } from './schema-names.js';
import { SweepQueries } from './sweep.js';
import { WaitingQueries } from './waiting.js';

/** The statements of one schema, by family. */
export class JobQueries {
  readonly names: SchemaNames;
  readonly insert: InsertQueries;
  readonly claim: ClaimQueries;
  /** The claim of queues with a concurrency or rate limit. */
  readonly limitedClaim: LimitedClaimQueries;
  /** Writes the results of attempts: any mix of outcomes in one statement. */
  readonly finish: FinishQueries;
  readonly results: ResultQueries;
  readonly sweep: SweepQueries;
  readonly requeue: RequeueQueries;
  readonly inspect: InspectQueries;
  /** Pages of the archive, by kind, queue, finish time, tags and payload fields. */
  readonly archive: ArchiveQueries;
  /** Not on the jobs table: the LISTEN connection's probe. */
  readonly probe: ProbeQueries;
  /** Statements on the schedules table (cron). */
  readonly schedules: ScheduleQueries;
  readonly cancel: CancelQueries;
  readonly queues: QueueQueries;
  readonly queueLimits: QueueLimitQueries;
  readonly prune: PruneQueries;
  /** Jobs with parents (dependsOn): their insert, their parents and children. */
  readonly dependencies: DependencyQueries;
  readonly progress: ProgressQueries;
  readonly waiting: WaitingQueries;

  constructor(schema: string) {
    this.names = schemaNames(schema);
    this.insert = new InsertQueries(this.names);
    this.claim = new ClaimQueries(this.names);
    this.limitedClaim = new LimitedClaimQueries(this.names);
    this.finish = new FinishQueries(this.names);
    this.results = new ResultQueries(this.names);
    this.sweep = new SweepQueries(this.names);
    this.requeue = new RequeueQueries(this.names);
    this.inspect = new InspectQueries(this.names);
    this.archive = new ArchiveQueries(this.names);
    this.probe = new ProbeQueries(this.names);
    this.schedules = new ScheduleQueries(this.names);
    this.cancel = new CancelQueries(this.names);
    this.queues = new QueueQueries(this.names);
    this.queueLimits = new QueueLimitQueries(this.names);
    this.prune = new PruneQueries(this.names);
    this.dependencies = new DependencyQueries(this.names);
    this.progress = new ProgressQueries(this.names);
    this.waiting = new WaitingQueries(this.names);
  }

  /** The LISTEN/NOTIFY channel of this schema. */
  get channel(): string {
    return this.names.channel;
  }
}
