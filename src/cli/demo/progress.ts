/**
 * The demo's live view: a progress bar for the orders and one per queue on a
 * terminal, or a status line every few seconds elsewhere (CI logs).
 */
import cliProgress from 'cli-progress';

/** Counts of one queue, read from the database. */
export interface QueueProgress {
  committed: number;
  finished: number;
  running: number;
  retrying: number;
  failedOrDead: number;
}

/** Draws progress on stderr; `update` is cheap to call often. */
export class DemoProgress {
  readonly #bars: cliProgress.MultiBar | undefined;
  readonly #orders: cliProgress.SingleBar | undefined;
  readonly #queues = new Map<string, cliProgress.SingleBar>();
  readonly #plain: boolean;
  #lastPlainAt = 0;

  /** @param mode - `bars` on a terminal, `lines` for logs, `off` (with --json). */
  constructor(
    readonly mode: 'bars' | 'lines' | 'off',
    readonly totalOrders: number,
    queues: readonly string[],
  ) {
    this.#plain = mode === 'lines';
    if (mode !== 'bars') return;
    this.#bars = new cliProgress.MultiBar(
      {
        format: ' {name} {bar} {value}/{total} {detail}',
        barsize: 30,
        hideCursor: true,
        clearOnComplete: false,
        stopOnComplete: false,
        autopadding: true,
      },
      cliProgress.Presets.shades_classic,
    );
    this.#orders = this.#bars.create(totalOrders, 0, { name: 'orders  ', detail: 'placed' });
    for (const queue of queues) {
      this.#queues.set(queue, this.#bars.create(1, 0, { name: queue.padEnd(8), detail: '' }));
    }
  }

  /** Redraws with the latest counts. */
  update(placed: number, queues: Map<string, QueueProgress>): void {
    if (this.#bars) {
      this.#orders!.update(placed);
      for (const [queue, bar] of this.#queues) {
        const q = queues.get(queue);
        if (!q) continue;
        bar.setTotal(Math.max(q.committed, 1));
        bar.update(q.finished, {
          detail: `done · ${q.running} running · ${q.retrying} waiting to retry · ${q.failedOrDead} failed/dead`,
        });
      }
    } else if (this.#plain && Date.now() - this.#lastPlainAt > 2000) {
      this.#lastPlainAt = Date.now();
      const parts = [...queues].map(([queue, q]) => `${queue} ${q.finished}/${q.committed} done`);
      process.stderr.write(`demo: orders ${placed}/${this.totalOrders} placed · ${parts.join(' · ')}\n`);
    }
  }

  /** Prints a message above the bars (or as a line). */
  say(message: string): void {
    if (this.mode === 'off') return;
    if (this.#bars) this.#bars.log(`${message}\n`);
    else process.stderr.write(`demo: ${message}\n`);
  }

  /** Stops drawing. */
  stop(): void {
    this.#bars?.stop();
  }
}
