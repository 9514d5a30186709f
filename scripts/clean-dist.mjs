// A build starts from an empty dist/, so nothing left over from an earlier build (a removed module,
// an old source map) is published.
import { rmSync } from 'node:fs';

rmSync('dist', { recursive: true, force: true });
