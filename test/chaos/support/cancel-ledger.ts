/**
 * What the cancel storm fired and what each cancel hit. Every cancel runs in a
 * transaction of its own that, before it commits, reads back the rows the
 * cancel changed (their `xmin` is the transaction's), so the ledger knows
 * exactly which jobs each cancel hit, in which state, at which attempt and
 * lease — and checks the counts the cancel returned against them.
 */
import type pg from 'pg';
import type { CancelFilter, Skiplock } from '../../../src/index.js';

/** One cancel's hit of one job, as the cancel's own transaction saw the row. */
export interface Hit {
  /** `cancelled`: it was queued and is now cancelled; `running`: it was held, its worker is told. */
  status: 'cancelled' | 'running';
  attempts: number;
  leaseSeq: string;
  /** Which cancel call (1, 2, …). */
  call: number;
}

/** A cancel whose counts disagree with the rows it changed. */
export interface CountMismatch {
  call: number;
  filter: Omit<CancelFilter, 'client'>;
  counts: { cancelled: number; running: number };
  rows: { cancelled: number; running: number };
}

export class CancelLedger {
  readonly #skiplock: Skiplock;
  readonly #pool: pg.Pool;
  readonly #jobs: string;
  calls = 0;
  /** Hits per job id, in call order. */
  readonly hits = new Map<string, Hit[]>();
  /** Ids named in some cancel's `ids`. */
  readonly named = new Set<string>();
  /** Cancels whose counts disagree with the rows they changed. */
  readonly countMismatches: CountMismatch[] = [];
  /** Ids an ids-only cancel named and did not hit, still queued or running after it: a cancel slipped past them. */
  readonly slipped: string[] = [];
  /** Cancels of finished jobs that counted something or changed a row. */
  readonly finishedChanged: string[] = [];
  finishedChecks = 0;

  /** `jobs`: the quoted jobs table the cancels run on. */
  constructor(skiplock: Skiplock, pool: pg.Pool, jobs: string) {
    this.#skiplock = skiplock;
    this.#pool = pool;
    this.#jobs = jobs;
  }

  /** Fires one cancel in its own transaction and records what it hit. */
  async fire(filter: Omit<CancelFilter, 'client'>): Promise<{ cancelled: number; running: number }> {
    const call = ++this.calls;
    for (const id of filter.ids ?? []) this.named.add(id);
    const client = await this.#pool.connect();
    try {
      await client.query('BEGIN');
      const counts = await this.#skiplock.cancel({ ...filter, client });
      const { rows } = await client.query<{
        id: string;
        status: Hit['status'];
        attempts: number;
        lease_seq: string;
      }>(
        `SELECT id::text, status, attempts, lease_seq::text FROM ${this.#jobs}
         WHERE xmin = pg_current_xact_id()::xid`,
      );
      // A job a cancel did not hit must have been finished (nothing here requeues a finished job).
      let live: string[] = [];
      if (filter.ids && !filter.status && !filter.kind && !filter.queue) {
        const hit = new Set(rows.map((r) => r.id));
        const missed = filter.ids.filter((id) => !hit.has(id));
        const found = await client.query<{ id: string }>(
          `SELECT id::text FROM ${this.#jobs} WHERE id = ANY($1::bigint[]) AND status IN ('queued', 'running')`,
          [missed],
        );
        live = found.rows.map((r) => r.id);
      }
      await client.query('COMMIT');
      this.slipped.push(...live);
      for (const r of rows) {
        const hits = this.hits.get(r.id) ?? [];
        hits.push({ status: r.status, attempts: r.attempts, leaseSeq: r.lease_seq, call });
        this.hits.set(r.id, hits);
      }
      const seen = {
        cancelled: rows.filter((r) => r.status === 'cancelled').length,
        running: rows.filter((r) => r.status === 'running').length,
      };
      if (counts.cancelled !== seen.cancelled || counts.running !== seen.running) {
        this.countMismatches.push({ call, filter, counts, rows: seen });
      }
      return counts;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  }

  /** Cancels finished jobs `ids` (plain pool, no transaction): must count nothing and change no row. */
  async cancelFinished(what: string, filter: Omit<CancelFilter, 'client'>, ids: string[]): Promise<void> {
    this.finishedChecks++;
    const before = await this.#snapshot(ids);
    const counts = await this.#skiplock.cancel(filter);
    const after = await this.#snapshot(ids);
    if (counts.cancelled !== 0 || counts.running !== 0) {
      this.finishedChanged.push(`${what}: counted ${JSON.stringify(counts)}`);
    }
    if (before !== after) this.finishedChanged.push(`${what}: rows changed`);
  }

  /** The rows as text, with their row versions. */
  async #snapshot(ids: string[]): Promise<string> {
    const { rows } = await this.#pool.query<{ s: string | null }>(
      `SELECT string_agg(j::text || '@' || j.xmin::text, ';' ORDER BY j.id) AS s
       FROM ${this.#jobs} j WHERE j.id = ANY($1::bigint[])`,
      [ids],
    );
    return rows[0]?.s ?? '';
  }
}
