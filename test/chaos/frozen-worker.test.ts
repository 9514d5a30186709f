/**
 * Frozen worker: a process is stopped with SIGSTOP while it runs jobs; the
 * sweeper reclaims its leases and the jobs run in another process; then the
 * frozen process is continued with SIGCONT and finishes its handlers. Its late
 * results (a success and a permanent failure) change nothing: the jobs' state
 * is their second attempt's.
 */
import { describe, expect, it } from 'vitest';
import { startWorker, tally, tallyFigure, useChaosDatabase, workerConfig } from './support/cluster.js';

const t = useChaosDatabase();

describe('chaos: frozen worker', () => {
  // 'continued': the handlers finish after SIGCONT, so the heartbeat usually sees the lost lease first.
  // 'frozen': their finish is already waiting when the process continues, so the late results usually
  // reach the database before the heartbeat answers, and the statements' lease fence must stop them.
  for (const finish of ['continued', 'frozen'] as const) {
    it(`a continued process's late results do not touch the next attempt (finished when ${finish})`, async () => {
      const queue = `frozen-${finish}`;
      const config = () => workerConfig(t, { queues: [queue], concurrency: 2, onSuccess: 'keep' });
      const frozen = await startWorker(t, config());
      const x = await t.skiplock.enqueue('block', {}, { queue });
      const y = await t.skiplock.enqueue('block', {}, { queue });
      const ids = [x.id, y.id];
      for (const id of ids) await frozen.next('started', (m) => m.id === id && m.attempts === 1);

      frozen.kill('SIGSTOP');
      const other = await startWorker(t, config());
      for (const id of ids) await other.next('started', (m) => m.id === id && m.attempts === 2);
      const state = () =>
        t.query(
          `SELECT id, status, attempts, locked_by, last_error, finished_at FROM ${t.jobs}
         WHERE id = ANY($1::bigint[]) ORDER BY id`,
          [ids],
        );
      const second = ids.map((id) => ({
        id,
        status: 'running',
        attempts: 2,
        locked_by: other.workerId,
        last_error: 'reclaimed: visibility timeout',
        finished_at: null,
      }));
      expect(await state()).toEqual(second);

      if (finish === 'continued') frozen.kill('SIGCONT');
      frozen.send({ type: 'finish', id: x.id, outcome: 'ok' });
      frozen.send({ type: 'finish', id: y.id, outcome: 'permanent' });
      if (finish === 'frozen') frozen.kill('SIGCONT');
      for (const id of ids) await frozen.next('job:stale', (m) => m.id === id && m.attempts === 1);
      // The late success did not end the job and the late failure did not fail it.
      expect(await state()).toEqual(second);
      expect(frozen.reported('job:success')).toEqual([]);
      expect(frozen.reported('job:failure')).toEqual([]);

      for (const id of ids) other.send({ type: 'finish', id, outcome: 'ok' });
      for (const id of ids) await other.next('job:success', (m) => m.id === id && m.attempts === 2);
      const final = await state();
      expect(final.map((r) => ({ status: r.status, attempts: r.attempts, locked_by: r.locked_by }))).toEqual([
        { status: 'succeeded', attempts: 2, locked_by: null },
        { status: 'succeeded', attempts: 2, locked_by: null },
      ]);
      const tl = await tally(t.db.pool, t.schema, ids);
      tallyFigure(`frozen-worker-${finish}`, tl, {
        kills: 0,
        restarts: 0,
        stops: 1,
        stale: frozen.reported('job:stale').length,
        leaseLostByHeartbeat: frozen.reported('lease:lost').length,
      });
      expect(tl).toMatchObject({
        effects: 2,
        duplicates: 2,
        lost: 0,
        sameAttemptTwice: 0,
        finalAttemptMissing: 0,
      });
      expect(frozen.reported('job:stale')).toHaveLength(2);
      await Promise.all([frozen.shutdown(), other.shutdown()]);
      expect(frozen.exit).toEqual({ code: null, signal: 'SIGTERM' });
    });
  }
});
