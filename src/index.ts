export type { Queryable, QueryResultLike } from './db/executor.js';
export { TransactionMisuseError } from './db/guarded-client.js';
export type { OnParentFailure, ParentJob } from './db/queries/dependencies.js';
export { DEFAULT_SCHEMA } from './db/sql.js';
export {
  CancelledError,
  DatabaseError,
  JobNotFoundError,
  JobTimeoutError,
  LeaseLostError,
  MissingDependencyError,
  PermanentError,
  SchemaVersionError,
  ShutdownError,
  SkiplockError,
  type SkiplockErrorCode,
  SnoozeError,
  UnknownKindError,
  ValidationError,
  WaitTimeoutError,
} from './errors.js';
export type { AttemptError } from './job/attempt-history.js';
export { BACKOFF_CAP_MS, backoffDelayMs } from './job/backoff.js';
export { DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, DEFAULT_VISIBILITY_TIMEOUT_MS } from './job/defaults.js';
export {
  JOB_STATUSES,
  type Job,
  type JobLink,
  type JobMap,
  type JobRecord,
  type JobStatus,
  type JobSummary,
} from './job/job.js';
export {
  type ConflictMode,
  DEFAULT_UNIQUE_STATES,
  type EnqueuedJob,
  type UniqueOptions,
} from './job/unique.js';
export type { Retention } from './maintenance/pruner.js';
export type { SweepResult } from './maintenance/sweeper.js';
export type { MigrateResult } from './migrations/migrator.js';
export type { RelayedJob } from './relay/message.js';
export {
  createRelay,
  Relay,
  type RelayEvents,
  type RelayMetrics,
  type RelayOptions,
  type RelayPublishResult,
  type RelayTarget,
} from './relay/relay.js';
export type { CatchUp } from './schedule/cron.js';
export type { Overlap, ScheduleInfo, ScheduleOptions } from './schedule/schedule-options.js';
export {
  type ArchivedJobSummary,
  type CancelCounts,
  type CancelFilter,
  type ClientOption,
  type EnqueueManyItem,
  type EnqueueOptions,
  type JobOptions,
  type ListArchivedJobsFilter,
  type ListJobsFilter,
  type PruneFilter,
  type PruneResult,
  type QueueInfo,
  type QueueLimits,
  type QueueLimitsOptions,
  type QueueStats,
  type RateLimit,
  type RelayQueueStats,
  type RequeueFilter,
  Skiplock,
  type SkiplockConfig,
} from './skiplock.js';
export type { FailureOutcomeInfo, SuccessInfo, WorkerErrorSource, WorkerEvents } from './worker/events.js';
export type { Middleware } from './worker/executor.js';
export type {
  Backoff,
  BatchContext,
  BatchHandlerDefinition,
  BatchOutcome,
  Handler,
  HandlerContext,
  HandlerDefinition,
  HandlerEntry,
  HandlerPolicy,
  TransactionalHandler,
  TransactionalHandlerContext,
  TransactionalHandlerDefinition,
} from './worker/handler-definition.js';
export type { Handlers, SuccessPolicy, WorkerOptions } from './worker/options.js';
export { Worker } from './worker/worker.js';
export type { JobLogLine } from './workflow/job-output.js';
export type { JobOutcome, WaitForOptions } from './workflow/job-waiter.js';
