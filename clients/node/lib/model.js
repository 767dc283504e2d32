'use strict';
// An ONNX model loaded once into the session, run many times by handle (RunModel), freed by
// unload() or with the session. The .onnx file's bytes go to the broker as they are
// (LoadModel, format MODEL_FORMAT_ONNX, streamed in chunks); the broker imports them with its
// C++ importer, the one every client shares, and answers the model's inputs and outputs.

const fs = require('fs');
const { TensordError } = require('./errors');
const { dtypeName } = require('./dtypes');

const MODEL_FORMAT_ONNX = 1;  // tensord.v1.ModelFormat

/** A model file's name as the C++ and Python clients give it: the folder of DIR/NAME/model.onnx, else the file's name without .onnx. */
function modelNameOfPath(p) {
  const path = require('path');
  const base = path.basename(p);
  if (base === 'model.onnx') {
    const dir = path.basename(path.dirname(path.resolve(p)));
    if (dir) return dir;
  }
  return base.endsWith('.onnx') ? base.slice(0, -5) : base;
}

function varint(n) {
  const out = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

/**
 * The ModelProto's bytes with the graph named `name`: one more `graph` field (7) holding only a
 * name (2) is appended. Protobuf merges a message field that appears twice, and the last
 * scalar wins, so the broker reads the whole graph under this name (the protocol has no field
 * for it). The file itself is not changed.
 */
function withGraphName(bytes, name) {
  if (!name) return bytes;
  const utf8 = Buffer.from(name, 'utf8');
  const graph = Buffer.concat([Buffer.from([0x12, ...varint(utf8.length)]), utf8]);
  return Buffer.concat([bytes, Buffer.from([0x3a, ...varint(graph.length)]), graph]);
}

/**
 * A path or the file's bytes -> the bytes (NOT_FOUND for a path that cannot be read).
 * @param {string|Uint8Array} source
 * @returns {Uint8Array}
 */
function readOnnxSource(source) {
  if (typeof source === 'string') {
    try {
      return withGraphName(fs.readFileSync(source), modelNameOfPath(source));
    } catch (e) {
      throw new TensordError('NOT_FOUND', `loadOnnx: cannot open '${source}': ${e.code || e.message}`,
                             { local: true });
    }
  }
  if (source instanceof Uint8Array) return source;
  throw new TensordError('INVALID_ARGUMENT',
    'loadOnnx: expected a file path or the bytes of an ONNX file (Buffer/Uint8Array)', { local: true });
}

/** A tensord.v1.ValueInfo -> {name, dtype, shape} (dtype undefined when unknown, dims -1 when symbolic). */
function valueInfo(v) {
  const code = v.type ? Number(v.type.dtype) : 0;
  let dtype;
  if (code) {
    try {
      dtype = dtypeName(code);
    } catch { /* a dtype this client does not know: left undefined */ }
  }
  return { name: v.name, dtype, shape: v.type ? v.type.shape.map(Number) : [] };
}

class Model {
  /** @private */
  constructor(client, resp, device) {
    /** @type {import('./client').Client} */ this.client = client;
    /** Graph name. */
    this.name = resp.name;
    /** Runtime inputs, in binding order: {name, dtype, shape} (dtype undefined when unknown,
     *  dims -1 when symbolic). */
    this.inputs = (resp.inputs || []).map(valueInfo);
    /** Outputs, in order: {name, dtype, shape}. */
    this.outputs = (resp.outputs || []).map(valueInfo);
    /** The ai.onnx opset the file declared. */
    this.opset = Number(resp.opset || 0);
    this.irVersion = Number(resp.ir_version || 0);
    this.producer = resp.producer || '';
    /** The device the model runs on ('' = the broker's default device). */
    this.device = device;
    /** The broker's model handle (decimal). */
    this.handle = resp.model;
    /** A named model of the broker (openModel): held once by the broker, not by this session. */
    this.named = false;
    this._unloaded = false;
  }

  /**
   * A named model of the broker (tensord serve --models DIR), opened in the client's session.
   * @private
   * @param {import('./client').Client} client
   * @param {string} name
   */
  static async open(client, name) {
    if (typeof name !== 'string' || name === '') {
      throw new TensordError('INVALID_ARGUMENT', 'openModel: expected a model name (a string)',
                             { local: true });
    }
    const r = await client._unary('OpenModel', { name }, `opening model '${name}'`);
    const info = r.info || {};
    const m = new Model(client, {
      model: r.model, name: info.name, inputs: info.inputs, outputs: info.outputs,
      opset: info.opset, ir_version: info.ir_version, producer: info.producer,
    }, info.device || '');
    m.named = true;
    /** Bytes of the named model's weights (held once by the broker). */
    m.weightBytes = Number(info.weight_bytes || 0);
    return m;
  }

  /**
   * Sends an ONNX file's bytes to the broker, which imports and loads it.
   * @private
   * @param {import('./client').Client} client
   * @param {Uint8Array} bytes
   * @param {string} device
   */
  static async loadOnnx(client, bytes, device) {
    if (!client._onnxModels) {
      throw new TensordError('FAILED_PRECONDITION',
        `loadOnnx: the broker at '${client.address}' (tensord ${client.serverVersion}) does not ` +
        'import ONNX files; upgrade it', { local: true });
    }
    if (bytes.length === 0) {
      throw new TensordError('INVALID_ARGUMENT', 'loadOnnx: empty file (no bytes), not an ONNX model',
                             { local: true });
    }
    // Refused here, before a byte goes out, when the broker said what it takes (it refuses on
    // the header too).
    if (client.maxModelBytes > 0 && bytes.length > client.maxModelBytes) {
      throw new TensordError('RESOURCE_EXHAUSTED',
        `loadOnnx: the ONNX file takes ${bytes.length} bytes, over the broker's limit of ` +
        `${client.maxModelBytes} (tensord serve --max-model-bytes)`, { local: true });
    }
    const chunk = client._opts.chunkBytes;
    const header = { device, graph_bytes: String(bytes.length), format: MODEL_FORMAT_ONNX };
    function* messages() {
      for (let off = 0; off < bytes.length; off += chunk) {
        const data = bytes.subarray(off, Math.min(bytes.length, off + chunk));
        yield off === 0 ? { header, data } : { data };
      }
    }
    const r = await client._clientStream('LoadModel', messages(), 'loading a model');
    return new Model(client, r, device);
  }

  /**
   * Runs the model. Inputs are handles, in the order of model.inputs, or an object by input
   * name. Outputs stay on the broker as handles, one per model output.
   * @param {Array<import('./client').Tensor|string>|Record<string, import('./client').Tensor|string>} inputs
   * @returns {Promise<import('./client').Tensor[]>}
   */
  async run(inputs) {
    if (this._unloaded) {
      throw new TensordError('FAILED_PRECONDITION', `run: model '${this.name}' was unloaded`, { local: true });
    }
    let list = inputs;
    if (!Array.isArray(inputs)) {
      // Unknown names first (m.run({q: ...}) names q), then the inputs not given; both list
      // the model's inputs.
      const names = this.inputs.map((i) => i.name);
      const given = (k) => Object.prototype.hasOwnProperty.call(inputs, k);
      const extra = Object.keys(inputs).filter((k) => !names.includes(k));
      const missing = names.filter((n) => !given(n));
      if (extra.length || missing.length) {
        const quote = (xs) => xs.map((x) => `'${x}'`).join(', ');
        const parts = [];
        if (extra.length) parts.push(`the model has no input named ${quote(extra)}`);
        if (missing.length) parts.push(`model input ${quote(missing)} not given`);
        throw new TensordError('INVALID_ARGUMENT',
          `run: ${parts.join('; ')} (its inputs: ${names.join(', ')})`, { local: true });
      }
      list = names.map((n) => inputs[n]);
    }
    const ids = list.map((h, i) => this.client._id(h, `run: input ${i}`));
    const r = await this.client._unary('RunModel', {
      model: this.handle, inputs: ids, inline_max_bytes: String(this.client._opts.inlineMaxBytes),
    }, 'run');
    return this.client._outputs(r);
  }

  /** Frees the model on the broker (its initializers); for a named model, closes this
   *  session's handle only (the broker keeps the model for every session). */
  async unload() {
    if (this._unloaded) return;
    this._unloaded = true;
    await this.client._unary('UnloadModel', { model: this.handle }, 'unload');
  }
}

/** A tensord.v1.ModelInfo -> the plain object listModels() returns. */
function modelInfo(m) {
  return {
    name: m.name, ready: Boolean(m.ready), reason: m.reason || '', device: m.device || '',
    inputs: (m.inputs || []).map(valueInfo), outputs: (m.outputs || []).map(valueInfo),
    weightBytes: Number(m.weight_bytes || 0), opset: Number(m.opset || 0),
    irVersion: Number(m.ir_version || 0), producer: m.producer || '',
  };
}

module.exports = { Model, readOnnxSource, modelInfo };
