// Module resolution hooks of hide-packages.mjs.
let hidden = [];

export function initialize(data) {
  hidden = data;
}

export async function resolve(specifier, context, next) {
  if (hidden.some((name) => specifier === name || specifier.startsWith(`${name}/`))) {
    const error = new Error(`Cannot find package '${specifier}' (hidden by the test)`);
    error.code = 'ERR_MODULE_NOT_FOUND';
    throw error;
  }
  return next(specifier, context);
}
