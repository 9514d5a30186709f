/** The line a command prints when it falls back to the embedded PostgreSQL. */
import { describe, expect, it } from 'vitest';
import { embeddedNotice } from '../../src/cli/database.js';

const embedded = {
  url: 'postgres://postgres:pw@127.0.0.1:5433/postgres',
  dir: '/app/.skiplock',
  started: true,
};

describe('the embedded fallback notice', () => {
  it('says no URL was set, which server it uses and where its data lives, password masked', () => {
    expect(embeddedNotice(embedded, { HOME: '/root' })).toBe(
      'skiplock: database postgres://postgres:****@127.0.0.1:5433/postgres (embedded PostgreSQL, data in /app/.skiplock, started): no --database-url or DATABASE_URL set',
    );
  });

  it('names every other variable holding a postgres:// URL, never its value', () => {
    const line = embeddedNotice(
      { ...embedded, started: false },
      { DATABSE_URL: 'postgres://u:secret@db/app', PG_URL: 'postgresql://db/app', OTHER: 'http://x' },
    );
    expect(line).toMatch(
      /already running\): no --database-url or DATABASE_URL set; DATABSE_URL, PG_URL hold a postgres:\/\/ URL: did you mean DATABASE_URL\?$/,
    );
    expect(line).not.toContain('secret');
  });
});
