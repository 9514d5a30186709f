/**
 * The browser of the dashboard tests: the system's Chromium (Debian package
 * `chromium`) driven by playwright-core. Nothing downloads a browser; a missing
 * one fails the tests with the command that installs it.
 */
import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';

/** Path of the Chromium binary: `SKIPLOCK_CHROMIUM`, else Debian's. */
export const CHROMIUM = process.env.SKIPLOCK_CHROMIUM ?? '/usr/bin/chromium';

/** Launches headless Chromium. @throws when it is not installed. */
export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `no Chromium at ${CHROMIUM}: install it with \`apt-get install -y chromium\` (or set SKIPLOCK_CHROMIUM)`,
    );
  }
  return chromium.launch({ executablePath: CHROMIUM, headless: true });
}
