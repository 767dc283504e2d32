'use strict';
// Graphs: a small builder (td.input / td.op / td.graph) and the conversion of a graph given
// as a plain object to the tensord.v1.Graph wire message. Ops are ONNX's, in their opset-17
// form (the broker's graph IR); names connect nodes as in ONNX.

const { dtypeCode } = require('./dtypes');
const { toWire, invalid } = require('./tensor');

// ---------------------------------------------------------------- attributes

const ATTR = Symbol('tensord.attr');
// Marks a graph already in wire form (toWireGraph's output).
const WIRE = Symbol('tensord.wireGraph');

/**
 * Explicitly typed attribute values, for when a JS value is ambiguous (a number that is a
 * float attribute but happens to be whole, an empty list ...).
 */
const attr = {
  /** @param {number|bigint} v */ int: (v) => ({ [ATTR]: 'i', value: v }),
  /** @param {number} v */ float: (v) => ({ [ATTR]: 'f', value: v }),
  /** @param {string|Uint8Array} v */ string: (v) => ({ [ATTR]: 's', value: v }),
  /** @param {Array<number|bigint>} v */ ints: (v) => ({ [ATTR]: 'ints', value: v }),
  /** @param {number[]} v */ floats: (v) => ({ [ATTR]: 'floats', value: v }),
  /** @param {Array<string|Uint8Array>} v */ strings: (v) => ({ [ATTR]: 'strings', value: v }),
  /** @param {any} v  a HostTensor-like {dtype, shape, data} */
  tensor: (v) => ({ [ATTR]: 'tensor', value: v }),
  /** @param {any} v  a graph (plain object or builder output) */
  graph: (v) => ({ [ATTR]: 'graph', value: v }),
};

// ONNX attributes that are floats (or lists of floats) in every op that has them: a whole JS
// number given for one of these is sent as a float. Anything else whole is an int.
const FLOAT_ATTRS = new Set([
  'alpha', 'beta', 'gamma', 'epsilon', 'momentum', 'bias', 'lambd', 'scale', 'seed', 'mean',
  'low', 'high', 'spatial_scale', 'threshold', 'value_float', 'extrapolation_value',
  'cubic_coeff_a', 'ratio',
]);
const FLOATS_ATTRS = new Set(['value_floats', 'scales', 'activation_alpha', 'activation_beta']);

function bytesOf(s) {
  return typeof s === 'string' ? Buffer.from(s, 'utf8') : Buffer.from(s);
}

/** A JS attribute value -> tensord.v1.Attribute. */
function toWireAttr(name, v, where) {
  if (v && typeof v === 'object' && v[ATTR]) {
    const val = v.value;
    switch (v[ATTR]) {
      case 'i': return { i: String(val) };
      case 'f': return { f: Number(val) };
      case 's': return { s: bytesOf(val) };
      case 'ints': return { ints: { values: Array.from(val, (x) => String(x)) } };
      case 'floats': return { floats: { values: Array.from(val, Number) } };
      case 'strings': return { strings: { values: Array.from(val, bytesOf) } };
      case 'tensor':
        if (val && val.bytes && val.dtype !== undefined) {  // already wire form
          return { tensor: { dtype: dtypeCode(val.dtype), shape: val.shape, data: val.bytes } };
        }
        return { tensor: wireTensor(val, `${where}: attribute '${name}'`) };
      case 'graph': return { graph: toWireGraph(val) };
    }
  }
  if (typeof v === 'bigint') return { i: String(v) };
  if (typeof v === 'boolean') return { i: v ? '1' : '0' };
  if (typeof v === 'number') {
    if (Number.isInteger(v) && !FLOAT_ATTRS.has(name)) return { i: String(v) };
    return { f: v };
  }
  if (typeof v === 'string') return { s: Buffer.from(v, 'utf8') };
  if (v instanceof Float32Array || v instanceof Float64Array) {
    return { floats: { values: Array.from(v) } };
  }
  if (v instanceof BigInt64Array || v instanceof Int32Array) {
    return { ints: { values: Array.from(v, (x) => String(x)) } };
  }
  if (Array.isArray(v)) {
    if (v.every((x) => typeof x === 'string')) return { strings: { values: v.map(bytesOf) } };
    if (v.every((x) => typeof x === 'bigint' || typeof x === 'number')) {
      const floats = FLOATS_ATTRS.has(name) ||
                     v.some((x) => typeof x === 'number' && !Number.isInteger(x));
      if (floats) return { floats: { values: v.map(Number) } };
      return { ints: { values: v.map((x) => String(x)) } };
    }
  }
  if (v && typeof v === 'object' && 'nodes' in v) return { graph: toWireGraph(v) };
  if (v && typeof v === 'object' && 'data' in v) {
    return { tensor: wireTensor(v, `${where}: attribute '${name}'`) };
  }
  throw invalid(`${where}: attribute '${name}' has a value of unsupported kind ` +
                `(${v === null ? 'null' : typeof v}); use td.attr.int/float/ints/... to say which`);
}

/** A host tensor (typed array, {dtype, shape, data}, number) -> tensord.v1.Tensor. */
function wireTensor(v, what) {
  const t = toWire(v, undefined, undefined, what);
  return { dtype: dtypeCode(t.dtype), shape: t.shape, data: t.bytes };
}

// ---------------------------------------------------------------- the builder

let nextId = 1;

/**
 * A symbolic value in a graph being built: a graph input, a constant, or an output of an op.
 */
class Value {
  /** @param {'input'|'const'|'op'} kind */
  constructor(kind, props) {
    this.kind = kind;
    this.id = nextId++;
    Object.assign(this, props);
  }
}

/**
 * A graph input (a placeholder bound to a handle when the graph is executed).
 * @param {string} [name]
 * @param {{dtype?: string|number, shape?: number[]}} [type]  optional declared type
 * @returns {Value}
 */
function input(name, type = {}) {
  return new Value('input', { name, type });
}

/**
 * A constant (sent as a graph initializer).
 * @param {any} data  typed array, array, number or {dtype, shape, data}
 * @param {{dtype?: string|number, shape?: number[]}} [opts]
 */
function constant(data, opts = {}) {
  return new Value('const', { value: toWire(data, opts.shape, opts.dtype, 'constant') });
}

/**
 * An ONNX op on symbolic values. Inputs may be Values, null (an omitted optional input), or
 * host data (typed arrays, numbers: made constants). Returns one Value, or an array of them
 * when opts.outputs is more than 1.
 * @param {string} opType  e.g. 'Add', 'MatMul', 'Conv'
 * @param {Array<Value|null|any>} inputs
 * @param {Record<string, any>} [attrs]
 * @param {{outputs?: number, name?: string, domain?: string}} [opts]
 * @returns {any}
 */
function op(opType, inputs, attrs = {}, opts = {}) {
  if (typeof opType !== 'string' || !opType) throw invalid('op: the op type must be a non-empty string');
  if (!Array.isArray(inputs)) throw invalid(`op ${opType}: inputs must be an array`);
  const ins = inputs.map((x) => (x === null || x === undefined || x instanceof Value ? x : constant(x)));
  const n = opts.outputs ?? 1;
  const node = { op: opType, inputs: ins, attrs, name: opts.name, domain: opts.domain ?? '', outs: [] };
  for (let k = 0; k < n; ++k) node.outs.push(new Value('op', { node, index: k }));
  return n === 1 ? node.outs[0] : node.outs;
}

/**
 * Builds a graph (a plain object for execute()) from symbolic outputs, or from a function of
 * its inputs: td.graph((x, y) => td.op('Add', [x, y])).
 * @param {Value|Value[]|((...xs: Value[]) => Value|Value[])} outputs
 * @param {{inputs?: Value[], name?: string}} [opts]  inputs in binding order (default: the
 *   order in which they are first reached from the outputs)
 */
function graph(outputs, opts = {}) {
  let ins = opts.inputs;
  if (typeof outputs === 'function') {
    ins = Array.from({ length: outputs.length }, (_, i) => input(`x${i}`));
    outputs = outputs(...ins);
  }
  const outs = Array.isArray(outputs) ? outputs : [outputs];
  for (const o of outs) {
    if (!(o instanceof Value)) throw invalid('graph: outputs must be values made by td.op / td.input');
  }
  const names = new Map();
  const used = new Set();
  const unique = (base) => {
    let s = base;
    for (let k = 1; used.has(s); ++k) s = `${base}_${k}`;
    used.add(s);
    return s;
  };
  const found = [];
  const nodes = [];
  const initializers = {};
  const seenNodes = new Set();
  // Declared inputs first, so their names win.
  if (ins) for (const x of ins) names.set(x, unique(x.name || `x${names.size}`));
  const visit = (v) => {
    if (v === null || v === undefined) return '';
    if (names.has(v)) return names.get(v);
    if (v.kind === 'input') {
      if (ins) throw invalid(`graph: input '${v.name ?? '?'}' is used but not in opts.inputs`);
      found.push(v);
      names.set(v, unique(v.name || `x${found.length - 1}`));
      return names.get(v);
    }
    if (v.kind === 'const') {
      const nm = unique(`c${v.id}`);
      names.set(v, nm);
      initializers[nm] = v.value;
      return nm;
    }
    const node = v.node;
    if (!seenNodes.has(node)) {
      seenNodes.add(node);
      const inNames = node.inputs.map(visit);
      const base = node.name || `${node.op}_${node.outs[0].id}`;
      const outNames = node.outs.map((o, k) => {
        const nm = unique(node.outs.length === 1 ? base : `${base}_${k}`);
        names.set(o, nm);
        return nm;
      });
      nodes.push({ name: node.name || base, op: node.op, domain: node.domain, inputs: inNames,
                   outputs: outNames, attrs: node.attrs });
    }
    return names.get(v);
  };
  const outNames = outs.map(visit);
  const inputs = (ins || found).map((x) => ({ name: names.get(x), ...x.type }));
  return { name: opts.name || 'graph', inputs, outputs: outNames, nodes, initializers };
}

// ---------------------------------------------------------------- plain object -> wire

function valueInfo(v, what) {
  if (typeof v === 'string') return { name: v, type: { dtype: 0, shape: [] } };
  if (!v || typeof v.name !== 'string') throw invalid(`graph: each ${what} must be a name or {name, dtype?, shape?}`);
  const dtype = v.dtype === undefined || v.dtype === 0 ? 0 : dtypeCode(v.dtype);
  const shape = (v.shape || []).map((d) => (d === null || typeof d === 'string' ? -1 : Number(d)));
  return { name: v.name, type: { dtype, shape } };
}

/**
 * A graph -> the tensord.v1.Graph message (proto-loader object, keepCase). Accepts a builder
 * Value or array of Values, a function of inputs, or a plain object:
 *   {name?, inputs: ['a', {name: 'b', dtype: 'float32', shape: [2, -1]}], outputs: ['y'],
 *    nodes: [{op: 'Add', inputs: ['a', 'b'], outputs: ['y'], attrs?: {...}, name?, domain?}],
 *    initializers?: {w: Float32Array | {dtype, shape, data}}}
 * @returns {any}
 */
function toWireGraph(g) {
  if (g && g[WIRE]) return g;
  if (g instanceof Value || typeof g === 'function' || (Array.isArray(g) && g[0] instanceof Value)) {
    g = graph(g);
  }
  if (!g || typeof g !== 'object' || !Array.isArray(g.nodes)) {
    throw invalid('graph: expected {nodes: [...], inputs: [...], outputs: [...]} or a td.op value');
  }
  const nodes = g.nodes.map((n, i) => {
    const where = `graph node ${n && n.name ? `'${n.name}'` : `#${i}`}` + (n && n.op ? ` (${n.op})` : '');
    if (!n || typeof n.op !== 'string' || !n.op) throw invalid(`${where}: no op type`);
    const attrs = {};
    for (const [k, v] of Object.entries(n.attrs || n.attributes || {})) attrs[k] = toWireAttr(k, v, where);
    return {
      name: n.name || '', op: n.op, domain: n.domain || '',
      inputs: (n.inputs || []).map((x) => x ?? ''), outputs: n.outputs || [], attrs,
    };
  });
  const initializers = {};
  for (const [k, v] of Object.entries(g.initializers || {})) {
    initializers[k] = v && v.bytes && v.dtype !== undefined
      ? { dtype: dtypeCode(v.dtype), shape: v.shape, data: v.bytes }  // already wire form
      : wireTensor(v, `initializer '${k}'`);
  }
  const wire = {
    name: g.name || '',
    inputs: (g.inputs || []).map((v) => valueInfo(v, 'input')),
    outputs: (g.outputs || []).map((v) => valueInfo(v, 'output')),
    nodes,
    initializers,
  };
  Object.defineProperty(wire, WIRE, { value: true });
  return wire;
}

module.exports = { attr, input, constant, op, graph, toWireGraph, Value, wireTensor };
