/**
 * An OpenTelemetry SDK as an application would register it, for the tracing
 * A/B benchmark: the async-hooks context manager, the W3C propagator, and a
 * tracer provider that samples every span into a batch processor whose
 * exporter drops them (so the figure is skiplock's and the SDK's cost, not a
 * collector's).
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { ExportResultCode, W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';

/** Spans exported so far (to check the run made them). */
export let exportedSpans = 0;

const dropping: SpanExporter = {
  export(spans, done) {
    exportedSpans += spans.length;
    done({ code: ExportResultCode.SUCCESS });
  },
  shutdown: async () => {},
};

/** Registers the SDK globally; returns a function that flushes and shuts it down. */
export function registerSdk(): () => Promise<void> {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropping)] });
  trace.setGlobalTracerProvider(provider);
  return () => provider.shutdown();
}
