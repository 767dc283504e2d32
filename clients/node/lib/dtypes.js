'use strict';
// Element types. The numbers are ONNX's TensorProto.DataType, as on the wire (tensord.v1).

/**
 * @typedef {'float32'|'uint8'|'int8'|'uint16'|'int16'|'int32'|'int64'|'bool'|'float16'|
 *           'float64'|'uint32'|'uint64'|'bfloat16'} DTypeName
 */

/** @type {Record<DTypeName, {code: number, size: number, array: Function}>} */
const DTYPES = {
  float32: { code: 1, size: 4, array: Float32Array },
  uint8: { code: 2, size: 1, array: Uint8Array },
  int8: { code: 3, size: 1, array: Int8Array },
  uint16: { code: 4, size: 2, array: Uint16Array },
  int16: { code: 5, size: 2, array: Int16Array },
  int32: { code: 6, size: 4, array: Int32Array },
  int64: { code: 7, size: 8, array: BigInt64Array },
  bool: { code: 9, size: 1, array: Uint8Array },
  float16: { code: 10, size: 2, array: Uint16Array }, // raw IEEE half bits
  float64: { code: 11, size: 8, array: Float64Array },
  uint32: { code: 12, size: 4, array: Uint32Array },
  uint64: { code: 13, size: 8, array: BigUint64Array },
  bfloat16: { code: 16, size: 2, array: Uint16Array }, // raw bfloat16 bits
};

const ALIASES = {
  float: 'float32', f4: 'float32', double: 'float64', f8: 'float64', half: 'float16',
  f2: 'float16', i1: 'int8', u1: 'uint8', i2: 'int16', u2: 'uint16', i4: 'int32',
  u4: 'uint32', i8: 'int64', u8: 'uint64', long: 'int64', int: 'int32', boolean: 'bool',
};

function invalid(message) {
  const { TensordError } = require('./errors');
  return new TensordError('INVALID_ARGUMENT', message, { local: true });
}

const BY_CODE = new Map(Object.entries(DTYPES).map(([name, d]) => [d.code, name]));

/**
 * A dtype name or ONNX number -> the canonical name; throws INVALID_ARGUMENT for anything else.
 * @param {DTypeName|string|number} d
 * @returns {DTypeName}
 */
function dtypeName(d) {
  if (typeof d === 'number') {
    const n = BY_CODE.get(d);
    if (!n) throw invalid(`unknown dtype number ${d} (ONNX TensorProto.DataType)`);
    return n;
  }
  if (typeof d === 'string') {
    const key = d.toLowerCase();
    if (DTYPES[key]) return /** @type {DTypeName} */ (key);
    if (ALIASES[key]) return ALIASES[key];
  }
  throw invalid(`unknown dtype ${JSON.stringify(d)}; expected one of ` +
                Object.keys(DTYPES).join(', '));
}

/** @param {string|number} d */
function dtypeCode(d) { return DTYPES[dtypeName(d)].code; }

/**
 * The dtype a typed array stands for (Uint16Array and Uint8Array: uint16/uint8 unless told).
 * @param {ArrayBufferView} a
 * @returns {DTypeName|null}
 */
function dtypeOfArray(a) {
  if (a instanceof Float32Array) return 'float32';
  if (a instanceof Float64Array) return 'float64';
  if (a instanceof Int32Array) return 'int32';
  if (a instanceof BigInt64Array) return 'int64';
  if (a instanceof BigUint64Array) return 'uint64';
  if (a instanceof Uint32Array) return 'uint32';
  if (a instanceof Int16Array) return 'int16';
  if (a instanceof Uint16Array) return 'uint16';
  if (a instanceof Int8Array) return 'int8';
  if (a instanceof Uint8Array || a instanceof Uint8ClampedArray) return 'uint8';
  return null;
}

module.exports = { DTYPES, dtypeName, dtypeCode, dtypeOfArray };
