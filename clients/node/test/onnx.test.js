'use strict';
// ONNX models through the client: the checked-in fixtures (test/fixtures, made by
// make_fixtures.py) and, when present, a set of the ONNX project's node tests
// (../shared/onnx-node-tests/node), each compared with its expected outputs.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const td = require('..');
const { startBroker, rejectsWith, assertClose } = require('./helpers');

const FIXTURES = path.join(__dirname, 'fixtures');
const NODE_TESTS = process.env.TENSORD_ONNX_NODE_TESTS ||
                   path.join(__dirname, '..', '..', '..', '..', 'shared', 'onnx-node-tests', 'node');
// Node tests run here: elementwise, broadcasting, MatMul/Gemm, Conv, pooling, reductions,
// shape ops, attribute kinds (ints, floats, tensor), older opsets the client rewrites.
const NODE_TEST_NAMES = [
  'test_add', 'test_add_bcast', 'test_matmul_2d', 'test_matmul_4d', 'test_relu',
  'test_gemm_all_attributes', 'test_conv_with_strides_padding', 'test_maxpool_2d_pads',
  'test_softmax_axis_0', 'test_reduce_sum_keepdims_example', 'test_transpose_all_permutations_3',
  'test_constant', 'test_clip_default_min', 'test_cast_FLOAT_to_DOUBLE', 'test_argmax_default_axis_example',
  'test_unsqueeze_axis_1', 'test_slice', 'test_leakyrelu_default',
];

let broker;
let c;

before(async () => {
  broker = await startBroker();
  c = await td.connect(broker.address);
});

after(async () => {
  if (c) await c.close();
  if (broker) await broker.stop();
});

/** Reads an ONNX backend-test folder's test_data_set_0. */
function dataset(dir) {
  const ds = path.join(dir, 'test_data_set_0');
  const files = fs.readdirSync(ds).sort((x, y) => x.localeCompare(y, 'en', { numeric: true }));
  const read = (prefix) => files.filter((f) => f.startsWith(prefix)).map((f) => td.onnx.readTensor(path.join(ds, f)));
  return { inputs: read('input_'), outputs: read('output_') };
}

/** Loads dir/model.onnx, runs it on test_data_set_0 and compares every output. */
async function runOnnxTest(dir) {
  const model = await c.loadOnnx(path.join(dir, 'model.onnx'));
  const { inputs, outputs } = dataset(dir);
  assert.equal(inputs.length, model.inputs.length);
  const handles = [];
  for (let i = 0; i < inputs.length; ++i) {
    // ONNX 1.12's generator stores bfloat16 inputs as uint16: the model's declared type wins.
    const declared = model.inputs[i].dtype;
    handles.push(await c.upload(inputs[i].data, inputs[i].shape, { dtype: declared || inputs[i].dtype }));
  }
  const results = await model.run(handles);
  assert.equal(results.length, outputs.length);
  for (let k = 0; k < outputs.length; ++k) {
    const got = await c.read(results[k]);
    const want = outputs[k];
    assert.deepEqual(got.shape, want.shape, `${path.basename(dir)} output ${k} shape`);
    assert.equal(got.dtype, want.dtype, `${path.basename(dir)} output ${k} dtype`);
    assertClose(td.toNumbers(got), td.toNumbers(want), 1e-3, 1e-7);
  }
  await model.unload();
  return model;
}

test('fixture mlp (opset 17): MatMul + Add + Relu matches NumPy', async () => {
  const model = await runOnnxTest(path.join(FIXTURES, 'mlp'));
  assert.equal(model.opset, 17);
  assert.deepEqual(model.inputs, [{ name: 'X', dtype: 'float32', shape: [-1, 4] }]);
  assert.deepEqual(model.outputs, [{ name: 'Y', dtype: 'float32', shape: [-1, 3] }]);
  assert.equal(model.producer, 'make_fixtures.py');
});

test('fixture mlp: loaded once from bytes, run many times, inputs by name, other batch sizes', async () => {
  const dir = path.join(FIXTURES, 'mlp');
  const model = await c.loadOnnx(fs.readFileSync(path.join(dir, 'model.onnx')));
  const { inputs, outputs } = dataset(dir);
  const x = inputs[0];
  const y = outputs[0];
  for (const rows of [5, 2, 1]) {
    const xs = await c.upload(x.data.subarray(0, rows * 4), [rows, 4]);
    const [out] = await model.run({ X: xs });
    const got = await out.read();
    assert.deepEqual(got.shape, [rows, 3]);
    assertClose(got.data, y.data.subarray(0, rows * 3));
  }
  // Wrong input shape (the model declares [N, 4]), wrong input names.
  const bad = await c.upload(new Float32Array(6), [2, 3]);
  await rejectsWith(model.run([bad]).then(([h]) => h.read()), 'INVALID_ARGUMENT', /expects shape/);
  await rejectsWith(model.run({ x: bad }), 'INVALID_ARGUMENT', /input 'X' not given/);
  await rejectsWith(model.run({ X: bad, Z: bad }), 'INVALID_ARGUMENT', /no input named 'Z'/);
  await rejectsWith(model.run([]), 'INVALID_ARGUMENT', /takes 1 inputs, got 0/);
  await model.unload();
  await model.unload();  // idempotent
  await rejectsWith(model.run([bad]), 'FAILED_PRECONDITION', /unloaded/);
});

test('loaded once: the broker keeps the model; each run sends only handles', async () => {
  const model = await c.loadOnnx(path.join(FIXTURES, 'mlp', 'model.onnx'));
  assert.match(model.handle, /^[1-9][0-9]*$/, 'LoadModel answered with a model handle');
  const { inputs, outputs } = dataset(path.join(FIXTURES, 'mlp'));
  const x = await c.upload(inputs[0]);
  const n0 = c.rpcCount;
  const [y] = await model.run([x]);
  assertClose((await y.read()).data, outputs[0].data);
  assert.equal(c.rpcCount - n0, 1, 'RunModel only (the output came with the answer)');
  await model.unload();
});

test('a model over 2 MiB (4 MiB of weights) is loaded in LoadModel chunks', async () => {
  // The ONNX file is written here with protobufjs: Y = X + W, W float32[1024, 1024].
  const protobuf = require('protobufjs');
  const root = new protobuf.Root();
  root.loadSync(path.join(__dirname, '..', 'proto', 'onnx.proto'), { keepCase: true });
  const ModelProto = root.lookupType('onnx.ModelProto');
  const n = 1024;
  const w = new Float32Array(n * n);
  for (let i = 0; i < w.length; ++i) w[i] = (i % 977) * 0.25;
  const vi = (name) => ({
    name, type: { tensor_type: { elem_type: 1, shape: { dim: [{ dim_value: n }, { dim_value: n }] } } },
  });
  const bytes = ModelProto.encode(ModelProto.fromObject({
    ir_version: 8, opset_import: [{ domain: '', version: 17 }],
    graph: {
      name: 'big', node: [{ op_type: 'Add', input: ['X', 'W'], output: ['Y'] }],
      initializer: [{ name: 'W', data_type: 1, dims: [n, n], raw_data: Buffer.from(w.buffer) }],
      input: [vi('X')], output: [vi('Y')],
    },
  })).finish();
  const model = await c.loadOnnx(bytes);
  assert.ok(model.handle);
  const x = new Float32Array(n * n).fill(1);
  const [y] = await model.run([await c.upload(x, [n, n])]);
  const got = await y.read();
  for (let i = 0; i < w.length; i += 4099) assert.equal(got.data[i], w[i] + 1);
  await model.unload();
});

test('a broker whose protocol has no LoadModel: the graph goes with each run (Execute)', async () => {
  const os = require('os');
  const proto = fs.readFileSync(require('../lib/proto').findProto(), 'utf8')
    .split('\n').filter((l) => !/rpc (LoadModel|LoadModelInline|RunModel|UnloadModel)\(/.test(l)).join('\n');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensord-node-proto-'));
  try {
    fs.writeFileSync(path.join(dir, 'tensord.proto'), proto);
    const old = await td.connect(broker.address, { protoPath: path.join(dir, 'tensord.proto') });
    const model = await old.loadOnnx(path.join(FIXTURES, 'mlp', 'model.onnx'));
    assert.equal(model.handle, null);
    const { inputs, outputs } = dataset(path.join(FIXTURES, 'mlp'));
    const [y] = await model.run([await old.upload(inputs[0])]);
    assertClose((await y.read()).data, outputs[0].data);
    await model.unload();
    await old.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('fixture legacy_opset9: attribute forms rewritten to opset-17 inputs (Clip, Unsqueeze)', async () => {
  const model = await runOnnxTest(path.join(FIXTURES, 'legacy_opset9'));
  assert.equal(model.opset, 9);
});

test('ONNX node tests from ../shared/onnx-node-tests', async (t) => {
  if (!fs.existsSync(NODE_TESTS)) {
    t.skip(`no ONNX node tests at ${NODE_TESTS}`);
    return;
  }
  let ran = 0;
  for (const name of NODE_TEST_NAMES) {
    const dir = path.join(NODE_TESTS, name);
    if (!fs.existsSync(dir)) continue;
    await t.test(name, () => runOnnxTest(dir));
    ran++;
  }
  assert.ok(ran >= 10, `only ${ran} of the listed node tests exist in ${NODE_TESTS}`);
});

test('bad models: rejected with a clear code and message', async () => {
  await rejectsWith(c.loadOnnx(Buffer.from('this is not an onnx file')), 'INVALID_ARGUMENT', /not a valid ONNX model/);
  await rejectsWith(c.loadOnnx(Buffer.alloc(0)), 'INVALID_ARGUMENT', /empty file/);
  await rejectsWith(c.loadOnnx('/nonexistent/model.onnx'), 'NOT_FOUND', /cannot open/);
  // Truncated: the first half of a real model.
  const bytes = fs.readFileSync(path.join(FIXTURES, 'mlp', 'model.onnx'));
  await rejectsWith(c.loadOnnx(bytes.subarray(0, bytes.length >> 1)), 'INVALID_ARGUMENT');
});

// Issue 15, attack 10: external data through a symlink in the model folder that leads outside
// it (/etc/passwd) is refused by name before a byte is read; a symlink inside the folder works.
test('external data through a symlink leaving the model folder is refused', async () => {
  const os = require('os');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensord-ext-'));
  try {
    fs.copyFileSync(path.join(FIXTURES, 'external_data', 'model.onnx'), path.join(dir, 'model.onnx'));
    fs.symlinkSync('/etc/passwd', path.join(dir, 'weights.bin'));
    await rejectsWith(c.loadOnnx(path.join(dir, 'model.onnx')), 'INVALID_ARGUMENT',
                      /weights\.bin.*outside the model folder/);
    fs.unlinkSync(path.join(dir, 'weights.bin'));
    fs.writeFileSync(path.join(dir, 'real.bin'), Buffer.from(new Float32Array([...Array(12).keys()]).buffer));
    fs.symlinkSync('real.bin', path.join(dir, 'weights.bin'));
    const model = await c.loadOnnx(path.join(dir, 'model.onnx'));
    const x = await c.upload(new Float32Array([1, 1, 1]), [1, 3]);
    const [y] = await model.run([x]);
    const v = await c.read(y);
    assert.deepEqual(Array.from(v.data), [12, 15, 18, 21]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
