/**
 * The listener's probe: one wake-up of type `probe` sent through the one
 * wake-up function, which a LISTEN connection that really hears gets back.
 */
import { type Queryable, run, type Statement } from '../executor.js';
import type { SchemaNames } from './schema-names.js';

/** The probe statement. */
export class ProbeQueries {
  readonly #probe: Statement;
  readonly #channel: string;

  constructor(names: SchemaNames) {
    this.#channel = names.channel;
    this.#probe = names.statement('probe', `SELECT ${names.wakeUp}($1, 'probe', $2, 0)`);
  }

  /**
   * Sends a probe carrying `token` on the schema's channel. Send it on another
   * connection than the listener's: a listener always hears its own session.
   */
  async send(db: Queryable, token: string): Promise<void> {
    await run(db, this.#probe, [this.#channel, token]);
  }
}
