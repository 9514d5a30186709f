/**
 * Scenario 9, an operator's view at volume (skiplock): with 10,000,000
 * archived rows over ten UTC days, 1,000,000 kept succeeded jobs and 100,000
 * dead letters (quick: a tenth), the time of stats(), queues(), each dashboard
 * page, listJobs pages 1 and 100, and of a retention pass that drops the
 * oldest archived day; table and index sizes and dead tuples before and after
 * it, in the notes.
 */
import pg from 'pg';
import { adminQuery } from '../database.js';
import { loadEngine, skiplockSystem } from '../systems/skiplock.js';
import type { Target } from '../systems/system.js';
import { type BenchContext, namespaceFor, type Scenario } from './scenario.js';

const QUEUES = 10;
const PAGE = 50;

/** Size (table, indexes, TOAST) and dead tuples of a table, summed over its partitions. */
async function sizes(url: string, table: string): Promise<{ bytes: number; dead: number; parts: number }> {
  const [row] = await adminQuery<{ bytes: string; dead: string; parts: number }>(
    url,
    // pgstattuple_approx reads the pages the visibility map does not vouch
    // for: exact dead tuples without the lag of pg_stat_user_tables. A plain
    // table is not in its own partition tree; a partitioned parent holds no rows.
    `SELECT sum(pg_total_relation_size(t.relid))::text AS bytes,
            COALESCE(sum((pgstattuple_approx(t.relid)).dead_tuple_count), 0)::text AS dead,
            count(*)::int AS parts
     FROM (SELECT relid FROM pg_partition_tree($1::regclass) UNION SELECT $1::regclass) t
     JOIN pg_class c ON c.oid = t.relid
     WHERE c.relkind = 'r'`,
    [table],
  );
  return { bytes: Number(row!.bytes), dead: Number(row!.dead), parts: row!.parts };
}

function describeSizes(label: string, s: { bytes: number; dead: number; parts: number }): string {
  const mb = (s.bytes / 1024 / 1024).toFixed(1);
  return `${label}: ${mb} MB (tables, indexes, TOAST), ${s.dead.toLocaleString('en-US')} dead tuples${s.parts > 1 ? `, ${s.parts} partitions` : ''}`;
}

async function seed(target: Target, archived: number, kept: number, dead: number): Promise<void> {
  const url = target.databaseUrl;
  // Ten UTC days before today, each in its own partition.
  await adminQuery(
    url,
    `SELECT skiplock.archive_partition(((now() - d * interval '1 day') AT TIME ZONE 'UTC')::date)
     FROM generate_series(1, 10) d`,
  );
  const perDay = archived / 10;
  for (let day = 1; day <= 10; day++) {
    await adminQuery(
      url,
      `INSERT INTO skiplock.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                          created_at, finished_at)
       SELECT $2::bigint * 100000000 + g, 'q' || (g % ${QUEUES}), 'k' || (g % 20), jsonb_build_object('n', g),
              'succeeded', 0, now(), 1, 20, now(),
              date_trunc('day', now() - $2 * interval '1 day', 'UTC') + (g % 86000) * interval '1 second'
                + interval '5 minutes'
       FROM generate_series(1, $1::int) g`,
      [perDay, day],
    );
  }
  await adminQuery(
    url,
    `INSERT INTO skiplock.jobs (queue, kind, payload, status, attempts, max_attempts, finished_at, last_error)
     SELECT 'q' || (g % ${QUEUES}), 'k' || (g % 20), jsonb_build_object('n', g, 'text', repeat('x', 100)),
            CASE WHEN g <= $1 THEN 'succeeded' ELSE 'dead' END, 1, 1,
            now() - (g % 172800) * interval '1 second', CASE WHEN g > $1 THEN 'boom' END
     FROM generate_series(1, $1::int + $2::int) g`,
    [kept, dead],
  );
  await adminQuery(
    url,
    `INSERT INTO skiplock.jobs (queue, kind, payload, run_at, max_attempts)
     SELECT 'q' || (g % ${QUEUES}), 'k1', '{}', now() + interval '1 hour', 20 FROM generate_series(1, 10000) g`,
  );
  await adminQuery(url, 'VACUUM ANALYZE skiplock.jobs');
  await adminQuery(url, 'ANALYZE skiplock.jobs_archive');
}

export const volumeScenario: Scenario = {
  id: 9,
  title: "An operator's view at volume",
  async run(ctx: BenchContext) {
    const scale = ctx.smoke ? 0.005 : ctx.quick ? 0.1 : 1;
    const archived = 10_000_000 * scale;
    const kept = 1_000_000 * scale;
    const dead = 100_000 * scale;
    const n = (v: number) => v.toLocaleString('en-US');
    const scenario = '9. Volume';
    const volumes = `${n(archived)} archived, ${n(kept)} kept succeeded, ${n(dead)} dead`;
    const unit = 'ms (lower is better)';
    const target = await skiplockSystem.create(ctx.serverUrl, namespaceFor('skiplock', 'volume'));
    const { Skiplock } = await loadEngine();
    const { createDashboard } = await import('../../src/dashboard/index.js');
    const skiplock = new Skiplock({ connectionString: target.databaseUrl });
    try {
      await adminQuery(target.databaseUrl, 'CREATE EXTENSION IF NOT EXISTS pgstattuple');
      ctx.log(`  seeding ${volumes}`);
      await seed(target, archived, kept, dead);
      const dashboard = createDashboard(skiplock, { refreshIntervalMs: 0 });
      const [middle] = await adminQuery<{ id: string }>(
        target.databaseUrl,
        `SELECT id::text FROM skiplock.jobs ORDER BY id DESC OFFSET ${99 * PAGE} LIMIT 1`,
      );
      const archivedId = String(5 * 100_000_000 + 42);
      const timed = async (name: string, fn: () => Promise<unknown>) => {
        const startedAt = performance.now();
        await fn();
        ctx.record(
          { scenario, case: `${name} (${volumes})`, unit, system: 'skiplock', tag: 'volume.page' },
          performance.now() - startedAt,
        );
      };
      const page = async (path: string) => {
        const res = await dashboard.request(path);
        if (res.status !== 200) throw new Error(`dashboard ${path}: HTTP ${res.status}`);
        await res.text();
      };
      // One warm-up round, then the measured runs.
      for (let run = 0; run <= ctx.runs; run++) {
        const measure =
          run === 0 ? async (_: string, fn: () => Promise<unknown>) => void (await fn()) : timed;
        await measure('stats()', () => skiplock.stats());
        await measure('queues()', () => skiplock.queues());
        await measure('listJobs page 1', () => skiplock.listJobs({ limit: PAGE, payloadPreviewChars: 200 }));
        await measure('listJobs page 100', () =>
          skiplock.listJobs({ limit: PAGE, payloadPreviewChars: 200, after: middle!.id }),
        );
        await measure('dashboard /', () => page('/'));
        await measure('dashboard /jobs', () => page('/jobs'));
        await measure('dashboard /jobs?status=dead', () => page('/jobs?status=dead'));
        await measure('dashboard /jobs page 100', () => page(`/jobs?before=${middle!.id}`));
        await measure('dashboard /jobs/:id (archived)', () => page(`/jobs/${archivedId}`));
        await measure('dashboard /schedules', () => page('/schedules'));
      }

      // Retention: an archive age that expires exactly the oldest day (no row
      // sits in the first 5 minutes of a day, so none of the next day is older).
      const before = {
        jobs: await sizes(target.databaseUrl, 'skiplock.jobs'),
        archive: await sizes(target.databaseUrl, 'skiplock.jobs_archive'),
      };
      const [oldest] = await adminQuery<{ rows: number; age_ms: string }>(
        target.databaseUrl,
        `SELECT (SELECT count(*)::int FROM skiplock.jobs_archive
                 WHERE finished_at < date_trunc('day', now() - interval '9 days', 'UTC')) AS rows,
                floor(EXTRACT(EPOCH FROM now() - date_trunc('day', now() - interval '9 days', 'UTC')) * 1000)
                  ::bigint::text AS age_ms`,
      );
      const client = new pg.Client({ connectionString: target.databaseUrl });
      await client.connect();
      const startedAt = performance.now();
      const result = await skiplock
        .prune({ client, retention: { archive: Number(oldest!.age_ms) } })
        .finally(() => client.end());
      ctx.record(
        {
          scenario,
          case: `retention pass dropping a day of ${n(oldest!.rows)} archived rows`,
          unit,
          system: 'skiplock',
        },
        performance.now() - startedAt,
      );
      const after = {
        jobs: await sizes(target.databaseUrl, 'skiplock.jobs'),
        archive: await sizes(target.databaseUrl, 'skiplock.jobs_archive'),
      };
      ctx.note(
        `scenario 9: retention dropped ${result.archivePartitions} partition(s) and deleted ${result.archive} archived rows; ` +
          `before: ${describeSizes('jobs', before.jobs)}; ${describeSizes('archive', before.archive)}; ` +
          `after: ${describeSizes('jobs', after.jobs)}; ${describeSizes('archive', after.archive)}`,
      );
    } finally {
      await skiplock.close();
      await skiplockSystem.destroy(target);
    }
  },
};
