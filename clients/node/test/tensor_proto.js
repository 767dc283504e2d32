'use strict';
// Test helper: reads the serialized onnx.TensorProto files of ONNX's backend-test layout
// (test_data_set_0/{input,output}_K.pb) into {name, dtype, shape, data}. The client itself has
// no ONNX code (the broker imports models); this reads only the few TensorProto fields those
// files use, with protobufjs.

const fs = require('fs');
const protobuf = require('protobufjs');
const { dtypeName, DTYPES } = require('../lib/dtypes');
const { fromWire, numel } = require('../lib/tensor');

const TensorProto = protobuf.Root.fromJSON({
  nested: {
    TensorProto: {
      fields: {
        dims: { rule: 'repeated', type: 'int64', id: 1 },
        data_type: { type: 'int32', id: 2 },
        float_data: { rule: 'repeated', type: 'float', id: 4 },
        int32_data: { rule: 'repeated', type: 'int32', id: 5 },
        int64_data: { rule: 'repeated', type: 'int64', id: 7 },
        name: { type: 'string', id: 8 },
        raw_data: { type: 'bytes', id: 9 },
        double_data: { rule: 'repeated', type: 'double', id: 10 },
        uint64_data: { rule: 'repeated', type: 'uint64', id: 11 },
      },
    },
  },
}).lookupType('TensorProto');

/**
 * @param {string} file  a .pb file holding one onnx.TensorProto
 * @returns {{name: string, dtype: string, shape: number[], data: any}}
 */
function readTensor(file) {
  const t = TensorProto.decode(fs.readFileSync(file));
  const dtype = dtypeName(t.data_type);
  const shape = t.dims.map((d) => Number(d.toString()));
  const n = numel(shape);
  if (t.raw_data && t.raw_data.length) {
    return { name: t.name, dtype, shape, data: fromWire(dtype, n, Buffer.from(t.raw_data)) };
  }
  const src = { float32: t.float_data, float64: t.double_data, int64: t.int64_data,
                uint64: t.uint64_data, uint32: t.uint64_data }[dtype] || t.int32_data;
  const out = new DTYPES[dtype].array(n);
  for (let i = 0; i < n; ++i) {
    const v = src[i];
    if (dtype === 'int64') out[i] = BigInt.asIntN(64, BigInt(v.toString()));
    else if (dtype === 'uint64') out[i] = BigInt.asUintN(64, BigInt(v.toString()));
    else if (dtype === 'bool') out[i] = v ? 1 : 0;
    else out[i] = typeof v === 'number' ? v : Number(v.toString());
  }
  return { name: t.name, dtype, shape, data: out };
}

module.exports = { readTensor };
