/**
 * The connection a transactional handler gets: the pooled client of its job's
 * transaction, with the two misuses that would break the transaction's
 * guarantee refused at the call: a statement sent after the attempt ended
 * (timeout, cancel, stop, lost lease: its transaction is being rolled back),
 * releasing the client (the worker does, after
 * COMMIT or ROLLBACK; a second release would also throw inside pg-pool, and a
 * released connection could carry another job's transaction), and ending or
 * starting the transaction with a statement of its own. Everything else passes
 * through unchanged.
 */
import type { EventEmitter } from 'node:events';
import type pg from 'pg';
import { SkiplockError } from '../errors.js';

/**
 * Statements that end or start a transaction. SAVEPOINT and `ROLLBACK TO
 * SAVEPOINT` stay allowed; leading comments and semicolons are skipped. A
 * transaction-control statement hidden behind another one in a multi-statement
 * string is not seen here: {@link transactionEnded} catches what it did.
 */
const TRANSACTION_CONTROL =
  /^(?:\s|;|--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)*(?:BEGIN|START\s+TRANSACTION|COMMIT|END|ABORT|PREPARE\s+TRANSACTION|ROLLBACK(?!\s+(?:TO|PREPARED)\b)|COMMIT\s+PREPARED|ROLLBACK\s+PREPARED)\b/i;

/**
 * Command tags of statements that end or start a transaction. Not ROLLBACK,
 * which `ROLLBACK TO SAVEPOINT` sends too: a hidden ROLLBACK is followed by a
 * BEGIN, or leaves no transaction open.
 */
const TRANSACTION_CONTROL_TAG = /^(?:BEGIN|START|COMMIT)\b/;

/** A connection's protocol layer (node-postgres), which emits each statement's command tag. */
type TagSource = Pick<EventEmitter, 'on' | 'off'>;

/**
 * The handler's connections, and whether a statement sent on one ended or
 * started a transaction: `…; COMMIT; BEGIN` in one string leaves a
 * transaction open, so the status alone does not tell. Read from every
 * statement's command tag, whatever form of query() sent it.
 */
const watched = new WeakMap<pg.PoolClient, { controlled: boolean; stop: () => void }>();

function watchCommandTags(client: pg.PoolClient): void {
  watched.get(client)?.stop();
  const connection = (client as { connection?: TagSource }).connection;
  const watch = { controlled: false, stop: () => {} };
  if (connection) {
    const onComplete = (message: { text?: string }) => {
      if (TRANSACTION_CONTROL_TAG.test(message.text ?? '')) watch.controlled = true;
    };
    connection.on('commandComplete', onComplete);
    watch.stop = () => connection.off('commandComplete', onComplete);
  }
  watched.set(client, watch);
}

/** The error a misuse gets; the attempt fails with it (and rolls back) unless the handler catches it. */
export class TransactionMisuseError extends SkiplockError {
  constructor(message: string) {
    super('USAGE', message);
    this.name = 'TransactionMisuseError';
  }
}

function textOf(config: unknown): string | undefined {
  if (typeof config === 'string') return config;
  if (
    typeof config === 'object' &&
    config !== null &&
    typeof (config as { text?: unknown }).text === 'string'
  )
    return (config as { text: string }).text;
  return undefined;
}

/**
 * Wraps `client` for a transactional handler.
 *
 * @param signal - the attempt's signal: once it fired, every statement is
 *   refused with its reason.
 * @returns a client whose `release()` throws a {@link TransactionMisuseError},
 *   and whose `query()` refuses BEGIN, COMMIT, ROLLBACK (not `ROLLBACK TO
 *   SAVEPOINT`), END, ABORT and PREPARE TRANSACTION with one (rejected, or
 *   passed to the callback).
 */
export function guardedClient(client: pg.PoolClient, signal: AbortSignal): pg.PoolClient {
  watchCommandTags(client);
  const release = () => {
    throw new TransactionMisuseError(
      "a transactional handler's client is released by the worker, after its transaction ends; do not release it",
    );
  };
  const query = (...args: unknown[]) => {
    const text = textOf(args[0]);
    const error = signal.aborted
      ? (signal.reason as Error)
      : text !== undefined && TRANSACTION_CONTROL.test(text)
        ? new TransactionMisuseError(
            `a transactional handler runs inside its job's transaction, which the worker commits or rolls back: "${text.trim().slice(0, 40)}" is refused (SAVEPOINTs are fine)`,
          )
        : undefined;
    if (error) {
      const callback = args.find((a) => typeof a === 'function') as ((e: Error) => void) | undefined;
      if (callback) {
        process.nextTick(() => callback(error));
        return undefined;
      }
      return Promise.reject(error);
    }
    return (client.query as (...a: unknown[]) => unknown).apply(client, args);
  };
  return new Proxy(client, {
    get(target, property) {
      if (property === 'release') return release;
      if (property === 'query') return query;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * The misuse a handler's own COMMIT or ROLLBACK leaves behind, when the guard
 * did not see it (inside a multi-statement string): the connection is no
 * longer in a transaction when the handler returns, or a statement of such a
 * string ended or started one (`…; COMMIT; BEGIN`). Undefined otherwise.
 * Ends the watch {@link guardedClient} began: call it once the handler is done.
 */
export function transactionEnded(client: pg.PoolClient): TransactionMisuseError | undefined {
  const watch = watched.get(client);
  watch?.stop();
  watched.delete(client);
  const status = (client as { getTransactionStatus?: () => string | null }).getTransactionStatus?.();
  const open = status === undefined || status === null || status === 'T' || status === 'E';
  if (open && !watch?.controlled) return undefined;
  return new TransactionMisuseError(
    "the handler's transaction was ended by the handler (a COMMIT or ROLLBACK sent on its client): the job is not completed, and what the handler committed stays",
  );
}
