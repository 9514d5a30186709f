import { describe, expect, it } from 'vitest';
import { TEST_SCHEMA } from '../support/database.js';
import { useFileDatabase } from '../support/file-database.js';
import { limitsWith, NO_LIMITS } from '../support/queue-limits.js';
import { cliOn } from './cli-process.js';

const { db, skiplock } = useFileDatabase();
const cli = cliOn(() => ({ url: db.url, schema: TEST_SCHEMA }));
/** `skiplock queues limits <queue> ...flags`, the command most of this file runs. */
const limits = (queue: string, ...flags: string[]) => cli('queues', 'limits', queue, ...flags);

describe('skiplock queues limits', () => {
  it('sets, shows and removes limits; the listing shows them; bad flags change nothing', async () => {
    const set = await limits('cli-l', '--concurrency', '3', '--rate', '50/1s');
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout.trim()).toBe('cli-l: limits concurrency 3, rate 50/1000ms');
    expect((await skiplock.queues()).find((q) => q.name === 'cli-l')?.limits).toEqual(
      limitsWith({ concurrency: 3, rate: { count: 50, periodMs: 1000 } }),
    );

    const rate = await limits('cli-l', '--rate', '1000/2m', '--json');
    expect(rate.code, rate.stderr).toBe(0);
    expect(JSON.parse(rate.stdout)).toEqual({
      queue: 'cli-l',
      limits: limitsWith({ concurrency: 3, rate: { count: 1000, periodMs: 120_000 } }),
    });
    const shown = await limits('cli-l');
    expect(shown.stdout.trim()).toBe('cli-l: limits concurrency 3, rate 1000/120000ms');
    const table = await cli('queues');
    expect(table.stdout).toMatch(/cli-l\s+running\s+0\s+0\s+concurrency 3, rate 1000\/120000ms/);

    for (const bad of [
      ['--concurrency', '0'],
      ['--concurrency', 'x'],
      ['--rate', '50'],
      ['--rate', '50/1d'],
      ['--rate', '0/1s'],
    ]) {
      const refused = await limits('cli-l', ...bad);
      expect(refused.code, bad.join(' ')).not.toBe(0);
    }
    const zeroRate = await limits('cli-l', '--rate', '0/1s');
    expect(zeroRate.code).toBe(2);
    expect(zeroRate.stderr).toMatch(
      /^skiplock: error: invalid --rate \(count\): must be ≥ 1\n\(add --help for usage\)\n$/m,
    );

    const cleared = await limits('cli-l', '--concurrency', 'none', '--rate', 'none');
    expect(cleared.code, cleared.stderr).toBe(0);
    expect(cleared.stdout.trim()).toBe('cli-l: limits none');
    expect((await skiplock.queues()).find((q) => q.name === 'cli-l')?.limits).toEqual(NO_LIMITS);
  });

  it('sets and removes group limits', async () => {
    const set = await limits('cli-g', '--group-concurrency', '2', '--group-rate', '5/1s', '--strict-order');
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout.trim()).toBe('cli-g: limits group concurrency 2, group rate 5/1000ms, strict order');
    const refused = await limits('cli-g', '--group-concurrency', '0');
    expect(refused.code).not.toBe(0);
    const cleared = await limits(
      'cli-g',
      '--group-concurrency',
      'none',
      '--group-rate',
      'none',
      '--no-strict-order',
      '--json',
    );
    expect(cleared.code, cleared.stderr).toBe(0);
    expect(JSON.parse(cleared.stdout)).toEqual({
      queue: 'cli-g',
      limits: NO_LIMITS,
    });
  });

  it('enqueue --group-key stores the key; jobs show prints it; a bad key exits 2 naming the flag, inserting nothing', async () => {
    const result = await cli('enqueue', 'k', '{}', '--queue', 'cli-g', '--group-key', 'acct-42', '--json');
    expect(result.code, result.stderr).toBe(0);
    const { id } = JSON.parse(result.stdout) as { id: string };
    expect((await skiplock.getJob(id))?.groupKey).toBe('acct-42');
    const shown = await cli('jobs', 'show', id);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('\ngroup_key     acct-42\n');
    const plain = await skiplock.enqueue('k', {}, { queue: 'cli-g' });
    expect((await cli('jobs', 'show', plain.id)).stdout).toContain('\ngroup_key     -\n');

    const before = (await skiplock.listJobs({ limit: 1000 })).length;
    const bad = await cli('enqueue', 'k', '--group-key', 'g'.repeat(201));
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('invalid --group-key: must be at most 200 characters');
    expect(await skiplock.listJobs({ limit: 1000 })).toHaveLength(before);
  });
});
