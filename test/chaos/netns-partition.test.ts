/**
 * Worker processes as separate hosts: each runs in a network namespace of its
 * own, linked to this one by a veth pair (the suite's server listens on
 * loopback, so a plain forwarder on this side of each link leads to it). One
 * host is cut off with `ip link set … down` — its sockets stay open, no FIN,
 * no RST, TCP retransmits into the void — for longer than the visibility
 * timeout, then the link comes back. The same checks as the proxy partition:
 * its jobs are reclaimed by the other host's worker, its late results change
 * nothing, it claims again by itself after the heal.
 *
 * Needs root (or CAP_NET_ADMIN) and `ip`; where `ip netns add` or a veth pair
 * cannot be made, the test is skipped and its name and the log say why.
 */
import { describe, expect, it } from 'vitest';
import { startNetProxy } from '../support/net-proxy.js';
import { figure, startWorker, useChaosDatabase, workerConfig } from './support/cluster.js';
import { createNetHost, netnsUnavailable } from './support/netns.js';
import { partitionAndHeal } from './support/partition.js';

const t = useChaosDatabase();

const VISIBILITY_TIMEOUT_MS = 3000;

const unavailable = netnsUnavailable();
if (unavailable) console.log(`[chaos] netns-partition: skipped: ${unavailable}`);

describe.skipIf(unavailable !== undefined)(
  `chaos: worker hosts in network namespaces${unavailable ? ` (skipped: ${unavailable})` : ''}`,
  () => {
    /** A namespace whose processes reach the suite's server through its link; removed after the test. */
    async function host() {
      const server = new URL(t.url);
      const made = await createNetHost();
      t.defer(() => made.destroy());
      const forwarder = await startNetProxy(
        { host: server.hostname, port: Number(server.port || 5432) },
        { listenHost: made.gateway },
      );
      t.defer(() => forwarder.close());
      return { ...made, url: forwarder.url(t.url) };
    }

    it('a host cut off by `ip link set down` loses its jobs to another host, its late results change nothing, and it claims again once the link is up', async () => {
      const queue = 'netns';
      const [a, b] = [await host(), await host()];
      const config = (url: string) =>
        workerConfig(
          { url, schema: t.schema },
          { queues: [queue], concurrency: 2, visibilityTimeoutMs: VISIBILITY_TIMEOUT_MS },
        );
      const cut = await startWorker(t, config(a.url), { netns: a.netns });
      const figures = await partitionAndHeal(t, {
        queue,
        cut,
        startOther: () => startWorker(t, config(b.url), { netns: b.netns }),
        partition: () => a.down(),
        heal: () => a.up(),
        visibilityTimeoutMs: VISIBILITY_TIMEOUT_MS,
      });
      figure('netns-partition', { kills: 0, restarts: 0, ...figures });
      await cut.shutdown();
      expect(cut.exit).toEqual({ code: null, signal: 'SIGTERM' });
    });
  },
);
