/**
 * The contract every benchmarked system implements, so that a scenario reads
 * the same for skiplock and its peers.
 */

/** Where one system's jobs live for one scenario; also what a forked worker process needs to attach. */
export interface Target {
  /** The system's name, as in {@link SYSTEM_NAMES}. */
  system: string;
  /** A PostgreSQL URL of a database made for this scenario (unused by bullmq). */
  databaseUrl: string;
  /** A name unique to this scenario: the bullmq queue name, the pg-boss queue name. */
  namespace: string;
}

/** What a handler sees: the payload the benchmark enqueued. */
export interface BenchPayload {
  /** Index of the job within the scenario, used to find its enqueue time. */
  i: number;
}

/**
 * skiplock's claim options beyond its defaults, for its tuned drain rows; the
 * peers ignore them (they run with their own documented settings).
 */
export interface SkiplockTuning {
  prefetch?: number;
  batchSize?: number;
}

/** Options of a benchmark worker. */
export interface WorkerSpec {
  /** Handlers running at once in this process. */
  concurrency: number;
  /** skiplock only: options beyond its defaults (none: defaults). */
  tuning?: SkiplockTuning;
  /** Runs once per job; resolves when the job is done. */
  handler(payload: BenchPayload): Promise<void> | void;
}

/** A running worker. */
export interface RunningWorker {
  stop(): Promise<void>;
}

/** One system attached to one target. */
export interface SystemClient {
  /** Enqueues one job with one call of the system's producer API. */
  enqueueOne(payload: BenchPayload): Promise<void>;
  /** Enqueues many jobs with one call of the system's bulk API. */
  enqueueMany(payloads: BenchPayload[]): Promise<void>;
  /** Starts a worker in this process. */
  startWorker(spec: WorkerSpec): Promise<RunningWorker>;
  /** Removes every job, so that the next run starts from an empty queue. */
  purge(): Promise<void>;
  /** Jobs due or running (not those scheduled later). */
  remaining(): Promise<number>;
  /** Size of the storage the jobs live in, and its dead tuples, when the system uses PostgreSQL. */
  tableStats(): Promise<{ bytes: number; deadTuples: number } | undefined>;
  /** Ends this client's connections. */
  close(): Promise<void>;
}

/** A benchmarked system: makes and removes targets and attaches clients to them. */
export interface BenchSystem {
  readonly name: string;
  /** Whether jobs live in PostgreSQL (table size and snapshot scenarios apply). */
  readonly postgres: boolean;
  /** The settings used, as printed in the report. */
  readonly settings: string;
  /** Whether the system can run here (bullmq needs Redis). */
  available(): Promise<boolean>;
  /** Makes fresh storage (a database, or a Redis key prefix) and installs the system's schema. */
  create(databaseUrl: string, namespace: string): Promise<Target>;
  /** Attaches a client to a target made by {@link BenchSystem.create} (in this or another process). */
  attach(target: Target): Promise<SystemClient>;
  /** Removes what {@link BenchSystem.create} made. */
  destroy(target: Target): Promise<void>;
}
