/**
 * OpenTelemetry tracing through `@opentelemetry/api` only: an `enqueue` span
 * (PRODUCER) around each enqueue call, whose context is stored with its jobs in
 * `trace_context`, and a `process` span (CONSUMER) around each handler attempt,
 * a child of the stored context, active while the handler runs. Spans go to
 * the globally registered tracer provider, and the context is written and read
 * by the globally registered propagator (an SDK's default: W3C trace context
 * and baggage); without them, nothing is recorded or stored.
 *
 * `@opentelemetry/api` is an optional peer dependency: it is loaded only when
 * tracing is turned on, and a missing install is reported with the command
 * that fixes it.
 */
import type * as OpenTelemetry from '@opentelemetry/api';
import type { Attributes, Context, Span, Tracer } from '@opentelemetry/api';
import type { NewJob } from '../db/queries/insert.js';
import type { Job } from '../job/job.js';
import { importOptional } from '../optional-dependency.js';
import type { RunOutcome } from '../worker/executor.js';

type Api = typeof OpenTelemetry;

/** Span attribute names (OpenTelemetry messaging conventions; skiplock's own under `messaging.skiplock`). */
const ATTR = {
  system: 'messaging.system',
  operationName: 'messaging.operation.name',
  operationType: 'messaging.operation.type',
  destination: 'messaging.destination.name',
  messageId: 'messaging.message.id',
  batchCount: 'messaging.batch.message_count',
  errorType: 'error.type',
  kind: 'messaging.skiplock.job.kind',
  attempt: 'messaging.skiplock.job.attempt',
  maxAttempts: 'messaging.skiplock.job.max_attempts',
  duplicate: 'messaging.skiplock.job.duplicate',
  snoozeDelayMs: 'messaging.skiplock.job.snooze_delay_ms',
} as const;

/**
 * The `enqueue` and `process` spans of one Skiplock. Its declaration names no
 * `@opentelemetry/api` type, so the package's types need not be installed.
 */
export interface JobTracing {
  /**
   * Runs `insert` inside an `enqueue` span (a child of the active context) and
   * gives `jobs` the span's propagation fields, to be stored in `trace_context`.
   */
  enqueue<T extends { id: string; duplicate: boolean }>(
    jobs: readonly NewJob[],
    insert: () => Promise<T[]>,
  ): Promise<T[]>;
  /**
   * Runs one attempt inside a `process` span, a child of the stored context
   * (JSON text). An attempt that settled itself (null: a transactional handler's
   * committed or abandoned attempt) ends the span without error.
   */
  process<T extends RunOutcome | null>(
    job: Job,
    stored: string | null | undefined,
    attempt: () => Promise<T>,
  ): Promise<T>;
}

class OpenTelemetryTracing implements JobTracing {
  readonly #api: Api;
  readonly #tracer: Tracer;
  /** The last stored context read and what it extracted to (jobs of one enqueue call share it). */
  #lastStored: string | undefined;
  #lastParent: Context;

  constructor(api: Api) {
    this.#api = api;
    // A tracer from the global provider follows a provider registered later.
    this.#tracer = api.trace.getTracer('skiplock');
    this.#lastParent = api.ROOT_CONTEXT;
  }

  /**
   * Runs `insert` inside an `enqueue` span (a child of the active context) and
   * gives `jobs` the span's propagation fields, to be stored in
   * `trace_context`. A single job's id becomes `messaging.message.id`.
   */
  async enqueue<T extends { id: string; duplicate: boolean }>(
    jobs: readonly NewJob[],
    insert: () => Promise<T[]>,
  ): Promise<T[]> {
    const api = this.#api;
    let span: Span;
    let active: Context;
    try {
      span = this.#tracer.startSpan('enqueue', {
        kind: api.SpanKind.PRODUCER,
        attributes: enqueueAttributes(jobs),
      });
      active = api.trace.setSpan(api.context.active(), span);
      const carrier: Record<string, string> = {};
      api.propagation.inject(active, carrier);
      // Nothing to store when no propagator is registered or the span is invalid (no SDK).
      if (Object.keys(carrier).length > 0) {
        const traceContext = JSON.stringify(carrier);
        for (const job of jobs) job.traceContext = traceContext;
      }
    } catch {
      // Tracing never stops an enqueue: an SDK or propagator that throws leaves it untraced.
      for (const job of jobs) job.traceContext = undefined;
      return insert();
    }
    let enqueued: T[];
    try {
      enqueued = await api.context.with(active, insert);
    } catch (error) {
      endSpan(span, () => this.#fail(span, error, String(error)));
      throw error;
    }
    endSpan(span, () => {
      if (enqueued.length !== 1) return;
      span.setAttribute(ATTR.messageId, enqueued[0]!.id);
      if (enqueued[0]!.duplicate) span.setAttribute(ATTR.duplicate, true);
    });
    return enqueued;
  }

  /**
   * Runs one attempt inside a `process` span, a child of the context stored
   * with the job (`stored`, JSON text; a root span when there is none or it
   * cannot be read), with the span active so that spans the handler starts
   * are its children. A failed attempt's span records the exception and has
   * status ERROR; a snoozed attempt is not an error.
   */
  process<T extends RunOutcome | null>(
    job: Job,
    stored: string | null | undefined,
    attempt: () => Promise<T>,
  ): Promise<T> {
    const api = this.#api;
    let parent: Context;
    let span: Span;
    try {
      parent = this.#parentOf(stored);
      span = this.#tracer.startSpan(
        'process',
        {
          kind: api.SpanKind.CONSUMER,
          // Literal keys: V8 builds such an object from a template, faster than computed keys.
          attributes: {
            'messaging.system': 'skiplock',
            'messaging.operation.name': 'process',
            'messaging.operation.type': 'process',
            'messaging.destination.name': job.queue,
            'messaging.message.id': job.id,
            'messaging.skiplock.job.kind': job.kind,
            'messaging.skiplock.job.attempt': job.attempts,
            'messaging.skiplock.job.max_attempts': job.maxAttempts,
          },
        },
        parent,
      );
    } catch {
      // Tracing never stops a job: an SDK or propagator that throws leaves it untraced.
      return attempt();
    }
    // No SDK and no stored context: a no-op span with the API's invalid context
    // (compared by identity, which is cheaper than validating it), and no trace
    // to record or continue.
    if (span.spanContext() === api.INVALID_SPAN_CONTEXT) return attempt();
    // runJob never rejects.
    const settled = (outcome: T): T => {
      endSpan(span, () => {
        if (outcome === null || outcome.ok) return;
        if (outcome.snoozeDelayMs !== undefined) span.setAttribute(ATTR.snoozeDelayMs, outcome.snoozeDelayMs);
        else this.#fail(span, outcome.thrown, outcome.error);
      });
      return outcome;
    };
    return api.context.with(api.trace.setSpan(parent, span), attempt).then(settled);
  }

  /**
   * The context a stored one extracts to; never the worker loop's own context
   * (that is whatever context started the worker). Contexts are immutable, so
   * the last one is reused for the next job of the same enqueue call.
   */
  #parentOf(stored: string | null | undefined): Context {
    const api = this.#api;
    if (typeof stored !== 'string') return api.ROOT_CONTEXT;
    if (stored === this.#lastStored) return this.#lastParent;
    // The text of a jsonb value is always JSON; what it holds is anyone's (plain SQL).
    const carrier: unknown = JSON.parse(stored);
    let parent = api.ROOT_CONTEXT;
    try {
      if (isCarrier(carrier)) parent = api.propagation.extract(api.ROOT_CONTEXT, carrier);
    } catch {
      // A propagator that throws on odd input leaves the job a root span.
    }
    this.#lastStored = stored;
    this.#lastParent = parent;
    return parent;
  }

  /** Records `thrown` on `span` and marks it failed; `described` stands for a thrown non-Error. */
  #fail(span: Span, thrown: unknown, described: string): void {
    const error = thrown instanceof Error;
    span.recordException(error ? thrown : described);
    span.setStatus({ code: this.#api.SpanStatusCode.ERROR, message: error ? thrown.message : described });
    span.setAttribute(ATTR.errorType, error ? thrown.name : '_OTHER');
  }
}

/**
 * Records the outcome on `span` and ends it. A throwing SDK loses the span,
 * never the enqueue's or the attempt's result.
 */
function endSpan(span: Span, record: () => void): void {
  try {
    record();
    span.end();
  } catch {
    // The span is lost; the result is not.
  }
}

/** The attributes of an `enqueue` span: a batch of one queue or kind says so; a mixed batch names neither. */
function enqueueAttributes(jobs: readonly NewJob[]): Attributes {
  const first = jobs[0]!;
  const attributes: Attributes = {
    [ATTR.system]: 'skiplock',
    [ATTR.operationName]: 'enqueue',
    [ATTR.operationType]: 'send',
  };
  if (jobs.every((j) => j.queue === first.queue)) attributes[ATTR.destination] = first.queue;
  if (jobs.every((j) => j.kind === first.kind)) attributes[ATTR.kind] = first.kind;
  if (jobs.length > 1) attributes[ATTR.batchCount] = jobs.length;
  return attributes;
}

/** A stored context as the propagator reads it: a JSON object (of strings, when skiplock wrote it). */
function isCarrier(value: unknown): value is Record<string, string> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Loads `@opentelemetry/api` and makes the spans of a Skiplock.
 *
 * @throws {MissingDependencyError} when `@opentelemetry/api` is not installed.
 */
export async function loadTracing(): Promise<JobTracing> {
  const api = await importOptional<Api>('@opentelemetry/api', {
    packageName: '@opentelemetry/api',
    neededFor: 'skiplock tracing',
    alternative: 'turn tracing off',
  });
  return new OpenTelemetryTracing(api);
}
