/** The machine and server the numbers were measured on, for the report. */
import { cpus, totalmem } from 'node:os';
import { adminQuery } from './database.js';
import type { MachineInfo } from './report.js';

/** Cores, memory, Node and PostgreSQL versions and the server settings that matter for a queue. */
export async function describeMachine(serverUrl: string, extra: string[]): Promise<MachineInfo> {
  const settings = await adminQuery<{ name: string; setting: string; unit: string | null }>(
    serverUrl,
    `SELECT name, setting, unit FROM pg_settings
     WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'max_connections', 'work_mem',
                    'autovacuum', 'autovacuum_naptime', 'wal_level', 'jit')
     ORDER BY name`,
  );
  const [version] = await adminQuery<{ v: string }>(serverUrl, 'SELECT version() AS v');
  const cpu = cpus();
  return {
    lines: [
      `date: ${new Date().toISOString()}`,
      `machine: ${cpu.length} cores (${cpu[0]?.model ?? 'unknown'}), ${(totalmem() / 2 ** 30).toFixed(1)} GiB memory`,
      `Node.js ${process.version}; ${version?.v.split(' on ')[0] ?? 'PostgreSQL ?'} at ${redact(serverUrl)}`,
      `server settings: ${settings.map((s) => `${s.name}=${s.setting}${s.unit ?? ''}`).join(', ')}`,
      ...extra,
    ],
  };
}

/** The URL without its password. */
export function redact(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.toString();
}
