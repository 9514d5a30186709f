/**
 * OpenTelemetry tracing: the `enqueue` span's context stored with the job,
 * the `process` span a child of it with the handler running inside it, failed
 * attempts recorded, and nothing at all with tracing off. Spans go to the SDK's
 * in-memory exporter, registered globally as an application's SDK would.
 */

import { once } from 'node:events';
import {
  context,
  propagation,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Job, type JobMap, PermanentError, Skiplock, type WorkerOptions } from '../src/index.js';
import { waitFor } from './support/database.js';
import { nextEvent } from './support/events.js';
import { TEST_SHUTDOWN_TIMEOUT_MS, useTestDatabase } from './support/fixture.js';
import { exited, forkScript } from './support/processes.js';

const t = useTestDatabase();
const exporter = new InMemorySpanExporter();
const contextManager = new AsyncLocalStorageContextManager();
const tracer = () => trace.getTracer('tracing-test');
const PROVIDER = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
/** The SDK's default propagator: trace context and baggage. */
const SDK_PROPAGATOR = new CompositePropagator({
  propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()],
});

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(PROVIDER);
  propagation.setGlobalPropagator(SDK_PROPAGATOR);
});
afterEach(() => {
  exporter.reset();
});
afterAll(() => {
  trace.disable();
  propagation.disable();
  context.disable();
});

/** A Skiplock with tracing on, on this test's schema; closed after the test. */
function tracedSkiplock(): Skiplock {
  const skiplock = new Skiplock({ pool: t.db.pool, schema: t.schema, tracing: true });
  t.defer(() => skiplock.close());
  return skiplock;
}

function tracedWorker(skiplock: Skiplock, options: WorkerOptions<JobMap>): ReturnType<Skiplock['worker']> {
  return t.track(
    skiplock.worker({ handleSignals: false, shutdownTimeoutMs: TEST_SHUTDOWN_TIMEOUT_MS, ...options }),
  );
}

/** Runs `fn` inside a new span `name`; returns its result and the span's context. */
async function inSpan<T>(name: string, fn: () => Promise<T>): Promise<{ result: T; span: SpanContext }> {
  return tracer().startActiveSpan(name, async (span: Span) => {
    try {
      return { result: await fn(), span: span.spanContext() };
    } finally {
      span.end();
    }
  });
}

function spansNamed(name: string): ReadableSpan[] {
  return exporter.getFinishedSpans().filter((s) => s.name === name);
}

async function waitForSpans(name: string, count: number): Promise<ReadableSpan[]> {
  return waitFor(
    () => {
      const spans = spansNamed(name);
      return spans.length >= count ? spans : undefined;
    },
    10_000,
    `${count} '${name}' span(s)`,
    () => exporter.getFinishedSpans().map((s) => s.name),
  );
}

async function storedContext(id: string, table = t.jobs): Promise<unknown> {
  const [row] = await t.query<{ trace_context: unknown }>(
    `SELECT trace_context FROM ${table} WHERE id = $1`,
    [id],
  );
  return row?.trace_context;
}

function traceparent(span: SpanContext): string {
  return `00-${span.traceId}-${span.spanId}-01`;
}

describe('tracing on', () => {
  it('stores the enqueue span context with the job, and runs the handler in a child process span', async () => {
    const skiplock = tracedSkiplock();
    const { result: job, span: request } = await inSpan('http request', () =>
      skiplock.enqueue('send_email', { to: 'a@example.com' }, { queue: 'emails' }),
    );

    const [enqueue] = await waitForSpans('enqueue', 1);
    expect(enqueue!.kind).toBe(SpanKind.PRODUCER);
    expect(enqueue!.spanContext().traceId).toBe(request.traceId);
    expect(enqueue!.parentSpanContext?.spanId).toBe(request.spanId);
    expect(enqueue!.attributes).toEqual({
      'messaging.system': 'skiplock',
      'messaging.operation.name': 'enqueue',
      'messaging.operation.type': 'send',
      'messaging.destination.name': 'emails',
      'messaging.skiplock.job.kind': 'send_email',
      'messaging.message.id': job.id,
    });
    expect(await storedContext(job.id)).toEqual({ traceparent: traceparent(enqueue!.spanContext()) });

    let seen: { active: SpanContext | undefined; child: SpanContext } | undefined;
    const worker = tracedWorker(skiplock, {
      queues: ['emails'],
      handlers: {
        send_email: async () => {
          const active = trace.getActiveSpan()?.spanContext();
          const child = tracer().startSpan('smtp send');
          child.end();
          seen = { active, child: child.spanContext() };
        },
      },
    });
    const succeeded = nextEvent(worker, 'job:success');
    await worker.start();
    await succeeded;

    const [process] = await waitForSpans('process', 1);
    expect(process!.kind).toBe(SpanKind.CONSUMER);
    expect(process!.spanContext().traceId).toBe(request.traceId);
    expect(process!.parentSpanContext?.spanId).toBe(enqueue!.spanContext().spanId);
    expect(process!.status.code).toBe(SpanStatusCode.UNSET);
    expect(process!.attributes).toEqual({
      'messaging.system': 'skiplock',
      'messaging.operation.name': 'process',
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'emails',
      'messaging.message.id': job.id,
      'messaging.skiplock.job.kind': 'send_email',
      'messaging.skiplock.job.attempt': 1,
      'messaging.skiplock.job.max_attempts': 20,
    });
    expect(seen?.active?.spanId).toBe(process!.spanContext().spanId);
    const [handlerSpan] = await waitForSpans('smtp send', 1);
    expect(handlerSpan!.spanContext().traceId).toBe(request.traceId);
    expect(handlerSpan!.parentSpanContext?.spanId).toBe(process!.spanContext().spanId);
  });

  it("records a failed attempt's exception and sets its span's status to error", async () => {
    const skiplock = tracedSkiplock();
    const { result: job, span: request } = await inSpan('http request', () =>
      skiplock.enqueue('charge', { cents: 100 }, { maxAttempts: 2 }),
    );
    const worker = tracedWorker(skiplock, {
      handlers: {
        charge: () => {
          throw new PermanentError('card declined');
        },
      },
    });
    const failed = nextEvent(worker, 'job:failure');
    await worker.start();
    await failed;

    const [process] = await waitForSpans('process', 1);
    expect(process!.spanContext().traceId).toBe(request.traceId);
    expect(process!.status).toEqual({ code: SpanStatusCode.ERROR, message: 'card declined' });
    expect(process!.attributes['error.type']).toBe('PermanentError');
    expect(process!.attributes['messaging.message.id']).toBe(job.id);
    expect(process!.events.map((e) => e.name)).toEqual(['exception']);
    expect(process!.events[0]!.attributes).toMatchObject({
      'exception.message': 'card declined',
      'exception.stacktrace': expect.stringContaining('PermanentError: card declined'),
    });
  });

  it('gives each job of a batch its own process span, ended by its own outcome', async () => {
    const skiplock = tracedSkiplock();
    const { result: jobs, span: request } = await inSpan('http request', () =>
      skiplock.enqueueMany([
        { kind: 'bulk', payload: { ok: true } },
        { kind: 'bulk', payload: { ok: false } },
      ]),
    );
    const worker = tracedWorker(skiplock, {
      handlers: {
        bulk: {
          maxBatchSize: 2,
          maxWaitMs: 10_000,
          handleBatch: (batch: Job<'bulk', { ok: boolean }>[]) =>
            batch.map((job) => (job.payload.ok ? undefined : new PermanentError('refused'))),
        },
      },
    });
    await worker.start();
    const spans = await waitForSpans('process', 2);
    const byId = new Map(spans.map((s) => [s.attributes['messaging.message.id'], s]));
    const [ok, refused] = jobs.map((job) => byId.get(job.id)!);
    expect(ok!.spanContext().traceId).toBe(request.traceId);
    expect(ok!.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(refused!.status).toEqual({ code: SpanStatusCode.ERROR, message: 'refused' });
  });

  it('traces every attempt as a child of the same enqueue span', async () => {
    const skiplock = tracedSkiplock();
    const job = await skiplock.enqueue('flaky', {});
    let runs = 0;
    const worker = tracedWorker(skiplock, {
      handlers: {
        flaky: {
          backoff: 0,
          handle: () => {
            runs++;
            if (runs === 1) throw new Error('first attempt fails');
          },
        },
      },
    });
    const succeeded = nextEvent(worker, 'job:success');
    await worker.start();
    await succeeded;

    const [enqueue] = await waitForSpans('enqueue', 1);
    const spans = await waitForSpans('process', 2);
    const byAttempt = new Map(spans.map((s) => [s.attributes['messaging.skiplock.job.attempt'], s]));
    expect([...byAttempt.keys()].sort()).toEqual([1, 2]);
    for (const span of spans) {
      expect(span.parentSpanContext?.spanId).toBe(enqueue!.spanContext().spanId);
      expect(span.attributes['messaging.message.id']).toBe(job.id);
    }
    expect(byAttempt.get(1)!.status.code).toBe(SpanStatusCode.ERROR);
    expect(byAttempt.get(2)!.status.code).toBe(SpanStatusCode.UNSET);
  });

  it('gives every job of enqueueMany the context of one enqueue span', async () => {
    const skiplock = tracedSkiplock();
    const { result: jobs } = await inSpan('import', () =>
      skiplock.enqueueMany([
        { kind: 'resize', payload: { n: 1 } },
        { kind: 'resize', payload: { n: 2 }, queue: 'images' },
        { kind: 'resize', payload: { n: 3 }, uniqueKey: 'resize-3' },
      ]),
    );
    const [enqueue] = await waitForSpans('enqueue', 1);
    expect(enqueue!.attributes).toEqual({
      'messaging.system': 'skiplock',
      'messaging.operation.name': 'enqueue',
      'messaging.operation.type': 'send',
      'messaging.skiplock.job.kind': 'resize',
      'messaging.batch.message_count': 3,
    });
    const expected = { traceparent: traceparent(enqueue!.spanContext()) };
    for (const job of jobs) expect(await storedContext(job.id)).toEqual(expected);
  });

  it('stores the context with a unique job; a duplicate keeps the first one', async () => {
    const skiplock = tracedSkiplock();
    const first = await skiplock.enqueue('report', {}, { uniqueKey: 'daily' });
    const second = await skiplock.enqueue('report', {}, { uniqueKey: 'daily' });
    expect(second).toMatchObject({ id: first.id, duplicate: true });

    const spans = await waitForSpans('enqueue', 2);
    expect(spans.map((s) => s.attributes['messaging.skiplock.job.duplicate'])).toEqual([undefined, true]);
    expect(await storedContext(first.id)).toEqual({ traceparent: traceparent(spans[0]!.spanContext()) });
  });

  it('keeps the context when a succeeded job is archived', async () => {
    const skiplock = tracedSkiplock();
    const job = await skiplock.enqueue('archive_me', {});
    const stored = await storedContext(job.id);
    expect(stored).toEqual({ traceparent: expect.stringMatching(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/) });
    const worker = tracedWorker(skiplock, { onSuccess: 'archive', handlers: { archive_me: () => {} } });
    const succeeded = nextEvent(worker, 'job:success');
    await worker.start();
    await succeeded;
    expect(await storedContext(job.id, t.archive)).toEqual(stored);
  });

  it('records a failed enqueue and stores nothing', async () => {
    const skiplock = tracedSkiplock();
    await t.query(`ALTER TABLE ${t.jobs} ADD CONSTRAINT no_bad_kind CHECK (kind <> 'bad')`);
    await expect(skiplock.enqueue('bad', {})).rejects.toMatchObject({ code: 'DATABASE', sqlState: '23514' });
    const [enqueue] = await waitForSpans('enqueue', 1);
    expect(enqueue!.status.code).toBe(SpanStatusCode.ERROR);
    expect(enqueue!.events.map((e) => e.name)).toEqual(['exception']);
    expect(await t.jobCount()).toBe(0);
  });

  it('runs jobs without a readable context (plain SQL) in root process spans', async () => {
    const skiplock = tracedSkiplock();
    const rows = await t.query<{ id: string }>(
      `INSERT INTO ${t.jobs} (kind, payload, trace_context)
       VALUES ('from_sql', '{}', NULL), ('from_sql', '{}', '"text"'), ('from_sql', '{}', '[1]'),
              ('from_sql', '{}', '{"traceparent": "not a traceparent"}'), ('from_sql', '{}', '{"baggage": 5}')
       RETURNING id`,
    );
    const active = new Map<string, string | undefined>();
    const worker = tracedWorker(skiplock, {
      handlers: {
        from_sql: (job: Job) => {
          active.set(job.id, trace.getActiveSpan()?.spanContext().spanId);
        },
      },
    });
    await worker.start();
    const spans = await waitForSpans('process', 5);
    expect(spans.map((s) => s.attributes['messaging.message.id']).sort()).toEqual(
      rows.map((r) => r.id).sort(),
    );
    for (const span of spans) {
      expect(span.parentSpanContext).toBeUndefined();
      expect(span.status.code).toBe(SpanStatusCode.UNSET);
      expect(active.get(String(span.attributes['messaging.message.id']))).toBe(span.spanContext().spanId);
    }
    await waitFor(async () => (await t.jobCount()) === 0, 10_000, 'the jobs deleted on success');
  });

  it('runs a job in a root span when the propagator throws on its stored context', async () => {
    const skiplock = tracedSkiplock();
    const job = await skiplock.enqueue('odd', {});
    propagation.disable();
    propagation.setGlobalPropagator({
      inject: () => {},
      extract: () => {
        throw new Error('this propagator cannot read that');
      },
      fields: () => [],
    });
    t.defer(() => {
      propagation.disable();
      propagation.setGlobalPropagator(SDK_PROPAGATOR);
    });
    const worker = tracedWorker(skiplock, { handlers: { odd: () => {} } });
    const succeeded = nextEvent(worker, 'job:success');
    await worker.start();
    await succeeded;
    const [process] = await waitForSpans('process', 1);
    expect(process!.parentSpanContext).toBeUndefined();
    expect(process!.attributes['messaging.message.id']).toBe(job.id);
  });

  it('loses the spans, never the job, when the SDK throws', async () => {
    const skiplock = tracedSkiplock();
    const throwing = new BasicTracerProvider({
      spanProcessors: [
        {
          onStart: () => {},
          onEnd: () => {
            throw new Error('exporter bug');
          },
          forceFlush: async () => {},
          shutdown: async () => {},
        },
      ],
    });
    trace.disable();
    trace.setGlobalTracerProvider(throwing);
    t.defer(() => {
      trace.disable();
      trace.setGlobalTracerProvider(PROVIDER);
    });
    const job = await skiplock.enqueue('fragile', {});
    expect(await storedContext(job.id)).toEqual({ traceparent: expect.stringMatching(/^00-/) });
    const worker = tracedWorker(skiplock, { handlers: { fragile: () => {} } });
    const succeeded = nextEvent(worker, 'job:success');
    await worker.start();
    const [done] = await succeeded;
    expect(done.id).toBe(job.id);
    expect(await t.jobCount()).toBe(0);
  });

  it('refuses a tracing option that is not a boolean', () => {
    expect(() => new Skiplock({ pool: t.db.pool, schema: t.schema, tracing: 'yes' as never })).toThrow(
      'invalid tracing: must be a boolean',
    );
  });
});

describe('tracing on without an SDK', () => {
  it('stores no context and runs the handler as without tracing', async () => {
    trace.disable();
    propagation.disable();
    context.disable();
    t.defer(() => {
      context.setGlobalContextManager(contextManager.enable());
      trace.setGlobalTracerProvider(PROVIDER);
      propagation.setGlobalPropagator(SDK_PROPAGATOR);
    });
    const skiplock = tracedSkiplock();
    const job = await skiplock.enqueue('plain', {});
    expect(await storedContext(job.id)).toBeNull();
    let active: Span | undefined;
    const worker = tracedWorker(skiplock, {
      handlers: {
        plain: () => {
          active = trace.getActiveSpan();
        },
      },
    });
    const succeeded = nextEvent(worker, 'job:success');
    await worker.start();
    await succeeded;
    expect(active).toBeUndefined();
    expect(exporter.getFinishedSpans()).toEqual([]);
  });
});

describe('tracing off', () => {
  it('stores no context and makes no span, even inside an active span', async () => {
    const { result: job } = await inSpan('http request', () => t.skiplock.enqueue('send_email', {}));
    const [many] = await inSpan('import', () =>
      t.skiplock.enqueueMany([{ kind: 'send_email', payload: {} }]),
    ).then((r) => r.result);
    expect(await storedContext(job.id)).toBeNull();
    expect(await storedContext(many!.id)).toBeNull();

    let active: SpanContext | undefined;
    const worker = t.worker({
      handlers: {
        send_email: (j: Job) => {
          if (j.id === job.id) active = trace.getActiveSpan()?.spanContext();
        },
      },
    });
    const done = waitFor(async () => (await t.jobCount()) === 0, 10_000, 'both jobs done');
    await worker.start();
    await done;
    expect(active).toBeUndefined();
    expect(
      exporter
        .getFinishedSpans()
        .map((s) => s.name)
        .sort(),
    ).toEqual(['http request', 'import']);
  });
});

describe('without @opentelemetry/api installed', () => {
  it('runs jobs with tracing off, and names the package when tracing is on', async () => {
    const child = forkScript('../processes/without-opentelemetry.ts', {
      SKIPLOCK_URL: t.url,
      SKIPLOCK_SCHEMA: t.schema,
    });
    const [report] = (await Promise.race([
      once(child, 'message'),
      once(child, 'exit').then(([code]) => {
        throw new Error(`the process exited (${String(code)}) without a report`);
      }),
    ])) as [Record<string, unknown>];
    await exited(child);
    const missing = {
      name: 'MissingDependencyError',
      code: 'MISSING_DEPENDENCY',
      packageName: '@opentelemetry/api',
      message:
        "skiplock tracing needs the package '@opentelemetry/api': npm install @opentelemetry/api (or turn tracing off)",
    };
    expect(report).toEqual({
      hidden: true,
      plainSucceeded: expect.any(String),
      enqueue: missing,
      enqueueMany: missing,
      start: missing,
    });
    expect(await t.jobCount()).toBe(0);
  });
});
