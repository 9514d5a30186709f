/**
 * The setup of a dashboard test file that drives a real browser: the file's
 * database (useFileDatabase), headless Chromium, and the dashboards the file
 * serves on that database, all closed after its last test.
 */
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, expect } from 'vitest';
import {
  type DashboardServer,
  type ServeDashboardOptions,
  serveDashboard,
} from '../../../src/dashboard/index.js';
import type { TestDatabase } from '../../support/database.js';
import { useFileDatabase } from '../../support/file-database.js';
import { launchBrowser } from './browser.js';

/** What a dashboard browser test works with. */
export interface DashboardInBrowser {
  /** The file's database (migrated, empty until the file seeds it). */
  db: TestDatabase;
  /** The browser; there from the file's first hook on. */
  browser(): Browser;
  /** Serves a dashboard on the file's database: a free port, no auto-refresh, then `options`. */
  serve(options?: ServeDashboardOptions): Promise<DashboardServer>;
  /**
   * A fresh page, 1280 px wide and `heightPx` high, at `path` of `server` (a
   * leading `/` ignored), that records every dialog it sees as
   * `type: message` and dismisses it.
   */
  openPage(
    server: DashboardServer,
    path: string,
    heightPx: number,
  ): Promise<{ page: Page; dialogs: string[] }>;
  /**
   * Serves a dashboard that refreshes every 500 ms, opens `path` of it in a
   * fresh page, marks the document and runs `use` on the page; then expects the
   * mark still there (the page refreshed in place, never reloaded), and closes
   * the page and the dashboard.
   */
  inRefreshingPage(path: string, use: (page: Page) => Promise<void>): Promise<void>;
}

/** Registers the hooks; register the file's own after it, so they run once the database and browser are there. */
export function useDashboardInBrowser(): DashboardInBrowser {
  const { db } = useFileDatabase();
  let browser: Browser | undefined;
  const servers: DashboardServer[] = [];
  beforeAll(async () => {
    browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });
  const context: DashboardInBrowser = {
    db,
    browser: () => {
      if (!browser) throw new Error('the browser is only there inside a test or hook');
      return browser;
    },
    serve: async (options = {}) => {
      const server = await serveDashboard(db.skiplock(), { port: 0, refreshIntervalMs: 0, ...options });
      servers.push(server);
      return server;
    },
    openPage: async (server, path, heightPx) => {
      const page = await context.browser().newPage({ viewport: { width: 1280, height: heightPx } });
      const dialogs: string[] = [];
      page.on('dialog', (dialog) => {
        dialogs.push(`${dialog.type()}: ${dialog.message()}`);
        void dialog.dismiss();
      });
      await page.goto(new URL(path.replace(/^\//, ''), server.url).href);
      return { page, dialogs };
    },
    inRefreshingPage: async (path, use) => {
      const live = await serveDashboard(db.skiplock(), { port: 0, refreshIntervalMs: 500 });
      const page = await context.browser().newPage();
      try {
        await page.goto(new URL(path, live.url).href);
        // Marks this document: a reload would lose the mark. (Strings are not evaluated: the CSP forbids eval.)
        await page.evaluate(() => {
          (globalThis as unknown as { marker: string }).marker = 'same document';
        });
        await use(page);
        await expect(page.evaluate(() => (globalThis as unknown as { marker: string }).marker)).resolves.toBe(
          'same document',
        );
      } finally {
        await page.close();
        await live.close();
      }
    },
  };
  return context;
}
