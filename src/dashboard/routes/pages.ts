/**
 * The pages: queues (`/`), jobs (`/jobs`, filtered by status, kind, queue and tags), one job (`/jobs/:id`) and schedules (`/schedules`). Query
 * parameters are checked here and reach SQL only as bind parameters.
 */
import type { Hono } from 'hono';
import { ValidationError } from '../../errors.js';
import { JOB_STATUSES, type JobStatus } from '../../job/job.js';
import type { ArchivedJobSummary } from '../../operations/archive.js';
import { toTagFilter } from '../../operations/operations.js';
import type { Dashboard, DashboardEnv } from '../context.js';
import { type ArchiveQuery, archivePage } from '../views/archive.js';
import { jobPage } from '../views/job.js';
import { type JobsQuery, jobsPage } from '../views/jobs.js';
import { isGrouped, queuesPage } from '../views/queues.js';
import { withRelayedQueues } from '../views/relay.js';
import { schedulesPage } from '../views/schedules.js';
import { errorPage, render } from './render.js';

/** Characters of each payload a jobs list reads. */
const LIST_PAYLOAD_PREVIEW_CHARS = 200;

/** Characters of each payload the archive page reads. */
const ARCHIVE_PAYLOAD_PREVIEW_CHARS = 120;

const MAX_BIGINT = 9_223_372_036_854_775_807n;

/** Whether `text` is a job id: a positive decimal bigint. */
export function isJobId(text: string | undefined): text is string {
  return text !== undefined && /^[1-9][0-9]{0,18}$/.test(text) && BigInt(text) <= MAX_BIGINT;
}

/** A queue or kind filter PostgreSQL can compare: non-empty text without NUL, at most 1024 characters. */
function isName(text: string): boolean {
  return text.length > 0 && text.length <= 1024 && !text.includes('\u0000') && text.isWellFormed();
}

/** Registers the page routes on `app`. */
/**
 * The instant of `iso` (`YYYY-MM-DDTHH:MM:SS.mmmZ`) when it names one that
 * PostgreSQL stores (years 1 to 9999), else undefined: Date would roll
 * `2026-02-30` over into March, and PostgreSQL refuses year 0.
 */
function utcInstant(iso: string): Date | undefined {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime()) || date.getUTCFullYear() < 1) return undefined;
  return date.toISOString() === iso ? date : undefined;
}

export function registerPages(app: Hono<DashboardEnv>, d: Dashboard): void {
  app.get('/', async (c) => {
    const [stats, queues, buckets, relayed] = await Promise.all([
      d.skiplock.stats(),
      d.skiplock.queues(),
      d.queries.throughput(d.pool),
      d.skiplock.relayStats(),
    ]);
    const grouped = queues.filter((q) => isGrouped(q.limits)).map((q) => q.name);
    const groupLoad = await d.queries.groupLoad(d.pool, grouped);
    return render(
      c,
      d,
      withRelayedQueues(queuesPage(d, c.get('csrfToken'), stats, queues, buckets, groupLoad), relayed),
    );
  });

  app.get('/schedules', async (c) => {
    const schedules = await d.skiplock.schedules();
    const lastJobs = schedules.flatMap((s) => (s.lastJobId === null ? [] : [s.lastJobId]));
    return render(c, d, schedulesPage(d, schedules, await d.queries.storedJobIds(d.pool, lastJobs)));
  });

  app.get('/archive', async (c) => {
    const query: ArchiveQuery = {};
    for (const key of ['kind', 'queue'] as const) {
      const value = c.req.query(key) || undefined;
      if (value !== undefined && !isName(value)) return errorPage(c, d, 400, `Unusable ${key} filter.`);
      query[key] = value;
    }
    const days: { since?: Date; until?: Date } = {};
    for (const key of ['since', 'until'] as const) {
      const value = c.req.query(key) || undefined;
      if (value === undefined) continue;
      const day = /^\d{4}-\d{2}-\d{2}$/.test(value) ? utcInstant(`${value}T00:00:00.000Z`) : undefined;
      if (!day) return errorPage(c, d, 400, `A day to filter by is YYYY-MM-DD (${key}).`);
      query[key] = value;
      // The range takes whole UTC days: `until` is the last day shown.
      days[key] = key === 'until' ? new Date(day.getTime() + 86_400_000) : day;
    }
    // `tag` may repeat: archived jobs having every tag given. Empty fields are no filter.
    const tags = (c.req.queries('tag') ?? []).filter((t) => t !== '');
    if (tags.length > 0) query.tags = tags;
    query.payload = c.req.query('payload')?.trim() || undefined;
    query.before = c.req.query('before') || undefined;
    let payload: unknown;
    if (query.payload !== undefined) {
      try {
        payload = JSON.parse(query.payload);
      } catch {
        return errorPage(c, d, 400, 'Unusable payload filter: not JSON; e.g. {"orderId": 42}.');
      }
    }
    let jobs: ArchivedJobSummary[];
    try {
      jobs = await d.skiplock.listArchivedJobs({
        ...(query.kind !== undefined && { kind: query.kind }),
        ...(query.queue !== undefined && { queue: query.queue }),
        ...days,
        ...(query.tags !== undefined && { tags: query.tags }),
        ...(payload !== undefined && { payload: payload as Record<string, unknown> }),
        ...(query.before !== undefined && { before: query.before }),
        limit: d.options.pageSize,
        payloadPreviewChars: ARCHIVE_PAYLOAD_PREVIEW_CHARS,
      });
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      if (error.field === 'filter.before') return errorPage(c, d, 400, 'Bad page cursor.');
      // The library names filter.tags[0] or filter.payload.x; the form's fields are tag and payload.
      const field = error.field.startsWith('filter.tags') ? 'tag' : 'payload';
      return errorPage(c, d, 400, `Unusable ${field} filter: ${error.reason}.`);
    }
    return render(c, d, archivePage(d, query, jobs));
  });

  app.get('/jobs', async (c) => {
    const id = c.req.query('id')?.trim();
    if (id !== undefined && id !== '') {
      if (!isJobId(id)) return errorPage(c, d, 400, 'A job id is a positive whole number.');
      return c.redirect(d.link(`/jobs/${id}`), 303);
    }
    const query: JobsQuery = {};
    const status = c.req.query('status') || undefined;
    if (status !== undefined && !(JOB_STATUSES as readonly string[]).includes(status)) {
      return errorPage(c, d, 400, `Unknown status; one of ${JOB_STATUSES.join(', ')}.`);
    }
    query.status = status as JobStatus | undefined;
    for (const key of ['kind', 'queue'] as const) {
      const value = c.req.query(key) || undefined;
      if (value !== undefined && !isName(value)) return errorPage(c, d, 400, `Unusable ${key} filter.`);
      query[key] = value;
    }
    // `tag` may repeat: jobs having every tag given. Empty fields are no filter.
    const tagValues = (c.req.queries('tag') ?? []).filter((t) => t !== '');
    if (tagValues.length > 0) {
      try {
        query.tags = toTagFilter(tagValues, 'tag');
      } catch (error) {
        if (error instanceof ValidationError)
          return errorPage(c, d, 400, `Unusable tag filter: ${error.reason}.`);
        throw error;
      }
    }
    const before = c.req.query('before') || undefined;
    if (before !== undefined && !isJobId(before)) return errorPage(c, d, 400, 'Bad page cursor.');
    query.before = before;
    const [jobs, stats] = await Promise.all([
      d.skiplock.listJobs({
        ...(query.status && { status: query.status as JobStatus }),
        ...(query.kind && { kind: query.kind }),
        ...(query.queue && { queue: query.queue }),
        ...(query.tags && { tags: query.tags }),
        ...(before && { after: before }),
        order: 'newest',
        limit: d.options.pageSize,
        // The list shows no payload: read only a bounded start of each, however large they are.
        payloadPreviewChars: LIST_PAYLOAD_PREVIEW_CHARS,
      }),
      d.skiplock.stats(),
    ]);
    const queues = [...new Set(stats.map((s) => s.queue))].sort();
    const url = new URL(c.req.url);
    url.searchParams.delete('partial');
    const back = `/jobs${url.search}`;
    const kindDecides = await d.queries.kindDecidesMaxAttempts(
      d.pool,
      jobs.map((j) => j.id),
    );
    return render(c, d, jobsPage(d, c.get('csrfToken'), query, queues, jobs, back, kindDecides));
  });

  app.get('/jobs/:id', async (c) => {
    const id = c.req.param('id');
    if (!isJobId(id)) return errorPage(c, d, 404, 'No such job: a job id is a positive whole number.');
    const job = await d.skiplock.getJob(id);
    const archived = job ? undefined : await d.queries.getArchived(d.pool, id);
    if (!job && !archived) {
      return errorPage(
        c,
        d,
        404,
        `Job ${id} is not in the jobs table or the archive: it never existed, succeeded and was deleted (the default), or was deleted.`,
      );
    }
    const kindDecides = job ? (await d.queries.kindDecidesMaxAttempts(d.pool, [id])).has(id) : false;
    return render(c, d, jobPage(d, c.get('csrfToken'), (job ?? archived)!, !job, kindDecides));
  });
}
