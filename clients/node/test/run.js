'use strict';
// `npm test`: runs the node:test files against real `tensord serve` processes. Exits 77 (the
// CTest skip code) with a message when the tensord binary or the npm dependencies are missing.

const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const { tensordBin } = require('./helpers');

const bin = tensordBin();
if (!fs.existsSync(bin)) {
  console.log(`skip: no tensord binary at ${bin} (build it, or set TENSORD_BIN)`);
  process.exit(77);
}
for (const dep of ['@grpc/grpc-js', '@grpc/proto-loader', 'protobufjs']) {
  try {
    require.resolve(dep);
  } catch {
    console.log(`skip: npm dependency ${dep} is not installed (run \`npm ci\` in clients/node)`);
    process.exit(77);
  }
}
const files = ['client.test.js', 'onnx.test.js', 'faults.test.js', 'named.test.js'].map((f) => path.join(__dirname, f));
const r = spawnSync(process.execPath, ['--test', ...files], {
  stdio: 'inherit', env: { ...process.env, TENSORD_BIN: bin },
});
process.exit(r.status === null ? 1 : r.status);
