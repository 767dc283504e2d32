'use strict';
// ONNX files -> tensord graphs, in JS: the ModelProto is decoded with protobufjs against
// onnx.proto (a copy of Debian libonnx-dev's /usr/include/onnx/onnx.proto, in ../proto) and
// translated like the C++ importer (src/onnx/onnx_import.cpp): initializers become graph
// initializers (external data files are read from the model's folder), graph inputs with an
// initializer are not runtime inputs, nodes keep ONNX's op names and attributes, and older
// opsets are rewritten into the opset-17 forms the broker's IR uses (Clip/Slice/Pad/Split/
// ReduceSum/Squeeze/Unsqueeze/TopK/Dropout ... attribute -> input). Three old forms that need
// new nodes (Upsample, opset-10 Resize, pre-13 Softmax/LogSoftmax/Hardmax) are refused with
// UNIMPLEMENTED naming the node.

const fs = require('fs');
const path = require('path');
const { TensordError } = require('./errors');
const { DTYPES, dtypeName } = require('./dtypes');
const { attr } = require('./graph');
const { fromWire, numel } = require('./tensor');

const MIN_OPSET = 1;
const MAX_OPSET = 17;
const A = { FLOAT: 1, INT: 2, STRING: 3, TENSOR: 4, GRAPH: 5, FLOATS: 6, INTS: 7, STRINGS: 8 };

let onnxRoot = null;
function types() {
  if (!onnxRoot) {
    const protobuf = require('protobufjs');
    onnxRoot = new protobuf.Root();
    onnxRoot.loadSync(path.join(__dirname, '..', 'proto', 'onnx.proto'), { keepCase: true });
  }
  return {
    ModelProto: onnxRoot.lookupType('onnx.ModelProto'),
    TensorProto: onnxRoot.lookupType('onnx.TensorProto'),
  };
}

const has = (m, k) => Object.prototype.hasOwnProperty.call(m, k);

/** A protobufjs int64 (Long or number) -> number, refusing values past 2^53. */
function num(x, what) {
  const v = typeof x === 'number' ? x : Number(x.toString());
  if (!Number.isSafeInteger(v)) throw new Error(`${what}: ${x} is out of range`);
  return v;
}
const big = (x) => BigInt(x.toString());

function readSource(source) {
  if (typeof source === 'string') {
    let bytes;
    try {
      bytes = fs.readFileSync(source);
    } catch (e) {
      throw new TensordError('NOT_FOUND', `cannot open '${source}': ${e.code || e.message}`, { local: true });
    }
    return { bytes, what: source, baseDir: path.dirname(source) };
  }
  if (source instanceof Uint8Array) return { bytes: source, what: '<onnx bytes>', baseDir: '' };
  throw new TensordError('INVALID_ARGUMENT', 'expected a file path or the bytes of an ONNX file', { local: true });
}

class Importer {
  constructor(what, baseDir) {
    this.what = what;
    this.baseDir = baseDir;
    this.opset = 0;
    this.counter = 0;
  }

  err(msg, code = 'INVALID_ARGUMENT') {
    return new TensordError(code, `${this.what}: ${msg}`, { local: true });
  }

  /** onnx.TensorProto -> {dtype, shape, bytes} (the wire form of a tensor). */
  tensor(t) {
    const name = t.name || '';
    if (t.data_type === 8) throw this.err(`tensor '${name}' is a string tensor (out of scope)`, 'UNIMPLEMENTED');
    let dtype;
    try {
      dtype = dtypeName(t.data_type);
    } catch {
      throw this.err(`tensor '${name}' has unsupported data type ${t.data_type}`);
    }
    const shape = t.dims.map((d) => {
      const v = num(d, `${this.what}: tensor '${name}' dimension`);
      if (v < 0) throw this.err(`tensor '${name}' has a negative dimension ${v}`);
      return v;
    });
    const n = numel(shape);
    const esize = DTYPES[dtype].size;
    const size = n * esize;
    if (!Number.isSafeInteger(size) || size > 2 ** 40) {
      throw this.err(`tensor '${name}' of shape [${shape}] is absurdly large`);
    }
    if (t.data_location === 1) return { dtype, shape, bytes: this.external(t, size) };
    if (has(t, 'raw_data')) {
      if (t.raw_data.length !== size) {
        throw this.err(`tensor '${name}': raw_data has ${t.raw_data.length} bytes, shape [${shape}] ` +
                       `of ${dtype} needs ${size}`);
      }
      return { dtype, shape, bytes: Buffer.from(t.raw_data) };
    }
    let src;
    switch (dtype) {
      case 'float32': src = t.float_data; break;
      case 'float64': src = t.double_data; break;
      case 'int64': src = t.int64_data; break;
      case 'uint32': case 'uint64': src = t.uint64_data; break;
      default: src = t.int32_data; break;
    }
    if (src.length !== n) throw this.err(`tensor '${name}' has ${src.length} values, shape [${shape}] needs ${n}`);
    const out = new DTYPES[dtype].array(n);
    for (let i = 0; i < n; ++i) {
      const v = src[i];
      if (dtype === 'int64' || dtype === 'uint64') out[i] = dtype === 'int64' ? BigInt.asIntN(64, big(v)) : BigInt.asUintN(64, big(v));
      else if (dtype === 'uint32') out[i] = num(v, this.what);
      else if (dtype === 'bool') out[i] = v ? 1 : 0;
      else out[i] = v;  // typed-array assignment truncates int32_data to 8/16 bits as C++ does
    }
    return { dtype, shape, bytes: Buffer.from(out.buffer, out.byteOffset, out.byteLength) };
  }

  external(t, expected) {
    const name = t.name || '';
    let location = '';
    let offset = 0;
    let length = -1;
    for (const kv of t.external_data) {
      if (kv.key === 'location') location = kv.value;
      else if (kv.key === 'offset' || kv.key === 'length') {
        if (!/^[0-9]+$/.test(kv.value)) throw this.err(`tensor '${name}': bad external_data value '${kv.value}' for '${kv.key}'`);
        if (kv.key === 'offset') offset = Number(kv.value); else length = Number(kv.value);
      }
    }
    if (!location) throw this.err(`tensor '${name}' has external data without a location`);
    if (!this.baseDir) throw this.err(`tensor '${name}' uses external data '${location}', which needs the model's folder (load it by path)`);
    if (path.isAbsolute(location) || location.includes('..')) {
      throw this.err(`tensor '${name}': external data path '${location}' must be relative to the model folder, without '..'`);
    }
    if (length < 0) length = expected;
    if (length !== expected) throw this.err(`tensor '${name}': external data length ${length} disagrees with its shape (${expected} bytes)`);
    const file = path.join(this.baseDir, location);
    let fd;
    try {
      fd = fs.openSync(file, 'r');
    } catch {
      throw this.err(`tensor '${name}': cannot open external data file '${file}'`);
    }
    try {
      // The real path must stay inside the model folder: a symlink there must not lead the
      // loader to files elsewhere (it would send their bytes to the broker).
      const realBase = fs.realpathSync(this.baseDir);
      const realFile = fs.realpathSync(file);
      if (!realFile.startsWith(realBase + path.sep)) {
        throw this.err(`tensor '${name}': external data file '${location}' resolves to a path outside the model folder (through a symbolic link); refused`);
      }
      if (!fs.fstatSync(fd).isFile()) throw this.err(`tensor '${name}': external data '${location}' is not a regular file`);
      const fileSize = fs.fstatSync(fd).size;
      if (offset + length > fileSize) {
        throw this.err(`tensor '${name}': external data [${offset}, ${offset + length}) is past the end of '${file}' (${fileSize} bytes)`);
      }
      const buf = Buffer.alloc(length);
      fs.readSync(fd, buf, 0, length, offset);
      return buf;
    } finally {
      fs.closeSync(fd);
    }
  }

  valueType(v) {
    const name = v.name || '';
    if (!v.type) return { name };
    if (!v.type.tensor_type) {
      throw this.err(`value '${name}' is not a tensor (sequence/map/optional types are out of scope)`, 'UNIMPLEMENTED');
    }
    const tt = v.type.tensor_type;
    const out = { name };
    if (tt.elem_type === 8) throw this.err(`value '${name}' is a string tensor (out of scope)`, 'UNIMPLEMENTED');
    if (tt.elem_type) {
      try {
        out.dtype = dtypeName(tt.elem_type);
      } catch {
        throw this.err(`value '${name}' has unsupported element type ${tt.elem_type}`);
      }
    }
    if (tt.shape) {
      out.shape = tt.shape.dim.map((d) => {
        if (has(d, 'dim_value')) {
          const x = num(d.dim_value, this.what);
          if (x < 0) throw this.err(`value '${name}' has a negative dimension ${x}`);
          return x;
        }
        return -1;
      });
    }
    return out;
  }

  attribute(a, label) {
    let type = a.type;
    if (!type) {  // very old files leave the type out: take the field that is set
      if (has(a, 'f')) type = A.FLOAT; else if (has(a, 'i')) type = A.INT;
      else if (has(a, 's')) type = A.STRING; else if (has(a, 't')) type = A.TENSOR;
      else if (has(a, 'g')) type = A.GRAPH; else if (a.floats.length) type = A.FLOATS;
      else if (a.ints.length) type = A.INTS; else if (a.strings.length) type = A.STRINGS;
    }
    switch (type) {
      case A.FLOAT: return attr.float(a.f);
      case A.INT: return attr.int(big(a.i));
      case A.STRING: return attr.string(Buffer.from(a.s));
      case A.FLOATS: return attr.floats(a.floats);
      case A.INTS: return attr.ints(a.ints.map(big));
      case A.STRINGS: return attr.strings(a.strings.map((s) => Buffer.from(s)));
      case A.TENSOR: return attr.tensor(this.tensor(a.t));
      case A.GRAPH: return attr.graph(this.graph(a.g));
      default:
        throw this.err(`${label} attribute '${a.name}' has unsupported type ${type}`, 'UNIMPLEMENTED');
    }
  }

  fresh(base) { return `${base}__td${this.counter++}`; }

  /** Rewrites node `n` (declared under this.opset) into its opset-17 form. */
  normalize(g, n, label) {
    const op = n.op;
    const opset = this.opset;
    const addInit = (base, wire) => {
      const name = this.fresh(base);
      g.initializers[name] = wire;
      return name;
    };
    const ints = (base, values) => {
      const a = BigInt64Array.from(values);
      return addInit(base, { dtype: 'int64', shape: [a.length], bytes: Buffer.from(a.buffer) });
    };
    const scalar = (base, v) => addInit(base, { dtype: 'float32', shape: [], bytes: Buffer.from(new Float32Array([v]).buffer) });
    const attrToInput = (name, pos) => {
      let input = '';
      if (name in n.attrs) {
        const a = n.attrs[name];
        input = ints(`${n.name}_${name}`, a.value instanceof Array ? a.value : [a.value]);
        delete n.attrs[name];
      }
      while (n.inputs.length <= pos) n.inputs.push('');
      n.inputs[pos] = input;
      while (n.inputs.length && !n.inputs[n.inputs.length - 1]) n.inputs.pop();
    };
    const floatAttr = (name, dflt) => (name in n.attrs ? Number(n.attrs[name].value) : dflt);
    if (op === 'Upsample' || (op === 'Resize' && opset < 11) ||
        ((op === 'Softmax' || op === 'LogSoftmax' || op === 'Hardmax') && opset < 13)) {
      throw this.err(`${label} is in its opset-${opset} form, which the Node.js client does not ` +
                     'rewrite (it needs extra nodes); `tensord run` imports it', 'UNIMPLEMENTED');
    }
    if (opset < 6) delete n.attrs.consumed_inputs;
    if (opset < 7 && 'broadcast' in n.attrs) {
      if ('axis' in n.attrs && ['Add', 'Sub', 'Mul', 'Div', 'Pow', 'And', 'Or', 'Xor', 'Equal',
                                'Greater', 'Less'].includes(op)) {
        throw this.err(`${label} uses opset-${opset} broadcasting with an axis`, 'UNIMPLEMENTED');
      }
      delete n.attrs.broadcast;
    }
    if (op === 'Clip' && opset < 11) {
      const lo = floatAttr('min', -3.4028234663852886e38);
      const hi = floatAttr('max', 3.4028234663852886e38);
      delete n.attrs.min;
      delete n.attrs.max;
      n.inputs = [n.inputs[0], scalar(`${n.name}_min`, lo), scalar(`${n.name}_max`, hi)];
    } else if (op === 'Slice' && opset < 10) {
      const hasAxes = 'axes' in n.attrs;
      attrToInput('starts', 1);
      attrToInput('ends', 2);
      if (hasAxes) attrToInput('axes', 3);
    } else if (op === 'Reshape' && opset < 5) {
      attrToInput('shape', 1);
    } else if ((op === 'ReduceSum' || op === 'Squeeze' || op === 'Unsqueeze') && opset < 13) {
      if ('axes' in n.attrs) attrToInput('axes', 1);
    } else if (op === 'Split' && opset < 13) {
      if ('split' in n.attrs) attrToInput('split', 1);
    } else if (op === 'TopK' && opset < 10) {
      attrToInput('k', 1);
    } else if (op === 'Pad' && opset < 11) {
      attrToInput('pads', 1);
      const value = floatAttr('value', 0);
      delete n.attrs.value;
      n.inputs.push(scalar(`${n.name}_value`, value));
    } else if (op === 'Dropout' && opset < 12) {
      if ('ratio' in n.attrs) {
        const r = floatAttr('ratio', 0.5);
        delete n.attrs.ratio;
        n.inputs = [n.inputs[0], scalar(`${n.name}_ratio`, r)];
      }
      delete n.attrs.is_test;
    } else if (op === 'BatchNormalization' && opset < 9) {
      delete n.attrs.spatial;
      delete n.attrs.is_test;
    } else if (op === 'Gemm' && opset < 7) {
      delete n.attrs.broadcast;
    } else if (op === 'Scatter') {
      n.op = 'ScatterElements';  // deprecated alias (opset 9-10)
    }
  }

  /** onnx.GraphProto -> a plain graph for toWireGraph (initializers in wire form). */
  graph(gp) {
    const g = { name: gp.name || '', inputs: [], outputs: [], nodes: [], initializers: {} };
    for (const t of gp.initializer) {
      if (!t.name) throw this.err('an initializer has no name');
      if (t.name in g.initializers) throw this.err(`initializer '${t.name}' is defined twice`);
      g.initializers[t.name] = this.tensor(t);
    }
    if (gp.sparse_initializer.length) throw this.err('sparse initializers are not supported', 'UNIMPLEMENTED');
    for (const v of gp.input) {
      if (v.name in g.initializers) continue;  // IR < 4: initializers listed as inputs
      g.inputs.push(this.valueType(v));
    }
    for (const v of gp.output) g.outputs.push(this.valueType(v));
    for (const np of gp.node) {
      const n = {
        name: np.name || `${np.op_type}_${this.counter++}`,
        op: np.op_type,
        domain: np.domain === 'ai.onnx' ? '' : np.domain || '',
        inputs: [...np.input],
        outputs: [...np.output],
        attrs: {},
      };
      const label = `node '${n.name}' (${n.op})`;
      for (const a of np.attribute) {
        if (a.ref_attr_name) throw this.err(`${label} uses a function attribute reference`, 'UNIMPLEMENTED');
        n.attrs[a.name] = this.attribute(a, label);
      }
      this.normalize(g, n, label);
      g.nodes.push(n);
    }
    return g;
  }
}

/**
 * Decodes an ONNX model and translates it to a tensord graph (a plain object for execute()).
 * @param {string|Uint8Array} source  a .onnx path or its bytes
 * @returns {{graph: any, inputs: Array<{name: string, dtype?: string, shape?: number[]}>,
 *            outputs: Array<{name: string, dtype?: string, shape?: number[]}>, opset: number,
 *            irVersion: number, producer: string}}
 */
function importOnnx(source) {
  const { bytes, what, baseDir } = readSource(source);
  if (!bytes.length) throw new TensordError('INVALID_ARGUMENT', `${what}: empty file, not an ONNX model`, { local: true });
  let mp;
  try {
    mp = types().ModelProto.decode(bytes);
  } catch (e) {
    throw new TensordError('INVALID_ARGUMENT',
      `${what}: not a valid ONNX model (protobuf parse failed: ${e.message})`, { local: true });
  }
  if (!mp.graph) throw new TensordError('INVALID_ARGUMENT', `${what}: not an ONNX model (no graph)`, { local: true });
  const imp = new Importer(what, baseDir);
  for (const o of mp.opset_import) {
    if (!o.domain || o.domain === 'ai.onnx') imp.opset = num(o.version, what);
  }
  if (imp.opset === 0 && mp.opset_import.length === 0) imp.opset = 1;
  if (imp.opset === 0) throw imp.err('the model imports no ai.onnx opset');
  if (imp.opset < MIN_OPSET || imp.opset > MAX_OPSET) {
    throw imp.err(`opset ${imp.opset} is not supported (supported: ${MIN_OPSET} to ${MAX_OPSET})`, 'UNIMPLEMENTED');
  }
  let graph;
  try {
    graph = imp.graph(mp.graph);
  } catch (e) {
    if (e instanceof TensordError) throw e;
    throw imp.err(e.message);
  }
  return {
    graph, inputs: graph.inputs, outputs: graph.outputs, opset: imp.opset,
    irVersion: mp.ir_version ? num(mp.ir_version, what) : 0,
    producer: [mp.producer_name, mp.producer_version].filter(Boolean).join(' '),
  };
}

/**
 * Reads a serialized onnx.TensorProto (a .pb file of the ONNX backend tests).
 * @param {string|Uint8Array} source
 * @returns {import('./tensor').HostTensor & {name: string}}
 */
function readTensor(source) {
  const { bytes, what } = readSource(source);
  let t;
  try {
    t = types().TensorProto.decode(bytes);
  } catch (e) {
    throw new TensordError('INVALID_ARGUMENT', `${what}: not a valid onnx.TensorProto (${e.message})`, { local: true });
  }
  const imp = new Importer(what, '');
  let w;
  try {
    w = imp.tensor(t);
  } catch (e) {
    if (e instanceof TensordError) throw e;
    throw imp.err(e.message);
  }
  return { name: t.name || '', dtype: w.dtype, shape: w.shape, data: fromWire(w.dtype, numel(w.shape), w.bytes) };
}

module.exports = { importOnnx, readTensor };
