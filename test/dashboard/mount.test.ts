/**
 * The dashboard mounted under a path prefix in Hono, Express and Fastify apps:
 * pages answer under the prefix with links under it, and an action's POST
 * (form body, CSRF cookie and token) goes through each framework.
 */
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { Hono } from 'hono';
import { afterAll, describe, expect, it } from 'vitest';
import { createDashboard, toNodeHandler } from '../../src/dashboard/index.js';
import { useFileDatabase } from '../support/file-database.js';
import { postForm, readCsrf } from './support/forms.js';

const PREFIX = '/admin/jobs';

const { db } = useFileDatabase();
const closers: (() => Promise<void>)[] = [];

afterAll(async () => {
  await Promise.all(closers.map((close) => close()));
});

/** Checks pages and a requeue through the app at `origin`. */
async function exercise(origin: string): Promise<void> {
  const skiplock = db.skiplock();
  const job = await skiplock.enqueue('mounted', { at: origin });
  await db.query(`UPDATE ${db.jobs} SET status = 'dead', attempts = 20 WHERE id = $1`, [job.id]);

  const home = await readCsrf(`${origin}${PREFIX}`);
  expect(home.status).toBe(200);
  expect(home.body).toContain(`href="${PREFIX}/jobs"`);
  expect(home.body).toContain(`<a class="brand" href="${PREFIX}">`);
  expect(home.cookie).toMatch(/^skiplock_csrf=/);
  const jobs = await fetch(`${origin}${PREFIX}/jobs?status=dead`);
  expect(jobs.status).toBe(200);
  expect(await jobs.text()).toContain(`href="${PREFIX}/jobs/${job.id}"`);
  expect((await fetch(`${origin}${PREFIX}/metrics`)).status).toBe(200);
  expect((await fetch(`${origin}/jobs`)).status).toBe(404);

  const res = await postForm(
    `${origin}${PREFIX}/jobs/${job.id}/requeue`,
    { _csrf: home.token!, back: `/jobs/${job.id}` },
    { cookie: home.cookie },
  );
  expect(res.status).toBe(303);
  expect(res.headers.get('location')).toBe(`${PREFIX}/jobs/${job.id}?notice=requeued`);
  await expect(db.query(`SELECT status FROM ${db.jobs} WHERE id = $1`, [job.id])).resolves.toEqual([
    { status: 'queued' },
  ]);
}

async function listen(server: import('node:http').Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('mounted under a path prefix', () => {
  it('in a Hono app (app.route)', async () => {
    const app = new Hono();
    app.get('/', (c) => c.text('the host app'));
    app.route('/', createDashboard(db.skiplock(), { basePath: PREFIX }));
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise<void>((resolve) => server.once('listening', resolve));
    closers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    await expect((await fetch(origin)).text()).resolves.toBe('the host app');
    await exercise(origin);
  });

  it('in an Express app (app.use with toNodeHandler)', async () => {
    const app = express();
    app.get('/', (_req, res) => {
      res.send('the host app');
    });
    app.use(PREFIX, toNodeHandler(createDashboard(db.skiplock(), { basePath: PREFIX })));
    const origin = await listen(app.listen(0, '127.0.0.1') as unknown as import('node:http').Server);
    await exercise(origin);
  });

  it('in a Fastify app (a scope that leaves form bodies to the dashboard)', async () => {
    const app = Fastify();
    app.get('/', async () => 'the host app');
    await app.register(async (scope) => {
      const handle = toNodeHandler(createDashboard(db.skiplock(), { basePath: PREFIX }));
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
      const route = (request: FastifyRequest, reply: FastifyReply) => {
        reply.hijack();
        handle(request.raw, reply.raw);
      };
      scope.all(PREFIX, route);
      scope.all(`${PREFIX}/*`, route);
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => app.close());
    const origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    await exercise(origin);
  });
});
