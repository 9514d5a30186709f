/**
 * Screenshots of dashboard pages: each is written to a temporary folder and
 * checked to be a real image; with SKIPLOCK_SCREENSHOTS=docs it also replaces
 * docs/dashboard-NAME.png (how the README's pictures are made).
 */
import { copyFileSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { expect } from 'vitest';

/** A temporary folder for screenshots, and its removal. */
export function screenshotFolder(): { dir: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'skiplock-dashboard-shots-'));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Saves a full-page screenshot of `page` as `NAME.png` in `dir` (and in docs/ when asked). */
export async function screenshot(page: Page, dir: string, name: string): Promise<void> {
  const file = join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  expect(statSync(file).size).toBeGreaterThan(10_000);
  if (process.env.SKIPLOCK_SCREENSHOTS === 'docs') {
    copyFileSync(file, new URL(`../../../docs/dashboard-${name}.png`, import.meta.url));
  }
}
