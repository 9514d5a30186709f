/**
 * Plays a browser's part over plain HTTP: read a page, keep its CSRF cookie and
 * token, post one of its forms from the same origin.
 */

/** A page's CSRF cookie (`name=value`) and the token its forms carry. */
export async function readCsrf(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers });
  const body = await res.text();
  const cookie = res.headers.get('set-cookie')?.split(';')[0];
  const token = /name="_csrf" value="([^"]+)"/.exec(body)?.[1];
  return { status: res.status, body, cookie, token };
}

/** POSTs a form as the dashboard's own page would (same Origin, cookie and token). */
export async function postForm(
  url: string,
  fields: Record<string, string>,
  options: { cookie?: string | undefined; origin?: string; headers?: Record<string, string> } = {},
): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    redirect: 'manual',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      origin: options.origin ?? new URL(url).origin,
      ...(options.cookie ? { cookie: options.cookie } : {}),
      ...options.headers,
    },
    body: new URLSearchParams(fields).toString(),
  });
}
