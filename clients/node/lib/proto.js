'use strict';
// Finds and loads proto/tensord.proto (the wire protocol, package tensord.v1).
//
// Where it is looked up, first found wins: the `protoPath` option, $TENSORD_PROTO, a copy
// bundled in this package (clients/node/proto/tensord.proto, made by `npm pack`), and the
// repository's proto/tensord.proto (../../proto from clients/node).

const fs = require('fs');
const path = require('path');

const CANDIDATES = [
  path.resolve(__dirname, '..', 'proto', 'tensord.proto'),
  path.resolve(__dirname, '..', '..', '..', 'proto', 'tensord.proto'),
];

const LOADER_OPTIONS = {
  keepCase: true, // field names as in the .proto (total_bytes, lease_ms)
  longs: String, // uint64 handles and session ids as decimal strings
  enums: Number,
  defaults: true,
  oneofs: true,
};

/** @param {string} [override] */
function findProto(override) {
  const tried = [];
  for (const p of [override, process.env.TENSORD_PROTO, ...CANDIDATES]) {
    if (!p) continue;
    tried.push(p);
    if (fs.existsSync(p)) return path.resolve(p);
  }
  const { TensordError } = require('./errors');
  throw new TensordError('NOT_FOUND', `tensord.proto not found (tried ${tried.join(', ')}); ` +
                         'pass {protoPath} to connect() or set TENSORD_PROTO', { local: true });
}

const cache = new Map();

/**
 * Loads the service (grpc-js) and the message types (protobufjs) from one proto file.
 * @param {string} [override]
 * @returns {{file: string, Tensord: any, root: any, methods: Set<string>}}
 */
function loadProto(override) {
  const file = findProto(override);
  if (cache.has(file)) return cache.get(file);
  const grpc = require('@grpc/grpc-js');
  const protoLoader = require('@grpc/proto-loader');
  const protobuf = require('protobufjs');
  const def = protoLoader.loadSync(file, LOADER_OPTIONS);
  const pkg = /** @type {any} */ (grpc.loadPackageDefinition(def));
  const Tensord = pkg.tensord && pkg.tensord.v1 && pkg.tensord.v1.Tensord;
  if (!Tensord) throw new Error(`${file} defines no service tensord.v1.Tensord`);
  const root = new protobuf.Root();
  root.loadSync(file, { keepCase: true });
  const entry = { file, Tensord, root, methods: new Set(Object.keys(Tensord.service)) };
  cache.set(file, entry);
  return entry;
}

module.exports = { loadProto, findProto, LOADER_OPTIONS };
