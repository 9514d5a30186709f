/**
 * The one way the dashboard writes HTML: hono's `html` tagged template, which
 * escapes every interpolated value (job payloads, errors, kinds and queue names
 * are data, never markup) unless it is itself a template result.
 */
import { html as honoHtml, raw } from 'hono/html';
import type { HtmlEscapedString } from 'hono/utils/html';

/** A piece of escaped HTML. */
export type Html = HtmlEscapedString;

/** `html\`<td>${value}</td>\``: strings and numbers are escaped; nested `html` results are kept. */
export const html = honoHtml as (strings: TemplateStringsArray, ...values: unknown[]) => Html;

/** Text already known to be safe markup (the dashboard's own CSS and script constants). */
export const trusted = raw as (text: string) => Html;
