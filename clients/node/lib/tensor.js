'use strict';
// Host tensors <-> wire bytes (row-major, little-endian, contiguous).

const os = require('os');
const { DTYPES, dtypeName, dtypeOfArray } = require('./dtypes');

if (os.endianness() !== 'LE') {
  throw new Error('tensord: this client supports little-endian hosts only (the wire is little-endian)');
}

/**
 * A tensor value on the host.
 * @typedef {Object} HostTensor
 * @property {import('./dtypes').DTypeName} dtype
 * @property {number[]} shape
 * @property {ArrayBufferView} data  Float32Array, Int32Array, BigInt64Array, ... (bool: Uint8Array
 *   of 0/1; float16/bfloat16: Uint16Array of raw bits)
 */

/** @param {number[]} shape */
function numel(shape) {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/**
 * Checks a shape given by a caller: an array of non-negative integers.
 * @param {unknown} shape
 * @param {string} what
 * @returns {number[]}
 */
function checkShape(shape, what) {
  if (!Array.isArray(shape)) throw invalid(`${what}: shape must be an array of integers, got ${typeof shape}`);
  return shape.map((d, i) => {
    const v = typeof d === 'bigint' ? Number(d) : d;
    if (!Number.isSafeInteger(v) || v < 0) {
      throw invalid(`${what}: shape[${i}] = ${String(d)} is not a non-negative integer`);
    }
    return v;
  });
}

/** An INVALID_ARGUMENT error raised in the client (before anything is sent). */
function invalid(message) {
  const { TensordError } = require('./errors');
  return new TensordError('INVALID_ARGUMENT', message, { local: true });
}

/**
 * Turns what a caller passes (typed array, Buffer, plain array of numbers / booleans / bigints,
 * or a {dtype, shape, data} object) into dtype, shape and the raw bytes.
 * @param {ArrayBufferView|Array<number|boolean|bigint>|number|boolean|bigint|HostTensor} data
 * @param {number[]|undefined} shape  default: [length] (scalars: [])
 * @param {string|number|undefined} dtype  default: from the typed array (plain numbers: float32)
 * @param {string} what  names the call in errors
 * @returns {{dtype: import('./dtypes').DTypeName, shape: number[], bytes: Buffer}}
 */
function toWire(data, shape, dtype, what) {
  if (data && typeof data === 'object' && !ArrayBuffer.isView(data) && !Array.isArray(data) &&
      'data' in data) {
    return toWire(data.data, shape ?? data.shape, dtype ?? data.dtype, what);
  }
  let name = dtype === undefined || dtype === null ? null : dtypeName(dtype);
  let scalar = false;
  if (typeof data === 'number' || typeof data === 'boolean' || typeof data === 'bigint') {
    data = [data];
    scalar = true;
  }
  /** @type {Buffer} */
  let bytes;
  let count;
  if (ArrayBuffer.isView(data) && !(data instanceof DataView)) {
    const own = dtypeOfArray(data);
    if (!name) name = own;
    // The array's own type (or Uint8Array as bool, Uint16Array as float16 bits): the bytes as
    // they are. Otherwise convert element by element (Float64Array -> float32 ...).
    const raw = own === name || (name === 'bool' && (own === 'uint8' || own === 'int8')) ||
                ((name === 'float16' || name === 'bfloat16') && own === 'uint16');
    if (raw) {
      bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
      count = data.length;
    } else if (own) {
      ({ bytes, count } = convert(Array.from(data), name, what));
    } else {
      throw invalid(`${what}: unsupported array type ${data.constructor.name}`);
    }
    if (name === 'bool') bytes = Buffer.from(bytes.map((b) => (b ? 1 : 0)));
  } else if (Array.isArray(data)) {
    if (!name) {
      if (data.length > 0 && data.every((v) => typeof v === 'boolean')) name = 'bool';
      else if (data.length > 0 && data.every((v) => typeof v === 'bigint')) name = 'int64';
      else name = 'float32';
    }
    ({ bytes, count } = convert(data, name, what));
  } else {
    throw invalid(`${what}: data must be a typed array, a Buffer, an array or a number, got ` +
                  (data === null ? 'null' : typeof data));
  }
  const s = shape === undefined || shape === null ? (scalar ? [] : [count]) : checkShape(shape, what);
  if (numel(s) !== count) {
    throw invalid(`${what}: shape [${s.join(',')}] holds ${numel(s)} elements, the data has ${count}`);
  }
  return { dtype: name, shape: s, bytes };
}

function convert(values, name, what) {
  const d = DTYPES[name];
  const out = new d.array(values.length);
  const big = name === 'int64' || name === 'uint64';
  for (let i = 0; i < values.length; ++i) {
    let v = values[i];
    if (typeof v === 'boolean') v = v ? 1 : 0;
    if (big) {
      if (typeof v === 'number') {
        if (!Number.isInteger(v)) throw invalid(`${what}: element ${i} (${v}) is not an integer for ${name}`);
        v = BigInt(v);
      }
      if (typeof v !== 'bigint') throw invalid(`${what}: element ${i} is not a number`);
    } else {
      if (typeof v === 'bigint') v = Number(v);
      if (typeof v !== 'number') throw invalid(`${what}: element ${i} is not a number`);
      if (name === 'bool') v = v ? 1 : 0;
      else if (name === 'float16') v = floatToHalf(v);
      else if (name === 'bfloat16') v = floatToBfloat16(v);
    }
    out[i] = v;
  }
  return { bytes: Buffer.from(out.buffer, out.byteOffset, out.byteLength), count: values.length };
}

/**
 * Wire bytes -> a typed array of the dtype (a copy, aligned).
 * @param {import('./dtypes').DTypeName} name
 * @param {number} count
 * @param {Uint8Array} bytes
 */
function fromWire(name, count, bytes) {
  const d = DTYPES[name];
  const buf = new ArrayBuffer(count * d.size);
  new Uint8Array(buf).set(bytes.subarray(0, count * d.size));
  return new d.array(buf);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float -> IEEE half bits (round to nearest even). */
function floatToHalf(v) {
  f32[0] = v;
  const x = u32[0];
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1))) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1))) h++;
  return sign | h;
}

/** IEEE half bits -> float. */
function halfToFloat(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

function floatToBfloat16(v) {
  f32[0] = v;
  const x = u32[0];
  if (Number.isNaN(v)) return (x >>> 16) | 0x40;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

function bfloat16ToFloat(b) {
  u32[0] = (b & 0xffff) << 16;
  return f32[0];
}

/**
 * The values of a host tensor as plain JS numbers (float16/bfloat16 decoded, bool as 0/1);
 * int64/uint64 stay bigints.
 * @param {HostTensor} t
 * @returns {Array<number|bigint>}
 */
function toNumbers(t) {
  if (t.dtype === 'float16') return Array.from(t.data, halfToFloat);
  if (t.dtype === 'bfloat16') return Array.from(t.data, bfloat16ToFloat);
  return Array.from(/** @type {any} */ (t.data));
}

module.exports = {
  numel, checkShape, toWire, fromWire, toNumbers, floatToHalf, halfToFloat, floatToBfloat16,
  bfloat16ToFloat, invalid,
};
