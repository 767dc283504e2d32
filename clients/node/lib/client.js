'use strict';
// The client: one gRPC channel to a broker (`tensord serve`), one session on it.
// Mirrors the C++ RemoteClient (src/rpc/remote_client.cpp): handshake (protocol version
// check), OpenSession, heartbeats at a third of the lease, the session id in the metadata
// "tensord-session" of every call, uploads inline up to 2 MiB and streamed in 2 MiB chunks
// above, reads streamed, graphs executed by handle, CloseSession on close().

const grpc = require('@grpc/grpc-js');
const { loadProto } = require('./proto');
const { TensordError, fromGrpc, CODE_NAMES } = require('./errors');
const { dtypeCode, dtypeName } = require('./dtypes');
const { toWire, fromWire, numel } = require('./tensor');
const { toWireGraph, input, op: symbolicOp, graph: buildGraph, constant } = require('./graph');

/** The wire protocol version this client speaks (tensord::kProtocolVersion). */
const PROTOCOL_VERSION = 2;  // 2: 128-bit session ids, regions by descriptor
const CLIENT_VERSION = require('../package.json').version;
const CHUNK_BYTES = 2 << 20;
const MAX_MESSAGE_BYTES = 1 << 30;
const SESSION_KEY = 'tensord-session';

/**
 * @typedef {Object} ConnectOptions
 * @property {number} [connectTimeoutMs=5000]  handshake and session opening
 * @property {number} [callTimeoutMs=60000]  unary calls (execute, upload inline, release ...)
 * @property {number} [memoryLimit=0]  bytes this session may hold (0 = the broker's limit)
 * @property {number} [chunkBytes=2097152]  upload/read chunk size
 * @property {string} [protoPath]  tensord.proto to use (else $TENSORD_PROTO, else the repository's)
 * @property {string} [token]  sent as "authorization: Bearer <token>" (brokers with --token-file);
 *   default $TENSORD_TOKEN
 * @property {boolean} [attach=true]  bind the session to a long-lived Attach call, so the
 *   broker frees it as soon as this process dies or its connection drops (else only when its
 *   lease lapses, 30 s by default), as the C++ client does. The call has a connection of its
 *   own, which does not keep Node's event loop alive (a script that never calls close() still
 *   exits; the broker then frees the session at once). false = the lease only.
 * @property {number} [inlineMaxBytes=262144]  execute()/run() ask the broker to send outputs up
 *   to this many bytes (together) with the answer, so that reading them costs no further call;
 *   0 = never
 */

/**
 * @typedef {Object} DeviceInfo
 * @property {string} name  'cpu:0', 'cuda:1'
 * @property {string} kind
 * @property {number} index
 * @property {string} vendor
 * @property {string} model
 * @property {number} memoryBytes
 * @property {number} memoryInUse
 * @property {string} backend
 * @property {string} backendVersion
 * @property {number} threads
 */

/** A tensor held by the broker in this client's session. */
class Tensor {
  /**
   * @param {Client} client
   * @param {string} id  the uint64 handle, decimal
   * @param {{dtype?: string, shape?: number[], device?: string}} [known]
   */
  constructor(client, id, known = {}) {
    /** @type {Client} */ this.client = client;
    /** The broker's handle (uint64, decimal string). */
    this.id = id;
    /** dtype name when known without asking the broker (uploads), else undefined. */
    this.dtype = known.dtype;
    /** shape when known without asking the broker (uploads), else undefined. */
    this.shape = known.shape;
    /** device when known without asking the broker, else undefined. */
    this.device = known.device;
  }

  /** @returns {Promise<import('./tensor').HostTensor>} */
  read() { return this.client.read(this); }
  /** @returns {Promise<void>} */
  release() { return this.client.release(this); }
  /** @returns {Promise<{dtype: string, shape: number[], device: string}>} */
  info() { return this.client.info(this); }
  toString() { return `tensord.Tensor(${this.id})`; }
}

class Client {
  /** @private */
  constructor(address, opts, proto, stub) {
    /** The broker's address as given to connect(). */
    this.address = address;
    this._opts = opts;
    this._proto = proto;
    this._stub = stub;
    this._session = '';
    this._lease = 30000;
    this._heartbeat = null;
    this._closed = false;
    /** Number of RPCs made (heartbeats excluded). */
    this.rpcCount = 0;
    /** @type {string} */ this.serverVersion = '';
    /** @type {string} */ this.defaultDevice = '';
    /** @type {number} */ this.memoryLimit = 0;
    /** The largest ONNX file (bytes) the broker takes (--max-model-bytes); 0 when not told. */
    this.maxModelBytes = 0;
    this._onnxModels = false;
    // Output values the broker sent with an execute/run answer, by handle id; read() takes
    // them (once) instead of calling Read.
    this._inline = new Map();
  }

  /** The session id (32 hex characters; a capability: keep it secret). */
  get session() { return this._session; }

  // ---------------------------------------------------------------- plumbing

  _metadata() {
    const md = new grpc.Metadata();
    if (this._session) md.set(SESSION_KEY, this._session);
    if (this._opts.token) md.set('authorization', `Bearer ${this._opts.token}`);
    return md;
  }

  _checkOpen(what) {
    if (this._closed) {
      return new TensordError('FAILED_PRECONDITION', `${what}: the client is closed`, { local: true });
    }
    return null;
  }

  /** A unary call -> a promise of its response (rejections are TensordErrors). */
  _unary(method, req, what, timeoutMs = this._opts.callTimeoutMs, count = true) {
    const closed = this._checkOpen(what);
    if (closed) return Promise.reject(closed);
    if (typeof this._stub[method] !== 'function') {
      return Promise.reject(new TensordError('UNIMPLEMENTED',
        `${what}: ${this._proto.file} has no rpc ${method}`, { local: true }));
    }
    if (count) this.rpcCount++;
    const options = timeoutMs > 0 ? { deadline: Date.now() + timeoutMs } : {};
    return new Promise((resolve, reject) => {
      this._stub[method](req, this._metadata(), options, (err, resp) => {
        if (err) reject(fromGrpc(err, this.address, what));
        else resolve(resp);
      });
    });
  }

  /** A client-streaming call sending `messages` with flow control. */
  _clientStream(method, messages, what) {
    const closed = this._checkOpen(what);
    if (closed) return Promise.reject(closed);
    this.rpcCount++;
    return new Promise((resolve, reject) => {
      let settled = false;
      const call = this._stub[method](this._metadata(), {}, (err, resp) => {
        settled = true;
        if (err) reject(fromGrpc(err, this.address, what));
        else resolve(resp);
      });
      const it = messages[Symbol.iterator]();
      const pump = () => {
        for (;;) {
          if (settled) return;  // the broker ended the call: its status says why
          const { value, done } = it.next();
          if (done) { call.end(); return; }
          if (!call.write(value)) { call.once('drain', pump); return; }
        }
      };
      call.on('error', () => {});  // reported through the callback
      pump();
    });
  }

  _id(h, what) {
    if (h instanceof Tensor) {
      if (h.client !== this) {
        throw new TensordError('INVALID_ARGUMENT', `${what}: ${h} belongs to another client`, { local: true });
      }
      return h.id;
    }
    if (typeof h === 'bigint' || (typeof h === 'number' && Number.isSafeInteger(h))) return String(h);
    if (typeof h === 'string' && /^[0-9]+$/.test(h)) return h;
    throw new TensordError('INVALID_ARGUMENT',
      `${what}: expected a tensor handle (tensord.Tensor or its id), got ${h === null ? 'null' : typeof h}`,
      { local: true });
  }

  /** Runs `fn` and turns a synchronous throw into a rejection. */
  async _guard(fn) { return fn(); }

  // ---------------------------------------------------------------- session

  /** @private */
  async _open() {
    const hs = await this._unary('Handshake', {
      protocol_version: PROTOCOL_VERSION, client_version: `node ${CLIENT_VERSION}`,
    }, 'handshake', this._opts.connectTimeoutMs);
    if (hs.protocol_version !== PROTOCOL_VERSION) {
      throw new TensordError('FAILED_PRECONDITION',
        `broker '${this.address}' speaks protocol version ${hs.protocol_version} (tensord ` +
        `${hs.server_version}), this client speaks ${PROTOCOL_VERSION}`, { local: true });
    }
    this.serverVersion = hs.server_version;
    // Inline uploads and stream chunks stay well inside the broker's message limit.
    const maxMessage = Number(hs.max_message_bytes || 0);
    if (maxMessage > 0) {
      this._opts.chunkBytes = Math.max(4 << 10, Math.min(this._opts.chunkBytes, Math.floor(maxMessage / 2)));
    }
    this.defaultDevice = hs.default_device;
    // Whether LoadModel takes ONNX files, and the largest model the broker takes (0 = not told).
    this._onnxModels = !!hs.onnx_models;
    this.maxModelBytes = Number(hs.max_model_bytes || 0);
    const s = await this._unary('OpenSession', { memory_limit: String(this._opts.memoryLimit || 0) },
                                'opening a session', this._opts.connectTimeoutMs);
    if (!s.session_id) {
      throw new TensordError('FAILED_PRECONDITION',
        `broker '${this.address}' answered OpenSession without a session_id (an older tensord?)`,
        { local: true });
    }
    this._session = s.session_id;
    this.memoryLimit = Number(s.memory_limit);
    if (Number(s.lease_ms) > 0) this._lease = Number(s.lease_ms);
    const period = Math.max(Math.floor(this._lease / 3), 10);
    this._heartbeat = setInterval(() => {
      // A missed beat is retried next period.
      this._unary('Heartbeat', {}, 'heartbeat', Math.min(period, this._opts.callTimeoutMs), false)
        .catch(() => {});
    }, period);
    this._heartbeat.unref();  // never keeps the process alive
    if (this._opts.attach && this._proto.methods.has('Attach')) await this._attach();
  }

  /**
   * Opens the Attach call and waits for the broker's "attached" message. The call runs on a
   * channel of its own whose connection is then unreferenced: it alone never keeps the process
   * alive, while every other call, on the main channel, keeps it alive as usual. @private
   */
  _attach() {
    return new Promise((resolve, reject) => {
      const stub = this._attachStub = this._makeAttachStub ? this._makeAttachStub() : this._stub;
      const call = stub.Attach({}, this._metadata());
      const timer = setTimeout(() => {
        call.cancel();
        reject(new TensordError('UNAVAILABLE', `broker '${this.address}' is unavailable (attach: no answer)`));
      }, this._opts.connectTimeoutMs);
      let attached = false;
      call.on('data', () => {
        if (attached) return;
        attached = true;
        clearTimeout(timer);
        this._attachCall = call;
        if (stub !== this._stub) {
          const session = http2SessionOf(call);
          if (session) session.unref();
        }
        resolve();
      });
      call.on('error', (e) => {
        clearTimeout(timer);
        if (attached) return;  // the session ended with the call; later calls say so
        if (e.code === grpc.status.UNIMPLEMENTED) resolve();  // an older broker: the lease only
        else reject(fromGrpc(e, this.address, 'attach'));
      });
      call.on('end', () => {});
    });
  }

  /**
   * Ends the session (its tensors are freed) and closes the channel. Idempotent; never
   * rejects (a broker that is gone frees the session when its lease lapses).
   * @returns {Promise<void>}
   */
  async close() {
    if (this._closed) return;
    if (this._heartbeat) clearInterval(this._heartbeat);
    if (this._session) {
      await this._unary('CloseSession', {}, 'closing the session', 2000, false).catch(() => {});
    }
    if (this._attachCall) this._attachCall.cancel();
    if (this._attachStub && this._attachStub !== this._stub) this._attachStub.close();
    this._closed = true;
    this._inline.clear();
    this._stub.close();
  }

  // ---------------------------------------------------------------- devices

  /** @returns {Promise<DeviceInfo[]>} the broker's devices */
  async devices() {
    const r = await this._unary('ListDevices', {}, 'listing devices');
    this.defaultDevice = r.default_device;
    return r.devices.map((d) => ({
      name: d.name, kind: d.kind, index: d.index, vendor: d.vendor, model: d.model,
      memoryBytes: Number(d.memory_bytes), memoryInUse: Number(d.memory_in_use),
      backend: d.backend, backendVersion: d.backend_version, threads: d.threads,
    }));
  }

  /** A bare round trip (for measuring the transport). @param {number} [payloadBytes] */
  async echo(payloadBytes = 0) {
    await this._unary('Echo', { payload: Buffer.alloc(payloadBytes) }, 'echo');
  }

  // ---------------------------------------------------------------- tensors

  /**
   * Uploads a host tensor; resolves to its handle on the broker.
   * @param {ArrayBufferView|Array<number|boolean|bigint>|number|import('./tensor').HostTensor} data
   *   Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array, ..., a plain array
   *   (numbers: float32 unless opts.dtype; booleans: bool; bigints: int64) or a number
   * @param {number[]|{dtype?: string, device?: string}} [shape]  default [data.length]
   * @param {{dtype?: string|number, device?: string}} [opts]  dtype: 'bool', 'float16', ...
   *   when the array type does not say it; device: '' = the broker's default device
   * @returns {Promise<Tensor>}
   */
  async upload(data, shape, opts = {}) {
    if (shape && !Array.isArray(shape) && typeof shape === 'object') {
      opts = shape;
      shape = undefined;
    }
    const t = toWire(data, shape, opts.dtype, 'upload');
    const device = opts.device || '';
    const total = t.bytes.length;
    const header = { dtype: dtypeCode(t.dtype), shape: t.shape, device, total_bytes: String(total) };
    let resp;
    if (total <= this._opts.chunkBytes) {
      resp = await this._unary('UploadInline', { header, data: t.bytes }, 'upload');
    } else {
      const chunk = this._opts.chunkBytes;
      const bytes = t.bytes;
      function* messages() {
        for (let off = 0; off < total; off += chunk) {
          const data = bytes.subarray(off, Math.min(total, off + chunk));
          yield off === 0 ? { header, data } : { data };
        }
      }
      resp = await this._clientStream('Upload', messages(), 'upload');
    }
    return new Tensor(this, resp.handle, { dtype: t.dtype, shape: t.shape, device: device || undefined });
  }

  /**
   * Reads a tensor's value (waits until it is computed; its error if the computation failed).
   * @param {Tensor|string|bigint|number} h
   * @returns {Promise<import('./tensor').HostTensor>} {dtype, shape, data}: data is a typed array
   *   of the dtype (bool: Uint8Array of 0/1; float16/bfloat16: Uint16Array of raw bits)
   */
  read(h) {
    return this._guard(() => {
      const id = this._id(h, 'read');
      const closed = this._checkOpen('read');
      if (closed) throw closed;
      const inline = this._inline.get(id);
      if (inline) {
        this._inline.delete(id);
        if (inline.error) throw inline.error;
        return inline.value;
      }
      this.rpcCount++;
      return new Promise((resolve, reject) => {
        const call = this._stub.Read({ handle: id, chunk_bytes: String(this._opts.chunkBytes) },
                                     this._metadata());
        let header = null;
        let buf = null;
        let received = 0;
        let failed = null;
        const bad = (msg) => {
          if (failed) return;
          failed = new TensordError('INTERNAL', `read: ${msg}`);
          call.cancel();
          reject(failed);
        };
        call.on('data', (msg) => {
          if (failed) return;
          if (!header) {
            if (!msg.header) return bad("the broker's first message has no header");
            header = msg.header;
            let dtype;
            try { dtype = dtypeName(header.dtype); } catch (e) { return bad(e.message); }
            const shape = header.shape.map(Number);
            const size = numel(shape) * require('./dtypes').DTYPES[dtype].size;
            if (size !== Number(header.total_bytes)) {
              return bad(`the broker declares ${header.total_bytes} bytes for a tensor of ${size} bytes`);
            }
            header = { dtype, shape, total: size };
            buf = new Uint8Array(size);
          } else if (msg.header) {
            return bad('the broker repeated the header');
          }
          const d = msg.data;
          if (received + d.length > header.total) {
            return bad(`the broker sent more than the ${header.total} bytes it declared`);
          }
          buf.set(d, received);
          received += d.length;
        });
        call.on('error', (e) => { if (!failed) { failed = e; reject(fromGrpc(e, this.address, 'read')); } });
        call.on('status', (s) => {
          if (failed || s.code !== grpc.status.OK) return;  // 'error' rejects
          if (!header) return reject(new TensordError('INTERNAL', 'read: the broker sent no tensor'));
          if (received !== header.total) {
            return reject(new TensordError('DATA_LOSS', `read: the broker sent ${received} of ${header.total} bytes`));
          }
          const data = fromWire(header.dtype, numel(header.shape), buf);
          resolve({ dtype: header.dtype, shape: header.shape, data });
        });
      });
    });
  }

  /**
   * Type and device of a tensor (dims may be -1 until a data-dependent shape is computed).
   * @param {Tensor|string|bigint|number} h
   * @returns {Promise<{dtype: string|undefined, shape: number[], device: string}>}
   */
  async info(h) {
    const r = await this._unary('Info', { handle: this._id(h, 'info') }, 'info');
    const t = r.type || { dtype: 0, shape: [] };
    return { dtype: t.dtype ? dtypeName(t.dtype) : undefined, shape: t.shape.map(Number), device: r.device };
  }

  /** Waits until a tensor is computed; rejects with its error. @param {Tensor|string} h */
  async wait(h) {
    await this._unary('Wait', { handle: this._id(h, 'wait') }, 'wait', 0);
  }

  /**
   * Copies a tensor to another device. @param {Tensor|string} h @param {string} device
   * @returns {Promise<Tensor>}
   */
  async copy(h, device) {
    const r = await this._unary('Copy', { handle: this._id(h, 'copy'), device }, 'copy');
    return new Tensor(this, r.handle, { device });
  }

  /** Drops a handle (NOT_FOUND if it does not exist in this session). @param {Tensor|string} h */
  async release(h) {
    const id = this._id(h, 'release');
    this._inline.delete(id);
    await this._unary('Release', { handle: id }, 'release');
  }

  /** Output handles of an Execute/RunModel answer; keeps the values sent along. @private */
  _outputs(r) {
    const outs = r.outputs.map((id) => new Tensor(this, id));
    for (const v of r.values || []) {
      const t = outs[v.index];
      if (!t) continue;
      if (v.device) t.device = v.device;
      if (v.code) {
        const code = CODE_NAMES[v.code] || 'UNKNOWN';
        this._inline.set(t.id, { error: new TensordError(code, v.message, { fromBroker: true }) });
      } else if (v.value) {
        try {
          const dtype = dtypeName(v.value.dtype);
          const shape = v.value.shape.map(Number);
          const n = numel(shape);
          if (n * require('./dtypes').DTYPES[dtype].size !== v.value.data.length) continue;  // read() asks
          t.dtype = dtype;
          t.shape = shape;
          this._inline.set(t.id, { value: { dtype, shape, data: fromWire(dtype, n, v.value.data) } });
        } catch {
          // an answer this client cannot decode: read() asks the broker
        }
      }
    }
    return outs;
  }

  // ---------------------------------------------------------------- graphs

  /**
   * Executes a graph on the broker: inputs by handle (bound to the graph's inputs in order),
   * outputs kept on the broker. Resolves as soon as the work is queued; an op's error (bad
   * shapes ...) is the execute call's rejection when the broker sees it at once, else read()'s.
   * @param {any} graph  a plain {nodes, inputs, outputs, initializers?} object, a td.op value
   *   (or an array of them), or a function of symbolic inputs (td.graph)
   * @param {Array<Tensor|string>} inputs
   * @param {{device?: string}} [opts]  '' = the first input's device
   * @returns {Promise<Tensor[]>} one per graph output
   */
  async execute(graph, inputs = [], opts = {}) {
    const wire = toWireGraph(graph);
    const ids = inputs.map((h, i) => this._id(h, `execute: input ${i}`));
    const r = await this._unary('Execute', {
      graph: wire, inputs: ids, device: opts.device || '',
      inline_max_bytes: String(this._opts.inlineMaxBytes),
    }, 'execute');
    return this._outputs(r);
  }

  /**
   * One ONNX op on handles (and host constants): a one-node graph, executed.
   * @param {string} opType  'Add', 'MatMul', 'Softmax', ...
   * @param {Array<Tensor|null|any>} inputs  handles; null = an omitted optional input; host data
   *   (typed arrays, numbers) becomes a constant
   * @param {Record<string, any>} [attrs]
   * @param {{outputs?: number, device?: string, domain?: string}} [opts]
   * @returns {Promise<any>} a Tensor, or an array when opts.outputs > 1
   */
  async op(opType, inputs, attrs = {}, opts = {}) {
    const handles = [];
    const symbols = inputs.map((x, i) => {
      if (x === null || x === undefined) return null;
      if (x instanceof Tensor || typeof x === 'string' || typeof x === 'bigint') {
        handles.push(x);
        return input(`in${i}`);
      }
      return constant(x);
    });
    const outs = symbolicOp(opType, symbols, attrs, { outputs: opts.outputs, domain: opts.domain, name: opType });
    const inputsInOrder = symbols.filter((s) => s && s.kind === 'input');
    const g = buildGraph(outs, { inputs: inputsInOrder, name: opType });
    const result = await this.execute(g, handles, opts);
    return (opts.outputs ?? 1) === 1 ? result[0] : result;
  }

  /** a + b (ONNX Add, NumPy broadcasting). */
  add(a, b) { return this.op('Add', [a, b]); }
  /** a - b */
  sub(a, b) { return this.op('Sub', [a, b]); }
  /** a * b (element-wise) */
  mul(a, b) { return this.op('Mul', [a, b]); }
  /** a / b */
  div(a, b) { return this.op('Div', [a, b]); }
  /** Matrix product (ONNX MatMul, NumPy matmul semantics). */
  matmul(a, b) { return this.op('MatMul', [a, b]); }
  relu(a) { return this.op('Relu', [a]); }
  sigmoid(a) { return this.op('Sigmoid', [a]); }
  tanh(a) { return this.op('Tanh', [a]); }
  exp(a) { return this.op('Exp', [a]); }
  neg(a) { return this.op('Neg', [a]); }
  abs(a) { return this.op('Abs', [a]); }
  sqrt(a) { return this.op('Sqrt', [a]); }
  /** Softmax along `axis` (default -1). */
  softmax(a, axis = -1) { return this.op('Softmax', [a], { axis }); }
  /** Transpose; perm default: reversed axes. */
  transpose(a, perm) { return this.op('Transpose', [a], perm ? { perm } : {}); }
  /** Reshape to `shape` (ONNX: 0 copies a dim, -1 infers one). */
  reshape(a, shape) {
    return this.op('Reshape', [a, { dtype: 'int64', shape: [shape.length], data: shape.map(BigInt) }]);
  }
  /** Sum over `axes` (all when omitted), keeping reduced dims when keepdims. */
  sum(a, axes, keepdims = false) {
    const ins = [a];
    if (axes) ins.push({ dtype: 'int64', shape: [axes.length], data: axes.map(BigInt) });
    return this.op('ReduceSum', ins, { keepdims: keepdims ? 1 : 0 });
  }

  // ---------------------------------------------------------------- ONNX models

  /**
   * Loads an ONNX model (a .onnx path, or its bytes) for repeated runs. The file's bytes are
   * streamed to the broker (LoadModel), which imports them with its ONNX importer (opsets up to
   * 17) and keeps the model in the session, so each run sends only input handles. The file
   * must be self-contained: weights stored in external data files are refused
   * (INVALID_ARGUMENT). A file over the broker's --max-model-bytes is refused before a byte
   * is sent (RESOURCE_EXHAUSTED); import errors come back with the importer's message.
   * @param {string|Uint8Array} source
   * @param {{device?: string}} [opts]
   * @returns {Promise<import('./model').Model>}
   */
  async loadOnnx(source, opts = {}) {
    const { Model, readOnnxSource } = require('./model');
    const closed = this._checkOpen('loadOnnx');
    if (closed) throw closed;
    return Model.loadOnnx(this, readOnnxSource(source), opts.device || '');
  }

  /**
   * Opens a named model of the broker (tensord serve --models DIR: DIR/NAME/model.onnx) in this
   * session: nothing is sent and nothing is charged to the session (the broker holds the model
   * once, for every session). Runs like a loaded model; its outputs belong to this session.
   * NOT_FOUND for an unknown name (the message lists the models there are),
   * FAILED_PRECONDITION for a model that failed to load (with the reason).
   * @param {string} name
   * @returns {Promise<import('./model').Model>}
   */
  async openModel(name) {
    const { Model } = require('./model');
    const closed = this._checkOpen('openModel');
    if (closed) throw closed;
    return Model.open(this, name);
  }

  /**
   * The broker's named models, ready or not (sorted by name): {name, ready, reason, device,
   * inputs, outputs, weightBytes, opset, irVersion, producer}.
   */
  async listModels() {
    const { modelInfo } = require('./model');
    const r = await this._unary('ListModels', {}, 'listing models');
    return (r.models || []).map(modelInfo);
  }
}

/**
 * A token as configured, trimmed of surrounding whitespace (a token file read into the variable
 * keeps its newline); any other byte outside printable ASCII is refused here (INVALID_ARGUMENT)
 * rather than by gRPC on the first call.
 * @param {string} raw
 * @param {string} from
 */
function cleanToken(raw, from) {
  const token = String(raw || '').trim();
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) {
      throw new TensordError('INVALID_ARGUMENT',
        `${from}: the token has ${c === 0x20 ? 'a space' : `character 0x${c.toString(16).padStart(2, '0')}`}` +
        ` at position ${i}; tokens are printable ASCII without spaces`, { local: true });
    }
  }
  return token;
}

/**
 * Plain HTTP/2, or TLS when a CA, a client certificate, opts.tls or TENSORD_TLS=1 asks for it.
 * @param {any} opts
 */
// The HTTP/2 session under a grpc-js call: grpc-js keeps it referenced (the event loop alive)
// while the call is open and has no public way to say otherwise. Found by its shape (an object
// holding `http2Stream`), not by internal names, a bounded walk; null when not found (then the
// Attach call keeps the process alive until close(), as before).
function http2SessionOf(call) {
  const seen = new Set();
  const queue = [call];
  while (queue.length && seen.size < 5000) {
    const o = queue.shift();
    if (!o || typeof o !== 'object' || seen.has(o)) continue;
    seen.add(o);
    const st = o.http2Stream;
    if (st && st.session && typeof st.session.unref === 'function') return st.session;
    if (Buffer.isBuffer(o) || ArrayBuffer.isView(o)) continue;
    for (const k of Object.keys(o)) {
      const v = o[k];
      if (v && typeof v === 'object') queue.push(v);
    }
  }
  return null;
}

function channelCredentials(opts) {
  const envTls = process.env.TENSORD_TLS && process.env.TENSORD_TLS !== '0';
  if (!opts.tls && !opts.tlsCa && !opts.tlsCert && !envTls) return grpc.credentials.createInsecure();
  const read = (path, what) => {
    if (!path) return null;
    try {
      return require('fs').readFileSync(path);
    } catch (e) {
      throw new TensordError('INVALID_ARGUMENT', `${what}: cannot read '${path}': ${e.message}`, { local: true });
    }
  };
  const ca = read(opts.tlsCa, 'TLS CA (TENSORD_TLS_CA)');
  const cert = read(opts.tlsCert, 'TLS client certificate (TENSORD_TLS_CERT)');
  const key = read(opts.tlsKey, 'TLS client key (TENSORD_TLS_KEY)');
  if (!cert !== !key) {
    throw new TensordError('INVALID_ARGUMENT',
      'a TLS client certificate needs its key and the other way round (TENSORD_TLS_CERT, TENSORD_TLS_KEY)',
      { local: true });
  }
  return grpc.credentials.createSsl(ca, key, cert);
}

/**
 * Connects to a broker: handshake (protocol version check) and a new session.
 * @param {string} [address]  'HOST:PORT' or 'unix:/path.sock'; default $TENSORD_ADDRESS
 * @param {ConnectOptions} [options]
 * @returns {Promise<Client>}
 */
async function connect(address, options = {}) {
  address = address || process.env.TENSORD_ADDRESS || '';
  if (!address) {
    throw new TensordError('INVALID_ARGUMENT',
      'connect: no broker address (pass HOST:PORT or unix:PATH, or set TENSORD_ADDRESS)', { local: true });
  }
  const opts = {
    connectTimeoutMs: 5000, callTimeoutMs: 60000, memoryLimit: 0, chunkBytes: CHUNK_BYTES,
    token: process.env.TENSORD_TOKEN || '', inlineMaxBytes: 256 << 10, attach: true,
    tls: false, tlsCa: process.env.TENSORD_TLS_CA || '', tlsCert: process.env.TENSORD_TLS_CERT || '',
    tlsKey: process.env.TENSORD_TLS_KEY || '',
    ...options,
  };
  opts.token = cleanToken(opts.token, options.token ? 'options.token' : 'TENSORD_TOKEN');
  opts.chunkBytes = Math.min(Math.max(opts.chunkBytes | 0, 4 << 10), 64 << 20);
  const proto = loadProto(opts.protoPath);
  const channelOptions = {
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
    // Brokers are dialled directly: an http_proxy in the environment must not capture them.
    'grpc.enable_http_proxy': 0,
    // Find a silent broker during long reads (a killed one closes the socket: noticed at once).
    'grpc.keepalive_time_ms': 10000,
    'grpc.keepalive_timeout_ms': 5000,
    'grpc.keepalive_permit_without_calls': 0,
    // A restarted broker is found again quickly.
    'grpc.initial_reconnect_backoff_ms': 100,
    'grpc.max_reconnect_backoff_ms': 2000,
  };
  const stub = new proto.Tensord(address, channelCredentials(opts), channelOptions);
  const client = new Client(address, opts, proto, stub);
  // The Attach call's own channel (a subchannel not shared with the main one: its connection
  // carries nothing else, so it can be unreferenced).
  client._makeAttachStub = () => new proto.Tensord(address, channelCredentials(opts),
    { ...channelOptions, 'grpc.use_local_subchannel_pool': 1 });
  try {
    await client._open();
  } catch (e) {
    if (client._heartbeat) clearInterval(client._heartbeat);
    if (client._attachCall) client._attachCall.cancel();
    if (client._attachStub && client._attachStub !== stub) client._attachStub.close();
    stub.close();
    throw e;
  }
  return client;
}

module.exports = { connect, Client, Tensor, PROTOCOL_VERSION };
