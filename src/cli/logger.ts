/**
 * The worker's log: pino, one JSON line per state change on stdout.
 */
import { pino } from 'pino';

/** Log levels accepted by `--log-level`. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

/** A log level. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** A pino logger at `level`, named `skiplock`. */
export function createLogger(level: LogLevel) {
  return pino({ name: 'skiplock', level });
}

/** The logger type. */
export type Logger = ReturnType<typeof createLogger>;
