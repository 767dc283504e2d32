'use strict';
// The client against a real broker: connect, devices, upload/read of every array type,
// streamed transfers, ops (one-node graphs, builder graphs, plain-object graphs), copies,
// sessions, and bad input answered with the right gRPC code.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const td = require('..');
const { startBroker, rejectsWith, assertClose } = require('./helpers');

let broker;
let c;

before(async () => {
  broker = await startBroker();
  c = await td.connect(broker.address);
});

after(async () => {
  if (c) await c.close();
  if (broker) assert.equal(await broker.stop(), 0, 'broker exit status after SIGTERM');
});

test('connect: handshake, session, devices', async () => {
  assert.match(c.session, /^[0-9a-f]{32}$/);
  assert.match(c.serverVersion, /^\d+\.\d+/);
  assert.equal(c.defaultDevice, 'cpu:0');
  const devices = await c.devices();
  assert.deepEqual(devices.map((d) => d.name), ['cpu:0', 'cpu:1']);
  assert.equal(devices[0].kind, 'cpu');
  assert.ok(devices[0].memoryBytes > 0);
});

test('connect: TENSORD_ADDRESS is the default address', async () => {
  const saved = process.env.TENSORD_ADDRESS;
  process.env.TENSORD_ADDRESS = broker.address;
  try {
    const c2 = await td.connect();
    assert.equal(c2.address, broker.address);
    await c2.close();
  } finally {
    if (saved === undefined) delete process.env.TENSORD_ADDRESS; else process.env.TENSORD_ADDRESS = saved;
  }
});

test('upload and read back every array type', async () => {
  const cases = [
    [new Float32Array([1.5, -2, 3.25, 4, 5, 6]), [2, 3], 'float32'],
    [new Float64Array([1e-300, 2, -3]), [3], 'float64'],
    [new Int32Array([1, -2, 2147483647, -2147483648]), [2, 2], 'int32'],
    [new BigInt64Array([1n, -2n, 9007199254740993n]), [3], 'int64'],
    [new Uint8Array([0, 1, 255]), [3], 'uint8'],
    [new Int8Array([-128, 0, 127]), [3], 'int8'],
    [new Uint16Array([0, 65535]), [2], 'uint16'],
    [new Int16Array([-32768, 32767]), [2], 'int16'],
    [new Uint32Array([4294967295, 0]), [2], 'uint32'],
    [new BigUint64Array([18446744073709551615n]), [1], 'uint64'],
  ];
  for (const [data, shape, dtype] of cases) {
    const h = await c.upload(data, shape);
    assert.equal(h.dtype, dtype);
    const t = await c.read(h);
    assert.equal(t.dtype, dtype);
    assert.deepEqual(t.shape, shape);
    assert.equal(t.data.constructor, data.constructor, dtype);
    assert.deepEqual(Array.from(t.data), Array.from(data), dtype);
  }
});

test('upload: plain arrays, bool, scalars, float16, dtype conversion', async () => {
  let t = await c.read(await c.upload([true, false, true, true], [2, 2]));
  assert.equal(t.dtype, 'bool');
  assert.deepEqual(Array.from(t.data), [1, 0, 1, 1]);

  t = await c.read(await c.upload(new Uint8Array([0, 3, 1]), { dtype: 'bool' }));
  assert.equal(t.dtype, 'bool');
  assert.deepEqual(Array.from(t.data), [0, 1, 1]);

  t = await c.read(await c.upload([1, 2.5, 3]));  // numbers: float32 by default
  assert.equal(t.dtype, 'float32');
  assert.deepEqual(t.shape, [3]);

  t = await c.read(await c.upload(7, [], { dtype: 'int64' }));  // a scalar
  assert.deepEqual(t.shape, []);
  assert.deepEqual(Array.from(t.data), [7n]);

  t = await c.read(await c.upload([1, -2, 0.5, 65504], [4], { dtype: 'float16' }));
  assert.equal(t.dtype, 'float16');
  assert.deepEqual(td.toNumbers(t), [1, -2, 0.5, 65504]);

  t = await c.read(await c.upload(new Float64Array([1.5, 2]), [2], { dtype: 'float32' }));
  assert.equal(t.dtype, 'float32');
  assert.deepEqual(Array.from(t.data), [1.5, 2]);

  t = await c.read(await c.upload(new Float32Array(0), [0, 3]));  // empty
  assert.deepEqual(t.shape, [0, 3]);
  assert.equal(t.data.length, 0);
});

test('streamed upload and read of 12 MB (several 2 MiB chunks)', async () => {
  const n = 3_000_000;
  const x = new Float32Array(n);
  for (let i = 0; i < n; ++i) x[i] = (i % 1009) - 500;
  const h = await c.upload(x, [1000, 3000]);
  const t = await c.read(h);
  assert.deepEqual(t.shape, [1000, 3000]);
  assert.deepEqual(Buffer.from(t.data.buffer), Buffer.from(x.buffer));
  const y = await c.read(await c.relu(h));
  for (let i = 0; i < n; i += 9973) assert.equal(y.data[i], Math.max(x[i], 0));
  await c.release(h);
});

test('ops: add, matmul, relu, softmax, transpose, reshape, sum', async () => {
  const a = await c.upload(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
  const b = await c.upload(new Float32Array([10, 20, 30, 40, 50, 60]), [2, 3]);
  const w = await c.upload(new Float32Array([1, 0, 0, 1, 1, -1]), [3, 2]);

  let t = await c.read(await c.add(a, b));
  assert.deepEqual(Array.from(t.data), [11, 22, 33, 44, 55, 66]);

  t = await c.read(await c.matmul(a, w));  // [[1+3, 2-3], [4+6, 5-6]]
  assert.deepEqual(t.shape, [2, 2]);
  assert.deepEqual(Array.from(t.data), [4, -1, 10, -1]);

  t = await c.read(await c.relu(await c.sub(a, await c.upload(new Float32Array([3, 3, 3]), [3]))));
  assert.deepEqual(Array.from(t.data), [0, 0, 0, 1, 2, 3]);  // broadcast [2,3] - [3]

  t = await c.read(await c.softmax(a));
  const e = [1, 2, 3].map(Math.exp);
  const s = e[0] + e[1] + e[2];
  assertClose(t.data, [...e.map((v) => v / s), ...e.map((v) => v / s)]);

  t = await c.read(await c.transpose(a));
  assert.deepEqual(t.shape, [3, 2]);
  assert.deepEqual(Array.from(t.data), [1, 4, 2, 5, 3, 6]);

  t = await c.read(await c.reshape(a, [3, -1]));
  assert.deepEqual(t.shape, [3, 2]);

  t = await c.read(await c.sum(a, [1]));
  assert.deepEqual(Array.from(t.data), [6, 15]);

  t = await c.read(await c.add(a, new Float32Array([100])));  // a host constant
  assert.deepEqual(Array.from(t.data), [101, 102, 103, 104, 105, 106]);
});

test('execute: builder graphs, plain-object graphs, attributes, several outputs', async () => {
  const a = await c.upload(new Float32Array([-1, 2, -3, 4]), [2, 2]);
  const b = await c.upload(new Float32Array([1, 1, 1, 1]), [2, 2]);

  // Builder, function form: y = Relu(x0 @ x1 + x1)
  let [y] = await c.execute(td.graph((x0, x1) => td.op('Relu', [td.op('Add', [td.op('MatMul', [x0, x1]), x1])])), [a, b]);
  assert.deepEqual(Array.from((await y.read()).data), [2, 2, 2, 2]);  // -1+2+1, ..., -3+4+1

  // Builder, named inputs in explicit order; two graph outputs; a float attribute given whole.
  const x = td.input('x');
  const z = td.input('z');
  const g = td.graph([td.op('LeakyRelu', [x], { alpha: 2 }), td.op('Mul', [x, z])], { inputs: [z, x] });
  const [leaky, prod] = await c.execute(g, [b, a]);
  assert.deepEqual(Array.from((await leaky.read()).data), [-2, 2, -6, 4]);
  assert.deepEqual(Array.from((await prod.read()).data), [-1, 2, -3, 4]);

  // One op with two outputs (Split), attributes as ints.
  const [lo, hi] = await c.op('Split', [a], { axis: 1 }, { outputs: 2 });
  assert.deepEqual(Array.from((await lo.read()).data), [-1, -3]);
  assert.deepEqual(Array.from((await hi.read()).data), [2, 4]);

  // A plain object, as in ONNX: names connect nodes; an initializer.
  const plain = {
    name: 'plain',
    inputs: ['p', { name: 'q', dtype: 'float32', shape: [2, -1] }],
    outputs: ['out'],
    nodes: [
      { op: 'Add', inputs: ['p', 'q'], outputs: ['s'] },
      { op: 'Mul', inputs: ['s', 'two'], outputs: ['out'] },
    ],
    initializers: { two: new Float32Array([2]) },
  };
  [y] = await c.execute(plain, [a, b]);
  assert.deepEqual(Array.from((await y.read()).data), [0, 6, -4, 10]);

  // Explicit attribute kinds; Cast to int64.
  [y] = await c.execute(td.op('Cast', [td.input('v')], { to: td.attr.int(7) }), [a]);
  const t = await y.read();
  assert.equal(t.dtype, 'int64');
  assert.deepEqual(Array.from(t.data), [-1n, 2n, -3n, 4n]);
});

test('copy to another device, info', async () => {
  const a = await c.upload(new Float32Array([1, 2, 3]), [3], { device: 'cpu:0' });
  const b = await c.copy(a, 'cpu:1');
  assert.deepEqual(await c.info(b), { dtype: 'float32', shape: [3], device: 'cpu:1' });
  const s = await c.add(b, b);  // runs on cpu:1
  assert.equal((await s.info()).device, 'cpu:1');
  assert.deepEqual(Array.from((await s.read()).data), [2, 4, 6]);
  await rejectsWith(c.copy(a, 'cuda:7'), 'NOT_FOUND');
});

test('release: the handle is gone; a second release is NOT_FOUND', async () => {
  const a = await c.upload(new Float32Array([1]));
  await a.release();
  await rejectsWith(c.read(a), 'NOT_FOUND', /does not exist/);
  await rejectsWith(c.release(a), 'NOT_FOUND');
});

test('bad input: rejected promises with the broker\'s code and message', async () => {
  const a = await c.upload(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
  // Unknown handle.
  let err = await rejectsWith(c.read('987654321'), 'NOT_FOUND', /987654321/);
  assert.equal(err.fromBroker, true);
  assert.equal(err.grpcCode, 5);
  await rejectsWith(c.add(a, '987654321'), 'NOT_FOUND');
  // Shapes that do not fit: MatMul [2,3] x [2,3].
  err = await rejectsWith(c.matmul(a, a).then((h) => h.read()), 'INVALID_ARGUMENT', /MatMul/);
  assert.equal(err.fromBroker, true);
  await rejectsWith(c.add(a, await c.upload(new Float32Array(4), [4])).then((h) => h.read()),
                    'INVALID_ARGUMENT');
  // Declared input type that the handle contradicts.
  await rejectsWith(c.execute({ inputs: [{ name: 'x', dtype: 'float32', shape: [3, 2] }], outputs: ['y'],
                                nodes: [{ op: 'Relu', inputs: ['x'], outputs: ['y'] }] }, [a])
    .then(([h]) => h.read()), 'INVALID_ARGUMENT', /expects shape/);
  // Unknown op.
  await rejectsWith(c.op('NoSuchOp', [a]).then((h) => h.read()), 'UNIMPLEMENTED', /NoSuchOp/);
  // Wrong number of inputs for the graph.
  await rejectsWith(c.execute(td.graph((x, y) => td.op('Add', [x, y])), [a]), 'INVALID_ARGUMENT', /takes 2 inputs/);
  // Refused here before sending: data that does not fill the shape, bad dtype, bad handle.
  err = await rejectsWith(c.upload(new Float32Array(5), [2, 3]), 'INVALID_ARGUMENT', /holds 6 elements, the data has 5/);
  assert.equal(err.local, true);
  await rejectsWith(c.upload([1, 2], [2], { dtype: 'complex64' }), 'INVALID_ARGUMENT', /unknown dtype/);
  await rejectsWith(c.upload(new Float32Array(1), [-1]), 'INVALID_ARGUMENT', /not a non-negative integer/);
  await rejectsWith(c.read({}), 'INVALID_ARGUMENT', /tensor handle/);
  await rejectsWith(c.execute({ nodes: [{ inputs: [] }] }, []), 'INVALID_ARGUMENT', /no op type/);
  // Unknown device.
  await rejectsWith(c.upload(new Float32Array(1), [1], { device: 'gpu:9' }), 'NOT_FOUND', /gpu:9/);
});

test('sessions: another client cannot name this one\'s handles; close frees them', async () => {
  const a = await c.upload(new Float32Array([1, 2]));
  const other = await td.connect(broker.address);
  assert.notEqual(other.session, c.session);
  await rejectsWith(other.read(a.id), 'NOT_FOUND');
  await rejectsWith(other.read(a), 'INVALID_ARGUMENT', /another client/);
  const mine = await other.upload(new Float32Array([3]));
  await other.close();
  await other.close();  // idempotent
  await rejectsWith(other.read(mine), 'FAILED_PRECONDITION', /closed/);
  assert.deepEqual(Array.from((await c.read(a)).data), [1, 2]);
});

test('small results come with the answer: execute + read is one round trip', async () => {
  const a = await c.upload(new Float32Array([1, 2, 3]));
  let n0 = c.rpcCount;
  let t = await c.read(await c.add(a, a));
  assert.deepEqual(Array.from(t.data), [2, 4, 6]);
  assert.equal(c.rpcCount - n0, 1, 'Execute only');
  // An op's error travels the same way.
  const row = await c.upload(new Float32Array([1, 2, 3]), [1, 3]);
  n0 = c.rpcCount;
  const err = await rejectsWith(c.matmul(row, row).then((h) => h.read()), 'INVALID_ARGUMENT', /MatMul/);
  assert.equal(err.fromBroker, true);
  assert.equal(c.rpcCount - n0, 1);

  // Without inline values: Execute, then Read.
  const plain = await td.connect(broker.address, { inlineMaxBytes: 0 });
  const b = await plain.upload(new Float32Array([1, 2, 3]), [1, 3]);
  n0 = plain.rpcCount;
  t = await plain.read(await plain.add(b, b));
  assert.deepEqual(Array.from(t.data), [2, 4, 6]);
  assert.equal(plain.rpcCount - n0, 2, 'Execute and Read');
  await rejectsWith(plain.matmul(b, b).then((h) => h.read()), 'INVALID_ARGUMENT', /MatMul/);
  // A value read once from the answer is read from the broker the next time; released is gone.
  const s = await c.add(a, a);
  assert.deepEqual(Array.from((await s.read()).data), [2, 4, 6]);
  assert.deepEqual(Array.from((await s.read()).data), [2, 4, 6]);
  const r = await c.add(a, a);
  await c.release(r.id);
  await rejectsWith(c.read(r), 'NOT_FOUND');
  await plain.close();
});
