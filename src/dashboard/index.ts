/**
 * `skiplock/dashboard`: the web dashboard, to mount in an app or serve alone.
 */
export { createDashboard, toNodeHandler } from './app.js';
export type { DashboardEnv } from './context.js';
export type { DashboardOptions } from './options.js';
export { type DashboardServer, isLoopback, type ServeDashboardOptions, serveDashboard } from './serve.js';
