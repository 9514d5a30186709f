/**
 * Graphs in one `enqueueMany` call: items carry a `ref` (a name local to the
 * call) and name other items' refs, or existing job ids, in `dependsOn`. The
 * graph is checked whole before anything is written (refs unique, every
 * entry a ref or a job id, no cycle), then inserted parents first in one
 * transaction: all or none.
 */
import pg from 'pg';
import { type Queryable, transactionOn, withTransaction } from '../db/executor.js';
import { UnknownParentError } from '../db/queries/dependencies.js';
import type { NewJob } from '../db/queries/insert.js';
import type { JobQueries } from '../db/queries/jobs.js';
import { DatabaseError, ValidationError } from '../errors.js';
import { toJob } from '../job/job.js';
import type { EnqueuedJob } from '../job/unique.js';
import { retryingDeadlocks } from './deadlocks.js';
import { isJobId } from './job-options.js';

/** A parent of an item: another item of the call, or a job that exists already. */
type Parent = { item: number } | { id: string };

/** A checked graph: the items in an order where parents come first, and each item's parents. */
export interface GraphPlan {
  order: number[];
  parents: Parent[][];
}

/** Whether any item of an `enqueueMany` call uses `ref` or `dependsOn`. */
export function isGraph(items: readonly unknown[]): boolean {
  return items.some(
    (item) =>
      typeof item === 'object' &&
      item !== null &&
      ((item as { ref?: unknown }).ref !== undefined ||
        (item as { dependsOn?: unknown }).dependsOn !== undefined),
  );
}

/**
 * Checks the graph of validated `rows` (their `dependsOn` as given) and orders
 * it. A `dependsOn` entry equal to a `ref` of the call names that item;
 * otherwise it must be a job id.
 *
 * @throws {ValidationError} naming the item and field: `jobs[2].ref` (not a
 *   non-empty string, or repeated), `jobs[3].dependsOn[0]` (neither a ref of
 *   the call nor a job id, or closing a cycle), `jobs[1].uniqueKey` (unique
 *   keys are not taken in a graph call).
 */
export function planGraph(items: readonly unknown[], rows: readonly NewJob[]): GraphPlan {
  const refs = new Map<string, number>();
  items.forEach((item, i) => {
    const ref = (item as { ref?: unknown }).ref;
    if (ref === undefined) return;
    if (typeof ref !== 'string' || ref.length === 0)
      throw new ValidationError(`jobs[${i}].ref`, 'must be a non-empty string');
    const first = refs.get(ref);
    if (first !== undefined) throw new ValidationError(`jobs[${i}].ref`, `repeats jobs[${first}].ref`);
    refs.set(ref, i);
  });
  const parents = rows.map((row, i) => {
    if (row.unique) throw new ValidationError(`jobs[${i}].uniqueKey`, 'not in a call with ref or dependsOn');
    return (row.dependsOn ?? []).map((entry, k): Parent => {
      const item = refs.get(entry);
      if (item !== undefined) return { item };
      if (isJobId(entry)) return { id: entry };
      throw new ValidationError(
        `jobs[${i}].dependsOn[${k}]`,
        'names no ref of this call and is not a job id',
      );
    });
  });
  // Kahn's algorithm: an item is placed once all its parents in the call are.
  const waitingFor = parents.map((ps) => ps.filter((p) => 'item' in p).length);
  const childrenOf = rows.map(() => [] as number[]);
  parents.forEach((ps, i) => {
    for (const p of ps) if ('item' in p) childrenOf[p.item]!.push(i);
  });
  const order: number[] = [];
  const ready = waitingFor.flatMap((n, i) => (n === 0 ? [i] : []));
  while (ready.length > 0) {
    const i = ready.shift()!;
    order.push(i);
    for (const child of childrenOf[i]!) if (--waitingFor[child]! === 0) ready.push(child);
  }
  if (order.length < rows.length) {
    // Every item left has a parent left: walking up from one comes back to an
    // item it passed, which is on a cycle; the error names that item's entry.
    const placed = new Set(order);
    const upward = (j: number) => parents[j]!.findIndex((p) => 'item' in p && !placed.has(p.item));
    const next = (j: number) => (parents[j]![upward(j)] as { item: number }).item;
    let i = rows.findIndex((_, j) => !placed.has(j));
    for (const passed = new Set<number>(); !passed.has(i); i = next(i)) passed.add(i);
    throw new ValidationError(`jobs[${i}].dependsOn[${upward(i)}]`, 'forms a cycle');
  }
  return { order, parents };
}

/**
 * Inserts a checked graph, parents first, one statement per item, on `db`
 * (which must be inside a transaction for all or none); input order.
 *
 * @throws {ValidationError} naming the entry (`jobs[3].dependsOn[0]`) when a job id names no job.
 * @throws {DatabaseError} from the database.
 */
export async function insertGraph(
  queries: JobQueries,
  db: Queryable,
  rows: readonly NewJob[],
  plan: GraphPlan,
): Promise<EnqueuedJob[]> {
  const ids = new Array<string>(rows.length);
  const result = new Array<EnqueuedJob>(rows.length);
  for (const i of plan.order) {
    const row = rows[i]!;
    const parentIds = plan.parents[i]!.map((p) => ('item' in p ? ids[p.item]! : p.id));
    let record: Awaited<ReturnType<typeof queries.insert.one>>;
    if (parentIds.length === 0) record = await queries.insert.one(db, row);
    else {
      try {
        record = await queries.dependencies.insertChild(db, row, parentIds, row.onParentFailure ?? 'cancel');
      } catch (error) {
        if (!(error instanceof UnknownParentError)) throw error;
        const k = plan.parents[i]!.findIndex((p) => 'id' in p && p.id === error.parentId);
        throw new ValidationError(`jobs[${i}].dependsOn[${k}]`, `no job ${error.parentId}`);
      }
    }
    ids[i] = record.id;
    result[i] = { ...toJob(record), duplicate: false };
  }
  return result;
}

/**
 * Runs `insert`, which writes jobs with parents, so that it leaves all or
 * nothing and gives way to deadlocks: a child's insert locks its parents in id
 * order, and a worker ending several of them in one statement may lock them in
 * another, so PostgreSQL may fail the insert (40P01); it is then undone and
 * tried again after a pause. Where it runs:
 * - without `client`: a `single` statement on `pool`, more in a READ
 *   COMMITTED transaction on it;
 * - on a `client` inside a transaction: under a savepoint, rolled back to on
 *   any error, so the caller's transaction goes on without any of it;
 * - on a `client` outside a transaction: a `single` statement as it is; more
 *   statements (a graph) in a transaction of their own on it when it is a
 *   `pg` connection.
 *
 * @throws {ValidationError} (field `options.client`) for several statements on
 *   a client outside a transaction that is not a `pg` connection; nothing is inserted.
 * @throws {DatabaseError} 40P01 after the last retry, or any other error of `insert`.
 */
export async function insertWithParents<T>(
  queries: JobQueries,
  pool: pg.Pool,
  client: Queryable | undefined,
  single: boolean,
  insert: (db: Queryable) => Promise<T>,
): Promise<T> {
  if (!client)
    return retryingDeadlocks(() => (single ? insert(pool) : withTransaction(pool, insert, undefined, true)));
  const savepoints = queries.insert.unique;
  try {
    await savepoints.savepoint(client, 'batch');
  } catch (error) {
    if (!(error instanceof DatabaseError && error.sqlState === '25P01')) throw error;
    if (single) return retryingDeadlocks(() => insert(client));
    if (!(client instanceof pg.Client))
      throw new ValidationError(
        'options.client',
        'is outside a transaction: jobs that depend on each other go in all or none, so pass a client inside BEGIN … COMMIT, or none',
      );
    return retryingDeadlocks(() => transactionOn(client, insert, undefined, true));
  }
  try {
    const result = await retryingDeadlocks(
      () => insert(client),
      () => savepoints.rollbackToSavepoint(client, 'batch'),
    );
    await savepoints.releaseSavepoint(client, 'batch');
    return result;
  } catch (error) {
    // A failed statement left the transaction aborted: back to the savepoint, it goes on.
    await savepoints.rollbackToSavepoint(client, 'batch').then(
      () => savepoints.releaseSavepoint(client, 'batch'),
      () => {},
    );
    throw error;
  }
}
