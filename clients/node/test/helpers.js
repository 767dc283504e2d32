'use strict';
// Starts real `tensord serve` processes for the tests (unix sockets in temp folders only).

const { spawn } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

/** The tensord binary: $TENSORD_BIN, else ../../build/tensord from clients/node. */
function tensordBin() {
  return path.resolve(process.env.TENSORD_BIN || path.join(__dirname, '..', '..', '..', 'build', 'tensord'));
}

function cleanEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('TENSORD_') || k === 'TENSORD_OPENCL') env[k] = v;
  env.TENSORD_CPU_DEVICES = '2';
  return env;
}

/**
 * Starts a broker and waits for its "tensord serving on ADDR" line.
 * @param {string[]} [flags]  extra `tensord serve` flags
 * @returns {Promise<{address: string, proc: import('child_process').ChildProcess,
 *                    stop: () => Promise<number|null>, kill: () => Promise<void>}>}
 */
function startBroker(flags = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tensord-node-'));
  const listen = `unix:${path.join(dir, 'broker.sock')}`;
  const proc = spawn(tensordBin(), ['serve', '--listen', listen, ...flags], {
    env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  const cleanup = () => fs.rmSync(dir, { recursive: true, force: true });
  const broker = {
    address: '',
    proc,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const code = await exited;
      cleanup();
      return code;
    },
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
      cleanup();
    },
  };
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`broker not ready after 20 s; stderr: ${stderr}`));
    }, 20000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = /tensord serving on (\S+)/.exec(out);
      if (m && !broker.address) {
        clearTimeout(timer);
        broker.address = m[1];
        resolve(broker);
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      if (!broker.address) reject(new Error(`broker exited with ${code} before serving; stderr: ${stderr}`));
    });
  });
}

/** Asserts that `promise` rejects with a TensordError of `code`; returns the error. */
async function rejectsWith(promise, code, messagePattern) {
  const assert = require('node:assert/strict');
  let err = null;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected a ${code} rejection, the call succeeded`);
  assert.equal(err.name, 'TensordError', `not a TensordError: ${err && err.stack}`);
  assert.equal(err.code, code, err.message);
  assert.ok(err.message.startsWith(`${code}: `), err.message);
  if (messagePattern) assert.match(err.message, messagePattern);
  return err;
}

/** Element-wise closeness, NumPy's allclose (rtol, atol). */
function assertClose(actual, expected, rtol = 1e-5, atol = 1e-6) {
  const assert = require('node:assert/strict');
  assert.equal(actual.length, expected.length, 'lengths differ');
  for (let i = 0; i < expected.length; ++i) {
    const a = Number(actual[i]);
    const e = Number(expected[i]);
    if (Number.isNaN(e) && Number.isNaN(a)) continue;
    assert.ok(Math.abs(a - e) <= atol + rtol * Math.abs(e),
              `element ${i}: ${a} != expected ${e} (rtol ${rtol}, atol ${atol})`);
  }
}

module.exports = { tensordBin, startBroker, rejectsWith, assertClose };
