/** The job page shows the handler's result, progress and log lines, escaped; the CLI's `jobs show` prints them. */
import { describe, expect, it } from 'vitest';
import { runCli } from '../cli/cli-process.js';
import { TEST_SCHEMA } from '../support/database.js';
import { useDashboardRequests } from './support/dashboard-requests.js';

const { db, get } = useDashboardRequests();

/** A job whose handler left a result, progress and two log lines, in `table`. */
async function jobWithOutput(table: 'jobs' | 'jobs_archive'): Promise<string> {
  const output = [
    '{"html": "<script>alert(1)</script>"}',
    '{"done": 3, "total": 4}',
    '[{"at": "2026-01-02T03:04:05Z", "line": "fetched <b>3</b> pages"}, {"at": "2026-01-02T03:04:06Z", "line": "done"}]',
  ];
  const rows =
    table === 'jobs'
      ? await db.query<{ id: string }>(
          `INSERT INTO ${db.jobs} (kind, status, finished_at, result, progress, logs)
           VALUES ('k', 'succeeded', now(), $1, $2, $3) RETURNING id`,
          output,
        )
      : await db.query<{ id: string }>(
          `INSERT INTO ${db.archive} (id, queue, kind, payload, status, priority, run_at, attempts, max_attempts,
                                      created_at, finished_at, result, progress, logs)
           VALUES (${++archivedIds}, 'default', 'k', '{}', 'succeeded', 0, now(), 1, 20, now(), now(), $1, $2, $3)
           RETURNING id`,
          output,
        );
  return rows[0]!.id;
}

let archivedIds = 900_000;

describe('job output', () => {
  it.each(['jobs', 'jobs_archive'] as const)(
    'the job page shows what the handler left (%s), escaped',
    async (table) => {
      const id = await jobWithOutput(table);
      const { status, body } = await get(`/jobs/${id}`);
      expect(status).toBe(200);
      expect(body).toContain('<pre data-field="result">');
      expect(body).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
      expect(body).not.toContain('<script>alert(1)');
      expect(body).toMatch(/<pre data-field="progress">[^<]*&quot;done&quot;: 3/);
      expect(body).toContain('fetched &lt;b&gt;3&lt;/b&gt; pages');
    },
  );

  it('jobs show prints the result, the progress and the log lines', async () => {
    const id = await jobWithOutput('jobs');
    const shown = await runCli(['jobs', 'show', id, '--database-url', db.url, '--schema', TEST_SCHEMA]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('result        {"html":"<script>alert(1)</script>"}');
    expect(shown.stdout).toContain('progress      {"done":3,"total":4}');
    expect(shown.stdout).toContain(
      'logs          2 lines, oldest first\n  2026-01-02T03:04:05.000Z  fetched <b>3</b> pages\n  2026-01-02T03:04:06.000Z  done',
    );
  });
});
