'use strict';
// Errors: every failed call rejects with a TensordError carrying the gRPC status code name
// (err.code, e.g. 'INVALID_ARGUMENT'), its number (err.grpcCode) and the broker's message
// unchanged (err.details). err.message is "CODE: details", as tensord's Status prints.

const CODE_NAMES = [
  'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',
  'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED',
  'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED',
];

class TensordError extends Error {
  /**
   * @param {string} code  gRPC status code name ('NOT_FOUND', 'UNAVAILABLE', ...)
   * @param {string} details  the message (the broker's, unchanged, when fromBroker)
   * @param {{fromBroker?: boolean, local?: boolean, cause?: unknown}} [opts]
   */
  constructor(code, details, opts = {}) {
    super(`${code}: ${details}`, opts.cause !== undefined ? { cause: opts.cause } : undefined);
    this.name = 'TensordError';
    /** gRPC status code name. */
    this.code = code;
    /** gRPC status code number. */
    this.grpcCode = Math.max(0, CODE_NAMES.indexOf(code));
    /** The message without the code. */
    this.details = details;
    /** True when the broker raised it (not the transport, not this client). */
    this.fromBroker = !!opts.fromBroker;
    /** True when this client refused the call before sending anything. */
    this.local = !!opts.local;
  }
}

/**
 * A grpc-js ServiceError -> TensordError. Errors the broker raised (trailing metadata
 * "tensord-error: 1") keep its message; transport failures name the broker and the call, and
 * a broker that does not answer in time counts as UNAVAILABLE (as in the C++ RemoteClient).
 * @param {any} e
 * @param {string} address
 * @param {string} what
 */
function fromGrpc(e, address, what) {
  if (e instanceof TensordError) return e;
  const num = typeof e?.code === 'number' ? e.code : 2;
  const code = CODE_NAMES[num] || 'UNKNOWN';
  // grpc-js appends an empty "Resolution note: " to connection failures.
  const details = String(e?.details ?? e?.message ?? e).replace(/\.? Resolution note: *$/, '');
  let fromBroker = false;
  try {
    fromBroker = !!e?.metadata && e.metadata.get('tensord-error').length > 0;
  } catch { /* no metadata */ }
  if (fromBroker) return new TensordError(code, details, { fromBroker: true, cause: e });
  if (code === 'UNAVAILABLE' || code === 'DEADLINE_EXCEEDED') {
    return new TensordError('UNAVAILABLE',
                            `broker '${address}' is unavailable (${what} failed: ${details})`,
                            { cause: e });
  }
  return new TensordError(code, `broker '${address}': ${what} failed: ${details}`, { cause: e });
}

module.exports = { TensordError, fromGrpc, CODE_NAMES };
