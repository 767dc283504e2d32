// Type declarations for the tensord Node.js client (lib/index.js).

export type DTypeName =
  | 'float32' | 'uint8' | 'int8' | 'uint16' | 'int16' | 'int32' | 'int64' | 'bool'
  | 'float16' | 'float64' | 'uint32' | 'uint64' | 'bfloat16';

export type TypedArray =
  | Float32Array | Float64Array | Int8Array | Uint8Array | Int16Array | Uint16Array
  | Int32Array | Uint32Array | BigInt64Array | BigUint64Array;

/** A tensor on the host. bool: Uint8Array of 0/1; float16/bfloat16: Uint16Array of raw bits. */
export interface HostTensor {
  dtype: DTypeName;
  shape: number[];
  data: TypedArray;
}

export type HostData =
  | TypedArray | Buffer | Array<number | boolean | bigint> | number | boolean | bigint
  | { dtype?: DTypeName | number; shape?: number[]; data: TypedArray | Array<number | boolean | bigint> };

export interface ConnectOptions {
  /** Handshake and session opening (default 5000). */
  connectTimeoutMs?: number;
  /** Unary calls: execute, inline uploads, release ... (default 60000). */
  callTimeoutMs?: number;
  /** Bytes this session may hold; 0 = the broker's limit. */
  memoryLimit?: number;
  /** Upload/read chunk size (default 2 MiB). */
  chunkBytes?: number;
  /** tensord.proto to use (default: $TENSORD_PROTO, else the repository's proto/tensord.proto). */
  protoPath?: string;
  /** Sent as "authorization: Bearer <token>" (default $TENSORD_TOKEN); trimmed, and refused
   *  (INVALID_ARGUMENT) if anything else in it is not printable ASCII. */
  token?: string;
  /** TLS with the system's CAs (also TENSORD_TLS=1); implied by tlsCa/tlsCert. */
  tls?: boolean;
  /** CA file (PEM) verifying the broker's certificate (default $TENSORD_TLS_CA). */
  tlsCa?: string;
  /** Client certificate and key (PEM) for a broker with --tls-ca (default $TENSORD_TLS_CERT,
   *  $TENSORD_TLS_KEY). */
  tlsCert?: string;
  tlsKey?: string;
  /** Bind the session to a long-lived call (default true): the broker frees it as soon as
   *  this process dies or its connection drops, as for the C++ client; false = only when its
   *  lease lapses. The call has its own connection, which does not keep the event loop alive. */
  attach?: boolean;
  /** execute()/run() ask for output values up to this many bytes with the answer, so that
   *  reading them costs no further call (default 256 KiB; 0 = never). */
  inlineMaxBytes?: number;
}

export interface DeviceInfo {
  name: string;
  kind: string;
  index: number;
  vendor: string;
  model: string;
  memoryBytes: number;
  memoryInUse: number;
  backend: string;
  backendVersion: string;
  threads: number;
}

export type GrpcCodeName =
  | 'OK' | 'CANCELLED' | 'UNKNOWN' | 'INVALID_ARGUMENT' | 'DEADLINE_EXCEEDED' | 'NOT_FOUND'
  | 'ALREADY_EXISTS' | 'PERMISSION_DENIED' | 'RESOURCE_EXHAUSTED' | 'FAILED_PRECONDITION'
  | 'ABORTED' | 'OUT_OF_RANGE' | 'UNIMPLEMENTED' | 'INTERNAL' | 'UNAVAILABLE' | 'DATA_LOSS'
  | 'UNAUTHENTICATED';

/** Every rejection of this client. message = `${code}: ${details}`. */
export class TensordError extends Error {
  code: GrpcCodeName;
  grpcCode: number;
  details: string;
  /** The broker raised it (its message, unchanged). */
  fromBroker: boolean;
  /** This client refused the call before sending anything. */
  local: boolean;
}

/** A tensor held by the broker in this client's session. */
export class Tensor {
  readonly client: Client;
  /** The broker's handle (uint64, decimal). */
  readonly id: string;
  dtype?: DTypeName;
  shape?: number[];
  device?: string;
  read(): Promise<HostTensor>;
  release(): Promise<void>;
  info(): Promise<TensorInfo>;
}

export interface TensorInfo {
  dtype: DTypeName | undefined;
  shape: number[];
  device: string;
}

export type HandleLike = Tensor | string | bigint;

/** A symbolic value of the graph builder. */
export class Value {
  readonly kind: 'input' | 'const' | 'op';
}

export interface ValueType { dtype?: DTypeName | number; shape?: Array<number | string | null> }

export interface PlainNode {
  op: string;
  inputs: Array<string | null>;
  outputs: string[];
  attrs?: Record<string, unknown>;
  name?: string;
  domain?: string;
}

export interface PlainGraph {
  name?: string;
  inputs: Array<string | ({ name: string } & ValueType)>;
  outputs: Array<string | ({ name: string } & ValueType)>;
  nodes: PlainNode[];
  initializers?: Record<string, HostData>;
}

export type GraphLike = PlainGraph | Value | Value[] | ((...inputs: Value[]) => Value | Value[]);

export interface ModelValueInfo { name: string; dtype?: DTypeName; shape?: number[] }

/** An ONNX model loaded into the session (imported by the broker). */
export class Model {
  readonly client: Client;
  readonly name: string;
  readonly inputs: ModelValueInfo[];
  readonly outputs: ModelValueInfo[];
  readonly opset: number;
  readonly irVersion: number;
  readonly producer: string;
  readonly device: string;
  /** The broker's model handle (decimal). */
  readonly handle: string;
  /** A named model of the broker (openModel): held once by the broker, not by this session. */
  readonly named: boolean;
  /** Named models only: bytes of its weights, held once by the broker. */
  readonly weightBytes?: number;
  run(inputs: HandleLike[] | Record<string, HandleLike>): Promise<Tensor[]>;
  unload(): Promise<void>;
}

export class Client {
  readonly address: string;
  readonly session: string;
  serverVersion: string;
  defaultDevice: string;
  memoryLimit: number;
  /** The largest ONNX file (bytes) the broker takes (--max-model-bytes); 0 when not told. */
  maxModelBytes: number;
  rpcCount: number;
  close(): Promise<void>;
  devices(): Promise<DeviceInfo[]>;
  echo(payloadBytes?: number): Promise<void>;
  upload(data: HostData, shape?: number[], opts?: { dtype?: DTypeName | number; device?: string }): Promise<Tensor>;
  upload(data: HostData, opts: { dtype?: DTypeName | number; device?: string }): Promise<Tensor>;
  read(h: HandleLike): Promise<HostTensor>;
  info(h: HandleLike): Promise<TensorInfo>;
  wait(h: HandleLike): Promise<void>;
  copy(h: HandleLike, device: string): Promise<Tensor>;
  release(h: HandleLike): Promise<void>;
  execute(graph: GraphLike, inputs?: HandleLike[], opts?: { device?: string }): Promise<Tensor[]>;
  op(opType: string, inputs: Array<HandleLike | HostData | null>, attrs?: Record<string, unknown>,
     opts?: { outputs?: 1; device?: string; domain?: string }): Promise<Tensor>;
  op(opType: string, inputs: Array<HandleLike | HostData | null>, attrs: Record<string, unknown>,
     opts: { outputs: number; device?: string; domain?: string }): Promise<Tensor[]>;
  add(a: HandleLike | HostData, b: HandleLike | HostData): Promise<Tensor>;
  sub(a: HandleLike | HostData, b: HandleLike | HostData): Promise<Tensor>;
  mul(a: HandleLike | HostData, b: HandleLike | HostData): Promise<Tensor>;
  div(a: HandleLike | HostData, b: HandleLike | HostData): Promise<Tensor>;
  matmul(a: HandleLike, b: HandleLike): Promise<Tensor>;
  relu(a: HandleLike): Promise<Tensor>;
  sigmoid(a: HandleLike): Promise<Tensor>;
  tanh(a: HandleLike): Promise<Tensor>;
  exp(a: HandleLike): Promise<Tensor>;
  neg(a: HandleLike): Promise<Tensor>;
  abs(a: HandleLike): Promise<Tensor>;
  sqrt(a: HandleLike): Promise<Tensor>;
  softmax(a: HandleLike, axis?: number): Promise<Tensor>;
  transpose(a: HandleLike, perm?: number[]): Promise<Tensor>;
  reshape(a: HandleLike, shape: number[]): Promise<Tensor>;
  sum(a: HandleLike, axes?: number[], keepdims?: boolean): Promise<Tensor>;
  loadOnnx(source: string | Uint8Array, opts?: { device?: string }): Promise<Model>;
  /** A named model of the broker (tensord serve --models DIR), opened in this session. */
  openModel(name: string): Promise<Model>;
  listModels(): Promise<NamedModelInfo[]>;
}

/** A named model of the broker, as listModels() reports it. */
export interface NamedModelInfo {
  name: string;
  /** false: it failed to load; `reason` says why. */
  ready: boolean;
  reason: string;
  device: string;
  inputs: ModelValueInfo[];
  outputs: ModelValueInfo[];
  weightBytes: number;
  opset: number;
  irVersion: number;
  producer: string;
}

export const PROTOCOL_VERSION: number;
export function connect(address?: string, options?: ConnectOptions): Promise<Client>;

export function input(name?: string, type?: ValueType): Value;
export function constant(data: HostData, opts?: { dtype?: DTypeName | number; shape?: number[] }): Value;
export function op(opType: string, inputs: Array<Value | HostData | null>, attrs?: Record<string, unknown>,
                   opts?: { outputs?: 1; name?: string; domain?: string }): Value;
export function op(opType: string, inputs: Array<Value | HostData | null>, attrs: Record<string, unknown>,
                   opts: { outputs: number; name?: string; domain?: string }): Value[];
export function graph(outputs: Value | Value[] | ((...inputs: Value[]) => Value | Value[]),
                      opts?: { inputs?: Value[]; name?: string }): PlainGraph;

export interface AttrValue { readonly value: unknown }
export const attr: {
  int(v: number | bigint): AttrValue;
  float(v: number): AttrValue;
  string(v: string | Uint8Array): AttrValue;
  ints(v: Array<number | bigint>): AttrValue;
  floats(v: number[]): AttrValue;
  strings(v: Array<string | Uint8Array>): AttrValue;
  tensor(v: HostData): AttrValue;
  graph(v: GraphLike): AttrValue;
};

export const dtypes: DTypeName[];
export function toNumbers(t: HostTensor): Array<number | bigint>;
export function halfToFloat(bits: number): number;
export function floatToHalf(v: number): number;
