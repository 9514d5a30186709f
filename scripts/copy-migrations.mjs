// The migrations are plain .sql files read at run time; tsc does not copy them.
import { chmodSync, cpSync } from 'node:fs';

cpSync('src/migrations', 'dist/migrations', { recursive: true, filter: (p) => !p.endsWith('.ts') });
chmodSync('dist/cli/main.js', 0o755);
