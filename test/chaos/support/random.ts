/**
 * Seeded randomness for the chaos scenarios: each scenario prints its seed,
 * and `CHAOS_SEED=<seed>` replays the same choices (the timing of the
 * processes still varies from run to run).
 */
import fc from 'fast-check';

/** The seed of this run: `CHAOS_SEED` when given, else a fresh one. */
export function chaosSeed(): number {
  const given = process.env.CHAOS_SEED;
  if (given !== undefined && given !== '') {
    const seed = Number(given);
    if (!Number.isSafeInteger(seed)) throw new Error(`CHAOS_SEED must be an integer, got '${given}'`);
    return seed;
  }
  return Math.floor(Math.random() * 2 ** 31);
}

/** A stream of uniform numbers in [0, 1) drawn from `seed` (fast-check's generator, unbiased). */
export class SeededRandom {
  readonly #next: Iterator<number>;

  constructor(seed: number) {
    const [stream] = fc.sample(fc.infiniteStream(fc.noBias(fc.integer({ min: 0, max: 2 ** 31 - 1 }))), {
      seed,
      numRuns: 1,
    });
    this.#next = stream![Symbol.iterator]();
  }

  /** A number in [0, 1). */
  next(): number {
    return (this.#next.next().value as number) / 2 ** 31;
  }

  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  /** One element of a non-empty list. */
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }

  /** Up to `count` distinct elements of `items`, in a random order. */
  sample<T>(items: readonly T[], count: number): T[] {
    const copy = [...items];
    const n = Math.min(count, copy.length);
    for (let i = 0; i < n; i++) {
      const j = i + Math.floor(this.next() * (copy.length - i));
      [copy[i], copy[j]] = [copy[j]!, copy[i]!];
    }
    return copy.slice(0, n);
  }
}
