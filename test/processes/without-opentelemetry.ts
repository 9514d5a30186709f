/**
 * skiplock in a process where `@opentelemetry/api` cannot be found (a resolve
 * hook hides it): with tracing off a job is enqueued and run; with tracing on,
 * enqueue and a worker's start fail with a MissingDependencyError. Sends what
 * happened to its parent and exits. Configured by environment: SKIPLOCK_URL,
 * SKIPLOCK_SCHEMA (migrated).
 */
import { register } from 'node:module';
import { failureReport } from '../support/missing-packages.js';

// Registered after tsx's hooks, so it answers first.
register(
  `data:text/javascript,${encodeURIComponent(`
    export async function resolve(specifier, context, next) {
      if (specifier === '@opentelemetry/api' || specifier.startsWith('@opentelemetry/api/')) {
        const error = new Error('Cannot find package ' + specifier + ' (hidden by the test)');
        error.code = 'ERR_MODULE_NOT_FOUND';
        throw error;
      }
      return next(specifier, context);
    }`)}`,
);

const { Skiplock } = await import('../../src/index.js');
const connectionString = process.env.SKIPLOCK_URL!;
const schema = process.env.SKIPLOCK_SCHEMA!;
const report: Record<string, unknown> = {};
const failure = failureReport;

const hidden = await import('@opentelemetry/api').then(
  () => false,
  () => true,
);
report.hidden = hidden;

const plain = new Skiplock({ connectionString, schema });
const job = await plain.enqueue('plain', {});
const worker = plain.worker({ handleSignals: false, handlers: { plain: () => {} } });
const succeeded = new Promise((resolve) => worker.once('job:success', resolve));
await worker.start();
await succeeded;
report.plainSucceeded = job.id;
await plain.close();

const traced = new Skiplock({ connectionString, schema, tracing: true });
report.enqueue = await traced.enqueue('traced', {}).then(() => 'enqueued', failure);
report.enqueueMany = await traced
  .enqueueMany([{ kind: 'traced', payload: {} }])
  .then(() => 'enqueued', failure);
const tracedWorker = traced.worker({ handleSignals: false, handlers: { traced: () => {} } });
report.start = await tracedWorker.start().then(() => 'started', failure);
await traced.close();

process.send?.(report, () => process.exit(0));
