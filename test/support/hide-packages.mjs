// Loaded with `--import`: makes the packages named in SKIPLOCK_TEST_HIDE (comma-separated)
// impossible to resolve, as if they were not installed.
import { register } from 'node:module';

const hidden = (process.env.SKIPLOCK_TEST_HIDE ?? '').split(',').filter(Boolean);
register(new URL('./hide-packages-hooks.mjs', import.meta.url), { data: hidden });
