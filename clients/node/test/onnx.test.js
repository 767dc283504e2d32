'use strict';
// ONNX models through the client: the .onnx file's bytes go to the broker, which imports them
// (the C++ importer; the client has none). The checked-in fixtures (test/fixtures, made by
// make_fixtures.py), models written here with /usr/bin/python3 + onnx, and, when present, a set
// of the ONNX project's node tests (../shared/onnx-node-tests/node), each compared with its
// expected outputs.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const td = require('..');
const { startBroker, rejectsWith, assertClose } = require('./helpers');
const { readTensor } = require('./tensor_proto');

const FIXTURES = path.join(__dirname, 'fixtures');
const NODE_TESTS = process.env.TENSORD_ONNX_NODE_TESTS ||
                   path.join(__dirname, '..', '..', '..', '..', 'shared', 'onnx-node-tests', 'node');
// Node tests run here: elementwise, broadcasting, MatMul/Gemm, Conv, pooling, reductions,
// shape ops, attribute kinds (ints, floats, tensor), older opsets the broker's importer rewrites.
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
  const read = (prefix) => files.filter((f) => f.startsWith(prefix)).map((f) => readTensor(path.join(ds, f)));
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
  await rejectsWith(model.run({ x: bad }), 'INVALID_ARGUMENT',
    /no input named 'x'; model input 'X' not given \(its inputs: X\)/);
  await rejectsWith(model.run({}), 'INVALID_ARGUMENT', /model input 'X' not given \(its inputs: X\)/);
  await rejectsWith(model.run({ X: bad, Z: bad }), 'INVALID_ARGUMENT', /no input named 'Z'/);
  await rejectsWith(model.run([]), 'INVALID_ARGUMENT', /takes 1 inputs, got 0/);
  await model.unload();
  await model.unload();  // idempotent
  await rejectsWith(model.run([bad]), 'FAILED_PRECONDITION', /unloaded/);
});

test('loaded once: the broker keeps the model; each run sends only handles', async () => {
  const model = await c.loadOnnx(path.join(FIXTURES, 'mlp', 'model.onnx'));
  assert.match(model.handle, /^[1-9][0-9]*$/, 'LoadModel answered with a model handle');
  assert.equal(model.name, 'mlp', 'named by its folder, as the C++ and Python clients name it');
  const { inputs, outputs } = dataset(path.join(FIXTURES, 'mlp'));
  const x = await c.upload(inputs[0]);
  const n0 = c.rpcCount;
  const [y] = await model.run([x]);
  assertClose((await y.read()).data, outputs[0].data);
  assert.equal(c.rpcCount - n0, 1, 'RunModel only (the output came with the answer)');
  await model.unload();
});

/**
 * Runs a Python snippet with /usr/bin/python3 (Debian python3-onnx) that writes an ONNX file to
 * the path in sys.argv[1]; returns the file's bytes, or null after t.skip() with the reason.
 */
function pythonOnnx(t, script) {
  const { spawnSync } = require('child_process');
  const os = require('os');
  const python = '/usr/bin/python3';
  if (!fs.existsSync(python)) {
    t.skip(`no ${python} to write the ONNX file`);
    return null;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensord-node-onnx-'));
  try {
    const file = path.join(dir, 'model.onnx');
    const r = spawnSync(python, ['-c', script, file], { encoding: 'utf8' });
    if (r.status !== 0 && /No module named/.test(r.stderr)) {
      t.skip(`${python} lacks onnx or numpy (Debian python3-onnx, python3-numpy): ${r.stderr.trim()}`);
      return null;
    }
    assert.equal(r.status, 0, `python failed: ${r.stderr}`);
    return fs.readFileSync(file);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// Y = X + W, W float32[1024, 1024] (4 MiB): over the 2 MiB chunk size.
const BIG_MODEL_PY = `
import sys, numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
n = 1024
w = ((np.arange(n * n) % 977) * 0.25).astype(np.float32).reshape(n, n)
g = helper.make_graph([helper.make_node("Add", ["X", "W"], ["Y"])], "big",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n, n])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])],
    [numpy_helper.from_array(w, "W")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="big.py")
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
`;

test('a model over 2 MiB (4 MiB of weights) is sent in LoadModel chunks', async (t) => {
  const bytes = pythonOnnx(t, BIG_MODEL_PY);
  if (!bytes) return;
  assert.ok(bytes.length > 4 << 20);
  const n0 = c.rpcCount;
  const model = await c.loadOnnx(bytes);
  assert.equal(c.rpcCount - n0, 1, 'one LoadModel stream');
  assert.ok(model.handle);
  assert.equal(model.name, 'big');
  assert.equal(model.producer, 'big.py');
  assert.deepEqual(model.inputs, [{ name: 'X', dtype: 'float32', shape: [1024, 1024] }]);
  const n = 1024;
  const x = new Float32Array(n * n).fill(1);
  const [y] = await model.run([await c.upload(x, [n, n])]);
  const got = await y.read();
  for (let i = 0; i < n * n; i += 4099) assert.equal(got.data[i], (i % 977) * 0.25 + 1);
  await model.unload();
});

test('over the broker\'s --max-model-bytes: refused before the file is sent; the broker serves on', async (t) => {
  const bytes = pythonOnnx(t, BIG_MODEL_PY);
  if (!bytes) return;
  const limit = 1 << 20;
  const small = await startBroker(['--max-model-bytes', String(limit)]);
  const c2 = await td.connect(small.address);
  try {
    assert.equal(c2.maxModelBytes, limit, 'the handshake tells the limit');
    // The client knows the limit: nothing is sent.
    const n0 = c2.rpcCount;
    const local = await rejectsWith(c2.loadOnnx(bytes), 'RESOURCE_EXHAUSTED',
                                    new RegExp(`${bytes.length} bytes, over the broker's limit of ${limit}`));
    assert.ok(local.local, 'refused by the client');
    assert.equal(c2.rpcCount, n0, 'no call was made');
    // A client that sends anyway: the broker refuses on the header alone (it declares 1 GiB and
    // sends no byte; the answer is the size limit, not "the stream carried 0 bytes").
    const header = { device: '', graph_bytes: String(1 << 30), format: 1 };
    const remote = await rejectsWith(c2._clientStream('LoadModel', [{ header }], 'loading a model'),
                                     'RESOURCE_EXHAUSTED', /the ONNX file takes 1073741824 bytes.*--max-model-bytes 1048576/);
    assert.ok(remote.fromBroker, 'refused by the broker');
    // And with the whole file behind the header: the same refusal.
    c2.maxModelBytes = 0;
    await rejectsWith(c2.loadOnnx(bytes), 'RESOURCE_EXHAUSTED', /--max-model-bytes 1048576/);
    // The broker still serves: a model under the limit loads and runs.
    const model = await c2.loadOnnx(path.join(FIXTURES, 'mlp', 'model.onnx'));
    const { inputs, outputs } = dataset(path.join(FIXTURES, 'mlp'));
    const [y] = await model.run([await c2.upload(inputs[0].data, inputs[0].shape)]);
    assertClose((await y.read()).data, outputs[0].data);
  } finally {
    await c2.close();
    await small.stop();
  }
});

test('fixture legacy_opset9: the broker rewrites attribute forms to opset-17 inputs (Clip, Unsqueeze)', async () => {
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

test('bad models: rejected with a clear code and message; the broker serves on', async () => {
  const e = await rejectsWith(c.loadOnnx(Buffer.from('this is not an onnx file')), 'INVALID_ARGUMENT',
                              /the ONNX file sent: not a valid ONNX model \(protobuf parse failed: corrupt or truncated file\)/);
  assert.ok(e.fromBroker, 'the broker\'s importer said so');
  await rejectsWith(c.loadOnnx(Buffer.alloc(0)), 'INVALID_ARGUMENT', /empty file/);
  await rejectsWith(c.loadOnnx('/nonexistent/model.onnx'), 'NOT_FOUND', /cannot open '\/nonexistent\/model.onnx'/);
  await rejectsWith(c.loadOnnx(42), 'INVALID_ARGUMENT', /expected a file path or the bytes/);
  // Truncated: the first half of a real model.
  const bytes = fs.readFileSync(path.join(FIXTURES, 'mlp', 'model.onnx'));
  await rejectsWith(c.loadOnnx(bytes.subarray(0, bytes.length >> 1)), 'INVALID_ARGUMENT', /corrupt or truncated/);
  // The session and the broker go on: the whole file loads and runs.
  const model = await c.loadOnnx(bytes);
  const { inputs, outputs } = dataset(path.join(FIXTURES, 'mlp'));
  const [y] = await model.run([await c.upload(inputs[0].data, inputs[0].shape)]);
  assertClose((await y.read()).data, outputs[0].data);
  await model.unload();
});

// External data files are never read for a remote client: the broker gets the .onnx file's
// bytes only, so a model whose weights live beside it (or a symlink to /etc/passwd posing as
// them: issue 15, attack 10) is refused by name, whatever the files next to it.
test('a model with external data files is refused with a clear message', async () => {
  const os = require('os');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensord-ext-'));
  try {
    fs.copyFileSync(path.join(FIXTURES, 'external_data', 'model.onnx'), path.join(dir, 'model.onnx'));
    fs.symlinkSync('/etc/passwd', path.join(dir, 'weights.bin'));
    await rejectsWith(c.loadOnnx(path.join(dir, 'model.onnx')), 'INVALID_ARGUMENT',
                      /uses external data 'weights\.bin'.*self-contained ONNX files only/);
    fs.unlinkSync(path.join(dir, 'weights.bin'));
    fs.writeFileSync(path.join(dir, 'weights.bin'), Buffer.from(new Float32Array(12).buffer));
    await rejectsWith(c.loadOnnx(path.join(dir, 'model.onnx')), 'INVALID_ARGUMENT', /external data/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
