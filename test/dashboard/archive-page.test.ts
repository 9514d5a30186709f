/** The dashboard's archive page given query strings no link of its own makes. */
import { describe, expect, it } from 'vitest';
import { useDashboardRequests } from './support/dashboard-requests.js';

const { get } = useDashboardRequests();

describe('dashboard archive page', () => {
  it('answers 400 to a page cursor or a day that is no instant, not 500', async () => {
    for (const path of [
      '/archive?before=2026-13-45T99:99:99.000000Z~1',
      '/archive?before=0000-01-01T00:00:00.000000Z~1',
      '/archive?before=2026-02-30T00:00:00.000000Z~1',
    ]) {
      const res = await get(path);
      expect([path, res.status, res.body]).toEqual([path, 400, expect.stringContaining('Bad page cursor.')]);
    }
    for (const path of ['/archive?since=2026-02-30', '/archive?until=2026-13-01']) {
      const res = await get(path);
      expect([path, res.status]).toEqual([path, 400]);
    }
  });

  it('takes a cursor it made itself and a range of real days', async () => {
    for (const path of [
      '/archive?before=2026-12-01T23:59:59.999999Z~1',
      '/archive?since=2024-02-29&until=2024-02-29',
      '/archive?until=9999-12-31',
    ]) {
      expect([path, (await get(path)).status]).toEqual([path, 200]);
    }
  });
});
