/**
 * Scenario 9, an operator's view at volume (skiplock): with 10,000,000
 * archived rows over ten UTC days, 1,000,000 kept succeeded jobs and 100,000
 * dead letters (quick: a tenth), the time of stats(), queues(), each dashboard
 * page, listJobs pages 1 and 100, the archive's pages and its searches by tag
 * and by payload field (their plans in the notes); the archive's write rate
 * (the seed's inserts, and a worker archiving jobs with and without the
 * search indexes); the hot table's drain beside the volume against the same
 * drain on an empty database, in interleaved runs; and a retention pass that
 * drops the oldest archived day, with the archive's dead tuples after it.
 */
import pg from 'pg';
import { adminQuery } from '../database.js';
import { loadEngine, loadStatements, skiplockSystem } from '../systems/skiplock.js';
import type { SystemClient, Target } from '../systems/system.js';
import { archiveDrain } from './archive-write.js';
import { drainOnce } from './drain.js';
import { type BenchContext, namespaceFor, type Scenario } from './scenario.js';

const QUEUES = 10;
const PAGE = 50;
/** Archived rows carry one of this many tenant tags (a tag search finds one in this many rows). */
const TENANTS = 10_000;
/** Archived payloads name one of this many customers (a payload search finds one in this many rows). */
const CUSTOMERS = 100_000;
const SEARCHED_TAG = 'tenant:4242';
const SEARCHED_PAYLOAD = { customer: 'c4242' };

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

/** Seeds the volume; returns the archive's insert rate of each day (rows/s, the search indexes in place). */
async function seed(target: Target, archived: number, kept: number, dead: number): Promise<number[]> {
  const url = target.databaseUrl;
  // Ten UTC days before today, each in its own partition.
  await adminQuery(
    url,
    `SELECT skiplock.archive_partition(((now() - d * interval '1 day') AT TIME ZONE 'UTC')::date)
     FROM generate_series(1, 10) d`,
  );
  const perDay = archived / 10;
  const rates: number[] = [];
  for (let day = 1; day <= 10; day++) {
    const startedAt = performance.now();
    await adminQuery(
      url,
      `INSERT INTO skiplock.jobs_archive (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                          created_at, finished_at, tags)
       SELECT $2::bigint * 100000000 + g, 'q' || (g % ${QUEUES}), 'k' || (g % 20),
              jsonb_build_object('n', g, 'customer', 'c' || (g % ${CUSTOMERS})),
              'succeeded', 0, now(), 1, 20, now(),
              date_trunc('day', now() - $2 * interval '1 day', 'UTC') + (g % 86000) * interval '1 second'
                + interval '5 minutes',
              ARRAY['tenant:' || (g % ${TENANTS})]
       FROM generate_series(1, $1::int) g`,
      [perDay, day],
    );
    rates.push(perDay / ((performance.now() - startedAt) / 1000));
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
  return rates;
}

/**
 * A plan in one line: the nodes above the partitions, then the partitions'
 * scans counted by kind and index (day partitions' names folded), buffers
 * and times.
 */
function summarizePlan(lines: string[]): string {
  const scans = new Map<string, number>();
  const top: string[] = [];
  let buffers = '';
  const times: string[] = [];
  for (const line of lines) {
    const node = /^(?:->\s+)?([A-Z][A-Za-z ]+?)(?: on (\S+))?(?: \w+)? \(actual/.exec(line);
    if (node?.[2]?.startsWith('jobs')) {
      const name = `${node[1]} on ${node[2].replace(/_p\d{8}/, '_pYYYYMMDD')}`;
      scans.set(name, (scans.get(name) ?? 0) + 1);
    } else if (node && scans.size === 0) top.push(node[1]!);
    if (!buffers && line.startsWith('Buffers:')) buffers = line;
    if (/^(Planning|Execution) Time/.test(line)) times.push(line);
  }
  const counted = [...scans].map(([name, count]) => `${count}× ${name}`).join(', ');
  return `${top.join(' → ')} of: ${counted}; ${buffers}; ${times.join(', ')}`;
}

/** Runs `a` and `b` one after the other (`b` first when `swap`); returns their results as [a's, b's]. */
async function inTurn(
  a: () => Promise<number>,
  b: () => Promise<number>,
  swap: boolean,
): Promise<[number, number]> {
  if (!swap) {
    const first = await a();
    return [first, await b()];
  }
  const first = await b();
  return [await a(), first];
}

/** The plan of the archive page's statement for `filter`, with timings and buffers, on one line. */
async function explainArchiveList(
  url: string,
  filter: { tags?: string[]; payload?: Record<string, unknown> },
): Promise<string> {
  const { JobQueries } = await loadStatements();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    let plan = '';
    // The statement exactly as listArchivedJobs sends it, run under EXPLAIN.
    await new JobQueries('skiplock').archive.list(
      {
        async query(text: string, values?: unknown[]) {
          const { rows } = await client.query<{ 'QUERY PLAN': string }>(
            `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ${text}`,
            values,
          );
          plan = summarizePlan(rows.map((r) => r['QUERY PLAN'].trim()));
          return { rows: [], rowCount: 0 };
        },
      },
      filter,
      undefined,
      PAGE,
      120,
    );
    return plan;
  } finally {
    await client.end();
  }
}

export const volumeScenario: Scenario = {
  id: 9,
  title: "An operator's view at volume",
  async run(ctx: BenchContext) {
    const scale = ctx.smoke ? 0.005 : ctx.quick ? 0.1 : 1;
    const archived = 10_000_000 * scale;
    const kept = 1_000_000 * scale;
    const dead = 100_000 * scale;
    const drainJobs = ctx.smoke ? 2_000 : 20_000;
    const n = (v: number) => v.toLocaleString('en-US');
    const scenario = '9. Volume';
    const volumes = `${n(archived)} archived, ${n(kept)} kept succeeded, ${n(dead)} dead`;
    const unit = 'ms (lower is better)';
    const target = await skiplockSystem.create(ctx.serverUrl, namespaceFor('skiplock', 'volume'));
    const { Skiplock } = await loadEngine();
    const { createDashboard } = await import('../../src/dashboard/index.js');
    const skiplock = new Skiplock({ connectionString: target.databaseUrl });
    // Made on first use, always removed: the empty database of the drain's
    // comparison, and two of the archive's write rate (with and without the
    // search indexes).
    const others: { target: Target; client?: SystemClient }[] = [];
    const other = async (name: string) => {
      const made: { target: Target; client?: SystemClient } = {
        target: await skiplockSystem.create(ctx.serverUrl, namespaceFor('skiplock', name)),
      };
      others.push(made);
      return made;
    };
    try {
      await adminQuery(target.databaseUrl, 'CREATE EXTENSION IF NOT EXISTS pgstattuple');
      ctx.log(`  seeding ${volumes}`);
      const insertRates = await seed(target, archived, kept, dead);
      for (const rate of insertRates) {
        ctx.record(
          {
            scenario,
            case: `archive write: INSERT of one day's ${n(archived / 10)} rows into its partition (search indexes in place)`,
            unit: 'rows/s',
            system: 'skiplock',
          },
          rate,
        );
      }
      const dashboard = createDashboard(skiplock, { refreshIntervalMs: 0 });
      const [middle] = await adminQuery<{ id: string }>(
        target.databaseUrl,
        `SELECT id::text FROM skiplock.jobs ORDER BY id DESC OFFSET ${99 * PAGE} LIMIT 1`,
      );
      const archivedId = String(5 * 100_000_000 + 42);
      const [matches] = await adminQuery<{ tag: number; payload: number }>(
        target.databaseUrl,
        `SELECT (SELECT count(*)::int FROM skiplock.jobs_archive WHERE tags @> $1::text[]) AS tag,
                (SELECT count(*)::int FROM skiplock.jobs_archive WHERE payload @> $2::jsonb) AS payload`,
        [[SEARCHED_TAG], JSON.stringify(SEARCHED_PAYLOAD)],
      );
      const tagCase = `tag ${SEARCHED_TAG}, ${n(matches!.tag)} matches`;
      const payloadCase = `payload ${JSON.stringify(SEARCHED_PAYLOAD)}, ${n(matches!.payload)} matches`;
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
      const query = (params: Record<string, string>) => new URLSearchParams(params).toString();
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
        await measure('listArchivedJobs page 1', () => skiplock.listArchivedJobs({ limit: PAGE }));
        await measure(`listArchivedJobs by ${tagCase}`, () =>
          skiplock.listArchivedJobs({ limit: PAGE, tags: SEARCHED_TAG }),
        );
        await measure(`listArchivedJobs by ${payloadCase}`, () =>
          skiplock.listArchivedJobs({ limit: PAGE, payload: SEARCHED_PAYLOAD }),
        );
        await measure('dashboard /', () => page('/'));
        await measure('dashboard /jobs', () => page('/jobs'));
        await measure('dashboard /jobs?status=dead', () => page('/jobs?status=dead'));
        await measure('dashboard /jobs page 100', () => page(`/jobs?before=${middle!.id}`));
        await measure('dashboard /jobs/:id (archived)', () => page(`/jobs/${archivedId}`));
        await measure('dashboard /archive', () => page('/archive'));
        await measure(`dashboard /archive by ${tagCase}`, () =>
          page(`/archive?${query({ tag: SEARCHED_TAG })}`),
        );
        await measure(`dashboard /archive by ${payloadCase}`, () =>
          page(`/archive?${query({ payload: JSON.stringify(SEARCHED_PAYLOAD) })}`),
        );
        await measure('dashboard /schedules', () => page('/schedules'));
      }
      ctx.note(
        `scenario 9: archive search by ${tagCase}: ${await explainArchiveList(target.databaseUrl, { tags: [SEARCHED_TAG] })}`,
      );
      ctx.note(
        `scenario 9: archive search by ${payloadCase}: ${await explainArchiveList(target.databaseUrl, { payload: SEARCHED_PAYLOAD })}`,
      );

      // The hot table's drain beside the volume and on an empty database, in
      // interleaved runs so that a disturbance hits both alike.
      const empty = await other('volempty');
      const emptyClient = await skiplockSystem.attach(empty.target);
      empty.client = emptyClient;
      const full = { target, client: await skiplockSystem.attach(target) };
      others.push({ target: full.target, client: full.client });
      const shape = { processes: 1, concurrency: 50 };
      const drainCase = (where: string) =>
        `drain ${n(drainJobs)}, 1 process × ${shape.concurrency}, ${where}`;
      // One unmeasured pair first; then the order alternates, so neither side always goes first.
      await drainOnce(full.client, target, drainJobs, shape);
      await drainOnce(emptyClient, empty.target, drainJobs, shape);
      for (let run = 0; run < ctx.runs; run++) {
        const drainBeside = () => drainOnce(full.client, target, drainJobs, shape);
        const drainAlone = () => drainOnce(emptyClient, empty.target, drainJobs, shape);
        const [beside, alone] = await inTurn(drainBeside, drainAlone, run % 2 === 1);
        ctx.record(
          { scenario, case: drainCase(`beside the volume (${volumes})`), unit: 'jobs/s', system: 'skiplock' },
          beside,
        );
        ctx.record(
          { scenario, case: drainCase('empty database'), unit: 'jobs/s', system: 'skiplock' },
          alone,
        );
        ctx.record(
          {
            scenario,
            case: 'drain beside the volume / drain on the empty database',
            unit: 'ratio',
            system: 'skiplock',
            tag: 'volume.drain-ratio',
          },
          beside / alone,
        );
        ctx.log(
          `  volume drain run ${run + 1}: beside ${Math.round(beside)} jobs/s, empty ${Math.round(alone)} jobs/s`,
        );
      }

      // The archive's write rate with the search indexes and without them (as
      // before they existed), each on a fresh database, interleaved.
      const indexed = await other('volarchidx');
      const bare = await other('volarchbare');
      await adminQuery(
        bare.target.databaseUrl,
        'DROP INDEX skiplock.jobs_archive_tags_idx, skiplock.jobs_archive_payload_idx',
      );
      const writeCase = (how: string) =>
        `archive write: ${n(drainJobs)} jobs archived by a worker (1 × 50, onSuccess 'archive', a tag and a payload field each), ${how}`;
      await archiveDrain(indexed.target.databaseUrl, drainJobs);
      await archiveDrain(bare.target.databaseUrl, drainJobs);
      for (let run = 0; run < ctx.runs; run++) {
        const drainIndexed = () => archiveDrain(indexed.target.databaseUrl, drainJobs);
        const drainBare = () => archiveDrain(bare.target.databaseUrl, drainJobs);
        const [withIndexes, without] = await inTurn(drainIndexed, drainBare, run % 2 === 1);
        ctx.record(
          { scenario, case: writeCase('with the search indexes'), unit: 'jobs/s', system: 'skiplock' },
          withIndexes,
        );
        ctx.record(
          { scenario, case: writeCase('without them'), unit: 'jobs/s', system: 'skiplock' },
          without,
        );
        ctx.record(
          {
            scenario,
            case: 'archive write with the search indexes / without',
            unit: 'ratio',
            system: 'skiplock',
          },
          withIndexes / without,
        );
        ctx.log(
          `  archive write run ${run + 1}: with indexes ${Math.round(withIndexes)} jobs/s, without ${Math.round(without)} jobs/s`,
        );
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
      ctx.record(
        {
          scenario,
          case: 'dead tuples in the archive after the retention pass',
          unit: 'tuples',
          system: 'skiplock',
        },
        after.archive.dead,
      );
      ctx.note(
        `scenario 9: retention dropped ${result.archivePartitions} partition(s) and deleted ${result.archive} archived rows; ` +
          `before: ${describeSizes('jobs', before.jobs)}; ${describeSizes('archive', before.archive)}; ` +
          `after: ${describeSizes('jobs', after.jobs)}; ${describeSizes('archive', after.archive)}`,
      );
    } finally {
      await skiplock.close();
      for (const { client } of others) await client?.close();
      for (const made of others) if (made.target !== target) await skiplockSystem.destroy(made.target);
      await skiplockSystem.destroy(target);
    }
  },
};
