/**
 * `skiplock migrate`: creates or upgrades the schema (safe to run from many
 * processes at once; run it at deploy time).
 */
import { Command } from 'commander';
import { withDatabase } from '../database.js';
import { addDatabaseCommandFlags, type DatabaseCommandFlags } from '../flags.js';
import { printJson, printText } from '../output.js';

/** The `migrate` command. */
export function migrateCommand(): Command {
  const command = new Command('migrate')
    .summary('create or upgrade the jobs schema')
    .description(
      'Creates or upgrades the schema of the jobs table (forward-only migrations, one transaction, under an advisory lock). Idempotent.',
    );
  return addDatabaseCommandFlags(command, [
    'skiplock migrate',
    'DATABASE_URL=postgres://app@db/app skiplock migrate --schema jobs --json',
  ]).action(async (flags: DatabaseCommandFlags) => {
    await withDatabase(flags, async ({ skiplock }) => {
      const result = await skiplock.migrate();
      if (flags.json) printJson({ schema: skiplock.schema, ...result });
      else if (result.applied.length === 0)
        printText(`schema "${skiplock.schema}" is up to date (version ${result.version})`);
      else
        printText(
          `schema "${skiplock.schema}" migrated to version ${result.version} (applied ${result.applied.join(', ')})`,
        );
    });
  });
}
