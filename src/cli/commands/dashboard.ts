/**
 * `skiplock dashboard`: serves the web dashboard until SIGTERM/SIGINT.
 */
import { Command, InvalidArgumentError } from 'commander';
import { serveDashboard } from '../../dashboard/serve.js';
import { openDatabaseWith } from '../database.js';
import { addConnectionFlags, type ConnectionFlags, examples, integer } from '../flags.js';
import { printText } from '../output.js';
import { UsageError } from '../usage-error.js';

interface DashboardFlags extends ConnectionFlags {
  port: number;
  host: string;
  readOnly?: boolean;
  basicAuth?: { username: string; password: string };
  basePath?: string;
  allowedHost: string[];
}

/** Parses `USER:PASS` (the password may contain `:`). */
function credentials(value: string): { username: string; password: string } {
  const at = value.indexOf(':');
  if (at <= 0 || at === value.length - 1)
    throw new InvalidArgumentError('must be USER:PASS, both non-empty.');
  return { username: value.slice(0, at), password: value.slice(at + 1) };
}

/** `$SKIPLOCK_DASHBOARD_AUTH` as credentials; set but unusable is an error, never a dashboard without auth. */
function envCredentials(value: string): { username: string; password: string } {
  try {
    return credentials(value);
  } catch (error) {
    throw new UsageError(`invalid $SKIPLOCK_DASHBOARD_AUTH: ${(error as Error).message}`);
  }
}

/** The `dashboard` command. */
export function dashboardCommand(): Command {
  const command = new Command('dashboard')
    .summary('serve the web dashboard')
    .description(
      'Serves the web dashboard (queues, jobs, one job, schedules; requeue, delete, cancel, pause and resume) and /metrics (Prometheus text) over HTTP until Ctrl-C. Listens on 127.0.0.1 unless --host says otherwise; any other address needs --basic-auth or --read-only. Basic auth may also come from $SKIPLOCK_DASHBOARD_AUTH (USER:PASS), which keeps the password out of the process list.',
    )
    .option('--port <n>', 'TCP port', integer(0, 65_535), 4600)
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--read-only', 'show no actions and refuse every POST (403)')
    .option('--basic-auth <user:pass>', 'require HTTP basic auth with these credentials', credentials)
    .option('--base-path <path>', 'path prefix of every page, e.g. /skiplock (default: none)')
    .option(
      '--allowed-host <name>',
      'a host name the dashboard answers to besides its address (repeatable), e.g. jobs.example.com behind a proxy',
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    );
  addConnectionFlags(command);
  return command
    .addHelpText(
      'after',
      examples(
        'skiplock dashboard',
        'skiplock dashboard --port 8080 --read-only',
        'SKIPLOCK_DASHBOARD_AUTH=ops:s3cret skiplock dashboard --host 0.0.0.0',
      ),
    )
    .action(async (flags: DashboardFlags) => {
      const fromEnv = process.env.SKIPLOCK_DASHBOARD_AUTH;
      const basicAuth = flags.basicAuth ?? (fromEnv === undefined ? undefined : envCredentials(fromEnv));
      const { db, server } = await openDatabaseWith(flags, async (db) => ({
        server: await serveDashboard(db.skiplock, {
          port: flags.port,
          host: flags.host,
          readOnly: flags.readOnly ?? false,
          ...(basicAuth ? { basicAuth } : {}),
          ...(flags.basePath === undefined ? {} : { basePath: flags.basePath }),
          ...(flags.allowedHost.length > 0 ? { allowedHosts: flags.allowedHost } : {}),
        }),
      }));
      printText(`dashboard at ${server.url}${flags.readOnly ? ' (read-only)' : ''}`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', () => resolve());
        process.once('SIGTERM', () => resolve());
      });
      await server.close();
      await db.close();
    });
}
