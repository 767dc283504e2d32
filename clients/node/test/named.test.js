'use strict';
// Named models (tensord serve --models DIR): a real broker loads a folder of real ONNX files
// (written by tests/rpc/make_named_models.py with /usr/bin/python3 + onnx) once; two clients
// open the same model by name and run it without sending it. Skips, saying why, when
// /usr/bin/python3 or its onnx/numpy are missing.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const td = require('..');
const { startBroker, rejectsWith, assertClose } = require('./helpers');

const MAKE = path.join(__dirname, '..', '..', '..', 'tests', 'rpc', 'make_named_models.py');

let dir = '';
let skip = '';
let broker;

/** A little-endian float32 .npy file -> {shape, data}. */
function readNpy(file) {
  const b = fs.readFileSync(file);
  const headerLen = b.readUInt16LE(8);
  const header = b.subarray(10, 10 + headerLen).toString('latin1');
  assert.match(header, /'descr': '<f4'/);
  const shape = /'shape': \(([^)]*)\)/.exec(header)[1].split(',').filter((s) => s.trim()).map(Number);
  const body = b.subarray(10 + headerLen);
  const data = new Float32Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.length));
  return { shape, data };
}

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensord-node-named-'));
  const r = spawnSync('/usr/bin/python3', [MAKE, path.join(dir, 'models'), '--small'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    skip = `cannot write the ONNX models (/usr/bin/python3 with onnx and numpy): ${r.error ? r.error.message : r.stderr}`;
    return;
  }
  broker = await startBroker(['--models', path.join(dir, 'models')]);
});

after(async () => {
  if (broker) await broker.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('two clients open the same named model and run it', async (t) => {
  if (skip) return t.skip(skip);
  const x = readNpy(path.join(dir, 'models', 'mlp', 'x.npy'));
  const y = readNpy(path.join(dir, 'models', 'mlp', 'y.npy'));
  const a = await td.connect(broker.address);
  const b = await td.connect(broker.address);
  try {
    for (const [who, c] of [['a', a], ['b', b]]) {
      const m = await c.openModel('mlp');
      assert.equal(m.named, true);
      assert.equal(m.name, 'mlp');
      assert.equal(m.device, 'cpu:0');
      assert.equal(m.weightBytes, (1024 * 256 + 256 * 4) * 4);
      assert.deepEqual(m.inputs, [{ name: 'X', dtype: 'float32', shape: [-1, 1024] }]);
      assert.equal(m.outputs[0].name, 'Y');
      const xs = await c.upload(x.data, x.shape);
      const [out] = await m.run({ X: xs });
      const got = await c.read(out);
      assert.deepEqual(got.shape, [2, 4], who);
      assertClose(got.data, y.data, 1e-4, 1e-5);
      await m.unload();  // this session's handle only
    }
    // The model stays for the other session after one unloaded its handle.
    const again = await a.openModel('mlp');
    const [out] = await again.run([await a.upload(x.data, x.shape)]);
    assertClose((await a.read(out)).data, y.data, 1e-4, 1e-5);
  } finally {
    await a.close();
    await b.close();
  }
});

test('listModels reports the broken model; unknown names are NOT_FOUND', async (t) => {
  if (skip) return t.skip(skip);
  const c = await td.connect(broker.address);
  try {
    const list = await c.listModels();
    assert.deepEqual(list.map((m) => [m.name, m.ready]), [['add', true], ['broken', false], ['mlp', true]]);
    assert.equal(list[0].device, 'cpu:1');
    assert.match(list[1].reason, /broken\/model\.onnx: not a valid ONNX model/);
    await rejectsWith(c.openModel('resnet50'), 'NOT_FOUND', /'resnet50'.*'add', 'broken', 'mlp'/);
    await rejectsWith(c.openModel('broken'), 'FAILED_PRECONDITION', /not a valid ONNX model/);
    const add = await c.openModel('add');
    const [y] = await add.run([await c.upload(new Float32Array([1, 1, 1, 1]), [4])]);
    assert.deepEqual(Array.from((await c.read(y)).data), [2, 3, 4, 5]);
  } finally {
    await c.close();
  }
});
