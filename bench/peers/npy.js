// A small .npy reader/writer (format versions 1.0, 2.0 and 3.0; C order; little-endian
// numeric and bool dtypes) for the ONNX Runtime peer. No dependencies.
'use strict';

const fs = require('fs');

const MAGIC = Buffer.from([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]);  // \x93NUMPY

// npy descr (without the byte-order char) -> ONNX Runtime tensor type and typed array.
const DTYPES = {
  f4: {type: 'float32', array: Float32Array},
  f8: {type: 'float64', array: Float64Array},
  f2: {type: 'float16', array: Uint16Array},
  i1: {type: 'int8', array: Int8Array},
  u1: {type: 'uint8', array: Uint8Array},
  i2: {type: 'int16', array: Int16Array},
  u2: {type: 'uint16', array: Uint16Array},
  i4: {type: 'int32', array: Int32Array},
  u4: {type: 'uint32', array: Uint32Array},
  i8: {type: 'int64', array: BigInt64Array},
  u8: {type: 'uint64', array: BigUint64Array},
  b1: {type: 'bool', array: Uint8Array},
};
const DESCR_OF_TYPE = {};
for (const [code, d] of Object.entries(DTYPES)) {
  if (!(d.type in DESCR_OF_TYPE)) DESCR_OF_TYPE[d.type] = (code[1] === '1' ? '|' : '<') + code;
}

function fail(path, why) {
  const e = new Error(`${path}: not a readable .npy file: ${why}`);
  e.code = 'BAD_NPY';
  return e;
}

// Parses the header dict ("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }").
function parseHeader(path, text) {
  const descr = /'descr'\s*:\s*'([^']*)'/.exec(text);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(text);
  const shape = /'shape'\s*:\s*\(([^)]*)\)/.exec(text);
  if (!descr || !fortran || !shape) throw fail(path, `bad header ${JSON.stringify(text.trim())}`);
  if (fortran[1] === 'True') throw fail(path, 'Fortran-order arrays are not supported');
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length > 0).map((s) => {
    if (!/^\d+$/.test(s)) throw fail(path, `bad shape (${shape[1]})`);
    return Number(s);
  });
  let code = descr[1];
  const order = code[0];
  if (order === '>' && code.slice(1) !== 'i1' && code.slice(1) !== 'u1' && code.slice(1) !== 'b1') {
    throw fail(path, `big-endian dtype ${code} is not supported`);
  }
  if ('<>|='.includes(order)) code = code.slice(1);
  if (!(code in DTYPES)) throw fail(path, `dtype ${descr[1]} is not supported`);
  return {code, dims};
}

// Returns {type, dims, data}: `type` an ONNX Runtime tensor type, `data` a typed array.
function readNpy(path) {
  let buf;
  try {
    buf = fs.readFileSync(path);
  } catch (e) {
    const err = new Error(`${path}: cannot read: ${e.code || e.message}`);
    err.code = 'BAD_NPY';
    throw err;
  }
  if (buf.length < 10 || !buf.subarray(0, 6).equals(MAGIC)) throw fail(path, 'no NUMPY magic');
  const major = buf[6];
  let headerLen;
  let offset;
  if (major === 1) {
    headerLen = buf.readUInt16LE(8);
    offset = 10;
  } else if (major === 2 || major === 3) {
    if (buf.length < 12) throw fail(path, 'truncated header');
    headerLen = buf.readUInt32LE(8);
    offset = 12;
  } else {
    throw fail(path, `format version ${major} is not supported`);
  }
  if (offset + headerLen > buf.length) throw fail(path, 'truncated header');
  const header = buf.toString(major === 3 ? 'utf8' : 'latin1', offset, offset + headerLen);
  const {code, dims} = parseHeader(path, header);
  const {type, array} = DTYPES[code];
  const numel = dims.reduce((a, b) => a * b, 1);
  const start = offset + headerLen;
  const bytes = numel * array.BYTES_PER_ELEMENT;
  if (buf.length - start < bytes) {
    throw fail(path, `${buf.length - start} data bytes, shape (${dims.join(', ')}) needs ${bytes}`);
  }
  // Copy into an aligned buffer of its own (the file buffer's offset need not be aligned).
  const data = new array(numel);
  Buffer.from(data.buffer).set(buf.subarray(start, start + bytes));
  return {type, dims, data};
}

// Writes a typed array as .npy (version 1.0). `type` is an ONNX Runtime tensor type.
function writeNpy(path, type, dims, data) {
  const descr = DESCR_OF_TYPE[type];
  if (!descr) throw new Error(`cannot write a ${type} tensor as .npy`);
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  // Pad with spaces so that magic + version + length + header + '\n' is a multiple of 64.
  const total = 10 + header.length + 1;
  header += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  MAGIC.copy(pre, 0);
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(path, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
}

module.exports = {readNpy, writeNpy};
