'use strict';
// Faults with real processes: no broker at the address, a broker killed under a connected
// client (every call then rejects with UNAVAILABLE instead of hanging), the session memory
// limit (RESOURCE_EXHAUSTED), a lapsed lease. The per-test timeouts only guard against hangs.

const { test } = require('node:test');
const assert = require('node:assert/strict');
const os = require('os');
const path = require('path');
const td = require('..');
const { startBroker, rejectsWith } = require('./helpers');

test('no broker at the address: UNAVAILABLE naming it', { timeout: 15000 }, async () => {
  const address = `unix:${path.join(os.tmpdir(), `tensord-node-nobody-${process.pid}.sock`)}`;
  const err = await rejectsWith(td.connect(address), 'UNAVAILABLE');
  assert.ok(err.message.includes(address), err.message);
  await rejectsWith(td.connect('127.0.0.1:1'), 'UNAVAILABLE', /127\.0\.0\.1:1/);
  await rejectsWith(td.connect(''), 'INVALID_ARGUMENT', /no broker address/);
});

test('broker killed: calls reject with UNAVAILABLE, close() does not hang', { timeout: 20000 }, async () => {
  const broker = await startBroker();
  const c = await td.connect(broker.address);
  const a = await c.upload(new Float32Array([1, 2, 3]));
  assert.deepEqual(Array.from((await c.read(a)).data), [1, 2, 3]);
  await broker.kill();  // SIGKILL: no goodbye
  await rejectsWith(c.read(a), 'UNAVAILABLE', /is unavailable/);
  await rejectsWith(c.upload(new Float32Array([4])), 'UNAVAILABLE');
  await rejectsWith(c.upload(new Float32Array(1 << 20)), 'UNAVAILABLE');  // streamed
  await rejectsWith(c.add(a, a), 'UNAVAILABLE');
  await rejectsWith(c.devices(), 'UNAVAILABLE');
  await rejectsWith(c.loadOnnx(path.join(__dirname, 'fixtures', 'mlp', 'model.onnx')), 'UNAVAILABLE');
  await c.close();
});

test('session memory limit: RESOURCE_EXHAUSTED, the session keeps working', { timeout: 20000 }, async () => {
  const broker = await startBroker(['--session-memory-limit', '4096']);
  try {
    const c = await td.connect(broker.address);
    assert.equal(c.memoryLimit, 4096);
    const a = await c.upload(new Float32Array(512));  // 2048 bytes
    await rejectsWith(c.upload(new Float32Array(1024)), 'RESOURCE_EXHAUSTED', /memory limit/);
    await a.release();
    const b = await c.upload(new Float32Array(1024));  // fits now
    assert.equal((await b.read()).data.length, 1024);
    // A client may ask for less than the broker's limit, not more.
    const small = await td.connect(broker.address, { memoryLimit: 100 });
    assert.equal(small.memoryLimit, 100);
    await rejectsWith(small.upload(new Float32Array(26)), 'RESOURCE_EXHAUSTED');
    await small.close();
    await c.close();
  } finally {
    assert.equal(await broker.stop(), 0);
  }
});

test('tokens: a trailing newline is trimmed, a control character is INVALID_ARGUMENT, another tenant\'s session is NOT_FOUND', { timeout: 20000 }, async () => {
  const fs = require('fs');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensord-node-tok-'));
  const file = path.join(dir, 'tokens');
  fs.writeFileSync(file, 'alice:alice-secret\nbob:bob-secret\n', { mode: 0o600 });
  const broker = await startBroker(['--token-file', file]);
  try {
    await rejectsWith(td.connect(broker.address), 'UNAUTHENTICATED', /TENSORD_TOKEN/);
    const alice = await td.connect(broker.address, { token: 'alice-secret\n' });
    const a = await alice.upload(new Float32Array([7, 8]));
    const err = await rejectsWith(td.connect(broker.address, { token: 'alice\u0001secret' }),
                                  'INVALID_ARGUMENT', /printable ASCII/);
    assert.ok(err.local);
    // Bob, knowing alice's session id and handle, finds nothing.
    const bob = await td.connect(broker.address, { token: 'bob-secret' });
    bob._session = alice.session;
    await rejectsWith(bob.read(a.id), 'NOT_FOUND', /does not exist/);
    assert.deepEqual(Array.from((await alice.read(a)).data), [7, 8]);
    await bob.close();
    await alice.close();
  } finally {
    assert.equal(await broker.stop(), 0);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a lapsed lease: the session is gone (NOT_FOUND), heartbeats keep a live one', { timeout: 20000 }, async () => {
  const broker = await startBroker(['--lease-seconds', '1']);
  try {
    const live = await td.connect(broker.address);  // heartbeats every ~333 ms
    const h = await live.upload(new Float32Array([5]));
    const dead = await td.connect(broker.address);
    clearInterval(dead._heartbeat);  // this one stops beating
    const d = await dead.upload(new Float32Array([6]));
    await new Promise((r) => setTimeout(r, 2500));
    await rejectsWith(dead.read(d), 'NOT_FOUND', /session/);
    assert.deepEqual(Array.from((await live.read(h)).data), [5]);
    await dead.close();
    await live.close();
  } finally {
    assert.equal(await broker.stop(), 0);
  }
});

// Node clients attach their session by default (as the C++ client does): SIGKILL frees the
// session's bytes within a second or two, not after the lease (600 s here).
test('attach (default): a client process killed with SIGKILL has its memory freed at once', { timeout: 30000 }, async () => {
  const { spawn } = require('child_process');
  const broker = await startBroker(['--lease-seconds', '600']);  // only Attach can free it soon
  try {
    const c = await td.connect(broker.address);
    const inUse = async () => (await c.devices()).find((d) => d.name === 'cpu:0').memoryInUse;
    const baseline = await inUse();
    const child = spawn(process.execPath, ['-e', `
      const td = require(${JSON.stringify(path.join(__dirname, '..'))});
      td.connect(${JSON.stringify(broker.address)})
        .then((c) => c.upload(new Float32Array(1 << 18)))
        .then(() => console.log('uploaded'));
      setInterval(() => {}, 1000);  // stays up until killed`], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((resolve, reject) => {
      child.stdout.on('data', (d) => { if (String(d).includes('uploaded')) resolve(); });
      child.on('exit', (code) => reject(new Error(`client exited with ${code} before uploading`)));
    });
    assert.ok(await inUse() >= baseline + (1 << 20), 'the child\'s megabyte is held');
    const killed = Date.now();
    child.kill('SIGKILL');
    while (await inUse() !== baseline && Date.now() - killed < 10000) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const freedMs = Date.now() - killed;
    assert.equal(await inUse(), baseline, 'the killed client\'s session is freed');
    assert.ok(freedMs < 2000, `freed ${freedMs} ms after SIGKILL (the lease is 600 s)`);
    await c.close();
  } finally {
    assert.equal(await broker.stop(), 0);
  }
});

// The Attach call does not keep the event loop alive: a script that never calls close()
// exits on its own, and its session is freed when it does.
test('attach (default): a script that never closes its client still exits, and is freed', { timeout: 30000 }, async () => {
  const { spawn } = require('child_process');
  const broker = await startBroker(['--lease-seconds', '600']);
  try {
    const c = await td.connect(broker.address);
    const inUse = async () => (await c.devices()).find((d) => d.name === 'cpu:0').memoryInUse;
    const baseline = await inUse();
    const child = spawn(process.execPath, ['-e', `
      const td = require(${JSON.stringify(path.join(__dirname, '..'))});
      td.connect(${JSON.stringify(broker.address)})
        .then((c) => c.upload(new Float32Array(1 << 18)).then((h) => c.read(h)))
        .then((t) => console.log('read', t.data.length));`], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => { out += String(d); });
    const code = await new Promise((resolve) => {
      const timer = setTimeout(() => { child.kill('SIGKILL'); resolve('hung'); }, 15000);
      child.on('exit', (c) => { clearTimeout(timer); resolve(c); });
    });
    assert.equal(code, 0, 'the script exits by itself (the Attach call does not hold it)');
    assert.match(out, /read 262144/);  // the calls it made all ran before it exited
    const exited = Date.now();
    while (await inUse() !== baseline && Date.now() - exited < 10000) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(await inUse(), baseline, 'its session is freed when it exits');
    await c.close();
  } finally {
    assert.equal(await broker.stop(), 0);
  }
});
