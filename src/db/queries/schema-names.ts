/**
 * The names one schema's statements are built from: the quoted schema and its
 * tables, the wake-up channel, and a prefix that keeps prepared-statement names
 * apart when several schemas share a pool. Built once per Skiplock.
 */
import { createHash } from 'node:crypto';
import type { Statement } from '../executor.js';
import { channelName, quoteIdent } from '../sql.js';

/** Quoted identifiers and per-schema names of one skiplock schema. */
export interface SchemaNames {
  /** The schema, unquoted. */
  schema: string;
  /** The schema, quoted. */
  quoted: string;
  /** `"schema".jobs` */
  jobs: string;
  /** `"schema".jobs_archive` */
  archive: string;
  /** `"schema".queues`: per-queue settings (paused). */
  queues: string;
  /** `"schema".relays`: the registered relays and the queues they relay. */
  relays: string;
  /** `"schema".group_rate_slots`: recent starts per group key, for a queue's per-key rate. */
  groupRateSlots: string;
  /** `"schema".wake_up`: the one function that sends a wake-up message. */
  wakeUp: string;
  /** `"schema".control`: sends a control message (cancel, pause, resume) with job ids. */
  control: string;
  /** The LISTEN/NOTIFY channel. */
  channel: string;
  /** Makes a named statement whose name is unique to this schema and this text. */
  statement(name: string, text: string): Statement;
}

/** Builds the names of `schema` (validated by the caller). */
export function schemaNames(schema: string): SchemaNames {
  const quoted = quoteIdent(schema);
  // Prepared statement names are per connection; the schema makes them unique
  // when several schemas share a pool, and the text's hash when several versions
  // of skiplock share server connections (behind a transaction pooler), so a name
  // never runs another text. The server reads 63 bytes of a name: the readable
  // part is cut to fit.
  const prefix = `skiplock_${sha256Hex(schema).slice(0, 12)}_`;
  return {
    schema,
    quoted,
    jobs: `${quoted}.jobs`,
    archive: `${quoted}.jobs_archive`,
    queues: `${quoted}.queues`,
    relays: `${quoted}.relays`,
    groupRateSlots: `${quoted}.group_rate_slots`,
    wakeUp: `${quoted}.wake_up`,
    control: `${quoted}.control`,
    channel: channelName(schema),
    statement: (name, text) => ({
      name: `${prefix}${name.slice(0, 32)}_${sha256Hex(text).slice(0, 8)}`,
      text,
    }),
  };
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
