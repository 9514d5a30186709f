/** The psql client, for tests that run SQL files the way operators do. */
import { execFileSync } from 'node:child_process';

/** Whether `psql` is on the PATH. */
export function hasPsql(): boolean {
  try {
    execFileSync('psql', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
