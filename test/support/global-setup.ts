/**
 * Vitest global setup: the PostgreSQL the suite runs on. `DATABASE_URL` points
 * it at any server (each test file makes its own database there); without it, an
 * embedded PostgreSQL 18 is started for the run and removed after.
 */
import type { TestProject } from 'vitest/node';
import { startTestServer, type TestServer } from './pg-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
  }
}

let server: TestServer | undefined;

export async function setup(project: TestProject): Promise<void> {
  const url = process.env.DATABASE_URL;
  if (url) {
    project.provide('adminUrl', url);
    return;
  }
  server = await startTestServer();
  project.provide('adminUrl', server.url);
}

export async function teardown(): Promise<void> {
  await server?.destroy();
}
