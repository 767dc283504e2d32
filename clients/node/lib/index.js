'use strict';
/**
 * tensord: Node.js client for the tensord broker (`tensord serve`), over gRPC (tensord.v1).
 *
 *   const td = require('tensord');
 *   const c = await td.connect('unix:/run/tensord.sock');   // or 'HOST:PORT', or $TENSORD_ADDRESS
 *   const a = await c.upload(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
 *   const [y] = await c.execute(td.graph((x) => td.op('Relu', [x])), [a]);
 *   const { dtype, shape, data } = await c.read(y);
 *   await c.close();
 * @module tensord
 */

const { connect, Client, Tensor, PROTOCOL_VERSION } = require('./client');
const { TensordError } = require('./errors');
const { attr, input, constant, op, graph, Value } = require('./graph');
const { Model } = require('./model');
const { toNumbers, halfToFloat, floatToHalf } = require('./tensor');
const { DTYPES } = require('./dtypes');

module.exports = {
  connect,
  Client,
  Tensor,
  Model,
  TensordError,
  PROTOCOL_VERSION,
  // graph builder
  op,
  input,
  constant,
  graph,
  attr,
  Value,
  // helpers
  dtypes: Object.keys(DTYPES),
  toNumbers,
  halfToFloat,
  floatToHalf,
};
