import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/fuzz/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 300_000,
    hookTimeout: 120_000,
    pool: 'forks',
  },
});
