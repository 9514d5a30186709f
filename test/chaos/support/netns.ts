/**
 * Hosts of their own for worker processes: a network namespace (`ip netns`)
 * joined to this one by a veth pair on a /30 of 10.231.0.0/16. A process in
 * the namespace reaches this one only through the pair, so `ip link set …
 * down` on this side cuts it off as a pulled cable would: its sockets stay
 * open and TCP retransmits until the link is back. Needs root (or
 * CAP_NET_ADMIN) and the `ip` program; {@link netnsUnavailable} says why not.
 */
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** One namespace and its link to this one. */
export interface NetHost {
  /** The namespace's name, for `ip netns exec`. */
  readonly netns: string;
  /** This side's address on the link: what the namespace connects to. */
  readonly gateway: string;
  /** The namespace's address on the link. */
  readonly address: string;
  /** Takes this side of the link down: nothing passes either way, no socket is told. */
  down(): Promise<void>;
  /** Brings the link back up. */
  up(): Promise<void>;
  /** Removes the namespace (and with it the link). */
  destroy(): Promise<void>;
}

let hosts = 0;

/** Why network namespaces cannot be used here, or undefined when they can. */
export function netnsUnavailable(): string | undefined {
  if (process.platform !== 'linux') return `network namespaces are Linux only (this is ${process.platform})`;
  const probe = `skl-probe-${process.pid}`;
  const link = `skp${process.pid % 1_000_000}`;
  try {
    execFileSync('ip', ['netns', 'add', probe], { stdio: 'pipe' });
  } catch (error) {
    return `\`ip netns add\` failed: ${firstLine(error)}`;
  }
  try {
    execFileSync('ip', ['link', 'add', link, 'type', 'veth', 'peer', 'name', `${link}n`, 'netns', probe], {
      stdio: 'pipe',
    });
    return undefined;
  } catch (error) {
    return `\`ip link add … type veth\` failed: ${firstLine(error)}`;
  } finally {
    for (const args of [
      ['link', 'del', link],
      ['netns', 'del', probe],
    ]) {
      try {
        execFileSync('ip', args, { stdio: 'ignore' });
      } catch {
        // Not there (removing the namespace removes the pair too).
      }
    }
  }
}

function firstLine(error: unknown): string {
  const stderr = (error as { stderr?: Buffer }).stderr?.toString().trim();
  return (stderr || (error instanceof Error ? error.message : String(error))).split('\n')[0]!;
}

/** Makes a namespace linked to this one; each call gets its own /30. */
export async function createNetHost(): Promise<NetHost> {
  const n = ++hosts;
  const tag = `${process.pid % 1_000_000}x${n}`;
  const netns = `skl-${tag}`;
  const outside = `sk${tag}`;
  const inside = `sk${tag}n`;
  // A /30 per host: the third byte from the pid, the fourth from the count, so parallel runs rarely meet.
  const subnet = `10.231.${process.pid % 250}`;
  const gateway = `${subnet}.${4 * n + 1}`;
  const address = `${subnet}.${4 * n + 2}`;
  const ip = (...args: string[]) => run('ip', args);
  const destroy = async () => {
    await ip('link', 'del', outside).catch(() => {});
    await ip('netns', 'del', netns).catch(() => {});
  };
  try {
    await ip('netns', 'add', netns);
    await ip('link', 'add', outside, 'type', 'veth', 'peer', 'name', inside, 'netns', netns);
    await ip('addr', 'add', `${gateway}/30`, 'dev', outside);
    await ip('link', 'set', outside, 'up');
    await ip('-n', netns, 'addr', 'add', `${address}/30`, 'dev', inside);
    await ip('-n', netns, 'link', 'set', inside, 'up');
    await ip('-n', netns, 'link', 'set', 'lo', 'up');
  } catch (error) {
    await destroy();
    throw error;
  }
  return {
    netns,
    gateway,
    address,
    down: async () => {
      await ip('link', 'set', outside, 'down');
    },
    up: async () => {
      await ip('link', 'set', outside, 'up');
    },
    destroy,
  };
}
