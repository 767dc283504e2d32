'use strict';
// A model loaded once into the session (LoadModel / LoadModelInline), run many times by
// handle (RunModel), freed by unload() or with the session. Against a broker without these
// RPCs (UNIMPLEMENTED) the graph is kept here and sent with each run through Execute.

const { TensordError } = require('./errors');

const INLINE_GRAPH_BYTES = 2 << 20;

class Model {
  /** @private */
  constructor(client, wire, meta, device, handle) {
    /** @type {import('./client').Client} */ this.client = client;
    /** Graph name. */
    this.name = wire.name;
    /** Runtime inputs, in binding order: {name, dtype, shape} (dtype undefined when unknown,
     *  dims -1 when symbolic). */
    this.inputs = meta.inputs;
    /** Outputs, in order: {name, dtype, shape}. */
    this.outputs = meta.outputs;
    /** The ai.onnx opset the file declared. */
    this.opset = meta.opset;
    this.irVersion = meta.irVersion;
    this.producer = meta.producer;
    /** The device the model runs on ('' = the broker's default device). */
    this.device = device;
    /** The broker's model handle (decimal), or null when each run sends the graph. */
    this.handle = handle;
    this._wire = handle ? null : wire;
    this._unloaded = false;
  }

  /** @private */
  static async load(client, wire, meta, device) {
    const { root, methods } = client._proto;
    if (methods.has('LoadModelInline') && methods.has('LoadModel')) {
      const Graph = root.lookupType('tensord.v1.Graph');
      const bytes = Buffer.from(Graph.encode(Graph.fromObject(wire)).finish());
      try {
        let r;
        if (bytes.length <= INLINE_GRAPH_BYTES) {
          r = await client._unary('LoadModelInline', { graph: wire, device }, 'loading a model');
        } else {
          const chunk = client._opts.chunkBytes;
          const header = { device, graph_bytes: String(bytes.length) };
          function* messages() {
            for (let off = 0; off < bytes.length; off += chunk) {
              const data = bytes.subarray(off, Math.min(bytes.length, off + chunk));
              yield off === 0 ? { header, data } : { data };
            }
          }
          r = await client._clientStream('LoadModel', messages(), 'loading a model');
        }
        return new Model(client, wire, meta, device, r.model);
      } catch (e) {
        if (!(e instanceof TensordError) || e.code !== 'UNIMPLEMENTED' || e.fromBroker) throw e;
        // An older broker: fall through to Execute.
      }
    }
    return new Model(client, wire, meta, device, null);
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
      list = this.inputs.map((i) => {
        if (!(i.name in inputs)) {
          throw new TensordError('INVALID_ARGUMENT', `run: model input '${i.name}' not given`, { local: true });
        }
        return inputs[i.name];
      });
      const extra = Object.keys(inputs).filter((k) => !this.inputs.some((i) => i.name === k));
      if (extra.length) {
        throw new TensordError('INVALID_ARGUMENT',
          `run: the model has no input named ${extra.map((x) => `'${x}'`).join(', ')} ` +
          `(its inputs: ${this.inputs.map((i) => i.name).join(', ')})`, { local: true });
      }
    }
    if (!this.handle) return this.client.execute(this._wire, list, { device: this.device });
    const ids = list.map((h, i) => this.client._id(h, `run: input ${i}`));
    const r = await this.client._unary('RunModel', {
      model: this.handle, inputs: ids, inline_max_bytes: String(this.client._opts.inlineMaxBytes),
    }, 'run');
    return this.client._outputs(r);
  }

  /** Frees the model on the broker (its initializers). */
  async unload() {
    if (this._unloaded) return;
    this._unloaded = true;
    this._wire = null;
    if (this.handle) await this.client._unary('UnloadModel', { model: this.handle }, 'unload');
  }
}

module.exports = { Model };
