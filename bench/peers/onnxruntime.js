#!/usr/bin/env node
// The ONNX Runtime peer of `tensord bench --vs onnxruntime` (and bench/compare.py).
//
//   node bench/peers/onnxruntime.js --model FILE.onnx --input NAME=FILE.npy [...]
//        [--examples N] [--batch-size B] [--warmup W] [--threads T] [--outputs DIR]
//        [--start-at UNIX_SECONDS] [--profile PREFIX]
//
// Runs the model with onnxruntime-node (CPU execution provider, graph optimisation 'all',
// intraOpNumThreads = T, default: the machine's cores), plaidbench's way: W/B untimed batches,
// then N/B timed batches. compile_s = session creation + the first run; execution_s = the timed
// runs; per_example_s = execution_s / N. --profile PREFIX: ONNX Runtime's own per-node profile of
// every run (first, warmup and timed; its JSON file's path as "profile_file"; timings then
// include the profiler's cost). Prints ONE JSON line on stdout:
//   {"peer":"onnxruntime","version":"1.30.0","available":true,"threads":2,"compile_s":..,
//    "execution_s":..,"per_example_s":..,"examples":N,"batch_size":B,"warmup":W,
//    "outputs":{"NAME":"DIR/NAME.npy"}}
// When onnxruntime-node is not installed (no bench/node_modules): {"peer":"onnxruntime",
// "available":false,"reason":"..."} and exit 0. Bad usage or input (unknown flag, unreadable
// model or .npy, missing input): one line on stderr, exit 2; a failure while running: exit 1.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const {readNpy, writeNpy} = require('./npy');

const PEER = 'onnxruntime';

class UsageError extends Error {}

function usage(msg) {
  throw new UsageError(msg);
}

function parseCount(flag, value, min) {
  if (value === undefined) usage(`${flag} needs a value`);
  if (!/^\d+$/.test(value) || Number(value) < min) {
    usage(`${flag} must be an integer >= ${min}, got '${value}'`);
  }
  return Number(value);
}

function parseArgs(argv) {
  const opts = {inputs: [], examples: 1024, batchSize: 1, warmup: 32, threads: 0, outputs: ''};
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = argv[i + 1];
    switch (flag) {
      case '--model':
        if (value === undefined) usage('--model needs a value');
        opts.model = value;
        ++i;
        break;
      case '--input': {
        if (value === undefined) usage('--input needs NAME=FILE.npy');
        const eq = value.indexOf('=');
        if (eq <= 0) usage(`--input must be NAME=FILE.npy, got '${value}'`);
        opts.inputs.push({name: value.slice(0, eq), file: value.slice(eq + 1)});
        ++i;
        break;
      }
      case '--examples':
        opts.examples = parseCount(flag, value, 1);
        ++i;
        break;
      case '--batch-size':
        opts.batchSize = parseCount(flag, value, 1);
        ++i;
        break;
      case '--warmup':
        opts.warmup = parseCount(flag, value, 0);
        ++i;
        break;
      case '--threads':
        opts.threads = parseCount(flag, value, 0);
        ++i;
        break;
      case '--start-at':  // the timed run starts at this Unix time (s), after the warmup
        if (value === undefined || !Number.isFinite(Number(value))) {
          usage(`--start-at must be a Unix time in seconds, got '${value}'`);
        }
        opts.startAt = Number(value);
        ++i;
        break;
      case '--profile':
        if (value === undefined) usage('--profile needs a file prefix');
        opts.profile = value;
        ++i;
        break;
      case '--outputs':
        if (value === undefined) usage('--outputs needs a directory');
        opts.outputs = value;
        ++i;
        break;
      case '--network':  // accepted for symmetry with the torch peer; ONNX Runtime needs none
        if (value === undefined) usage('--network needs a value');
        ++i;
        break;
      case '-h':
      case '--help':
        process.stdout.write(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 19)
            .map((l) => l.replace(/^\/\/ ?/, '')).join('\n') + '\n');
        process.exit(0);
        break;
      default:
        usage(`unknown argument '${flag}'`);
    }
  }
  if (!opts.model) usage('--model FILE.onnx is required');
  if (opts.examples % opts.batchSize !== 0) {
    usage(`--examples ${opts.examples} is not divisible by --batch-size ${opts.batchSize}`);
  }
  if (opts.threads === 0) {
    opts.threads = typeof os.availableParallelism === 'function' ? os.availableParallelism()
                                                                  : os.cpus().length;
  }
  return opts;
}

function loadOrt() {
  try {
    const ort = require('onnxruntime-node');
    const version = require('onnxruntime-node/package.json').version;
    return {ort, version};
  } catch (e) {
    const top = path.normalize(path.join(__dirname, '..'));
    const where = path.join(top, 'node_modules');
    // In a checkout, bench/ has the package.json and lock file; an installed tree
    // (<prefix>/share/tensord/peers) has neither: install the package next to the peers.
    const install = fs.existsSync(path.join(top, 'package.json'))
        ? `run: cd ${top} && ONNXRUNTIME_NODE_INSTALL=skip npm ci`
        : `run: npm install --prefix ${top} onnxruntime-node, or set NODE_PATH to a ` +
          'node_modules folder that has it';
    const reason = fs.existsSync(path.join(where, 'onnxruntime-node'))
        ? `onnxruntime-node does not load: ${e.message.split('\n')[0]}`
        : `onnxruntime-node is not installed (no ${where}/onnxruntime-node; ${install})`;
    return {reason};
  }
}

// A file-name-safe form of an output name.
function safeName(name) {
  const s = name.replace(/[^A-Za-z0-9._-]/g, '_');
  return s.length > 0 && s !== '.' && s !== '..' ? s : 'output';
}

const seconds = (t0, t1) => Number(t1 - t0) / 1e9;

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const {ort, version, reason} = loadOrt();
  if (!ort) {
    console.log(JSON.stringify({peer: PEER, available: false, reason}));
    return;
  }

  let modelBytes;
  try {
    modelBytes = fs.readFileSync(opts.model);
  } catch (e) {
    usage(`cannot read model ${opts.model}: ${e.code || e.message}`);
  }
  const feeds = {};
  for (const {name, file} of opts.inputs) {
    if (name in feeds) usage(`input '${name}' given twice`);
    let a;
    try {
      a = readNpy(file);
    } catch (e) {
      usage(`--input ${name}: ${e.message}`);
    }
    feeds[name] = new ort.Tensor(a.type, a.data, a.dims);
  }
  if (opts.outputs) fs.mkdirSync(opts.outputs, {recursive: true});

  const options = {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: opts.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  };
  if (opts.profile) {
    options.enableProfiling = true;
    options.profileFilePrefix = opts.profile;
  }
  const t0 = process.hrtime.bigint();
  let session;
  try {
    session = await ort.InferenceSession.create(modelBytes, options);
  } catch (e) {
    usage(`cannot load model ${opts.model}: ${String(e.message).split('\n')[0]}`);
  }
  const missing = session.inputNames.filter((n) => !(n in feeds));
  const unknown = Object.keys(feeds).filter((n) => !session.inputNames.includes(n));
  if (unknown.length > 0) {
    usage(`the model has no input named '${unknown[0]}' ` +
          `(inputs: ${session.inputNames.join(', ')})`);
  }
  if (missing.length > 0) {
    usage(`no --input given for the model's input '${missing[0]}' ` +
          `(inputs: ${session.inputNames.join(', ')})`);
  }
  let first;
  try {
    first = await session.run(feeds);
  } catch (e) {
    usage(`cannot run model ${opts.model}: ${String(e.message).split('\n')[0]}`);
  }
  const t1 = process.hrtime.bigint();

  const warmupBatches = Math.floor(opts.warmup / opts.batchSize);
  for (let i = 0; i < warmupBatches; ++i) await session.run(feeds);
  const batches = opts.examples / opts.batchSize;
  if (opts.startAt && Date.now() / 1000 < opts.startAt) {
    await new Promise((resolve) => setTimeout(resolve, opts.startAt * 1000 - Date.now()));
  }
  const timedStart = Date.now() / 1000;
  const t2 = process.hrtime.bigint();
  for (let i = 0; i < batches; ++i) await session.run(feeds);
  const t3 = process.hrtime.bigint();
  const timedEnd = Date.now() / 1000;

  const result = {
    peer: PEER,
    version,
    available: true,
    threads: opts.threads,
    compile_s: seconds(t0, t1),
    execution_s: seconds(t2, t3),
    per_example_s: seconds(t2, t3) / opts.examples,
    timed_start_unix: timedStart,
    timed_end_unix: timedEnd,
    examples: opts.examples,
    batch_size: opts.batchSize,
    warmup: opts.warmup,
  };
  if (opts.outputs) {
    result.outputs = {};
    for (const name of session.outputNames) {
      const t = first[name];
      const file = path.join(opts.outputs, safeName(name) + '.npy');
      writeNpy(file, t.type, t.dims, t.data);
      result.outputs[name] = file;
    }
  }
  if (opts.profile) {
    // ONNX Runtime writes PREFIX_<date>.json; the newest such file is this session's.
    session.endProfiling();
    const dir = path.dirname(path.resolve(opts.profile));
    const base = path.basename(opts.profile) + '_';
    const files = fs.readdirSync(dir).filter((f) => f.startsWith(base) && f.endsWith('.json'))
        .map((f) => path.join(dir, f))
        .sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs);
    if (files.length > 0) result.profile_file = files[0];
  }
  if (typeof session.release === 'function') await session.release();
  console.log(JSON.stringify(result));
}

main().catch((e) => {
  if (e instanceof UsageError) {
    console.error(`onnxruntime peer: ${e.message}`);
    process.exit(2);
  }
  console.error(`onnxruntime peer: ${e && e.stack ? e.stack.split('\n')[0] : e}`);
  process.exit(1);
});
