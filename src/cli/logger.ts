/**
 * The worker's log: pino, one JSON line per state change on stdout.
 */
import { type DestinationStream, pino } from 'pino';

/** Log levels accepted by `--log-level`. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

/** A log level. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * A pino logger at `level`, named `skiplock`, writing to `destination` (stdout
 * by default). An error's `message` is its own: its cause is logged as `cause`,
 * not appended to the message (skiplock's `DatabaseError` already carries the
 * driver's message).
 */
export function createLogger(level: LogLevel, destination?: DestinationStream) {
  const options = { name: 'skiplock', level, serializers: { err: pino.stdSerializers.errWithCause } };
  return destination ? pino(options, destination) : pino(options);
}

/** The logger type. */
export type Logger = ReturnType<typeof createLogger>;
