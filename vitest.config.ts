import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/chaos/**', 'test/fuzz/**', 'node_modules/**'],
    globalSetup: ['test/support/global-setup.ts'],
    // Generous: a test that spawns many processes (the CLI's) takes a minute or
    // more on a loaded 2-core machine; conditions inside tests have their own deadlines.
    testTimeout: 180_000,
    hookTimeout: 120_000,
    pool: 'forks',
    // Two files at a time even on 2 cores (vitest's default there is one): most
    // of a file's time is spent waiting on processes, servers and deadlines,
    // and each file has a database of its own. The chaos suite, which restarts
    // the server, keeps one file at a time.
    maxWorkers: Math.max(2, availableParallelism() - 1),
    typecheck: { enabled: true, include: ['test/**/*.test-d.ts'] },
  },
});
