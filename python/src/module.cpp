// tensord._tensord: the thin binding under the `tensord` Python package. It exposes the C++
// Client (tensord.Client), the lazy Array with the generic ONNX-op entry point the Python layer
// builds every function on, NumPy conversion, DLPack (dlpack.cpp) and ONNX models. The
// NumPy-like API itself (dtype promotion, indexing, reductions, nn) is in python/tensord/.
//
// Every call that may wait for the engine or the network releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "common.h"
#include "tensord/onnx.h"
#include "tensord/version.h"

namespace tensord::python {
namespace {

py::object error_classes;  // dict: status code name -> exception class (set by __init__.py)

void translate(const StatusError& e) {
  const char* name = status_code_name(e.status.code());
  PyObject* cls = PyExc_RuntimeError;
  if (error_classes && error_classes.contains(name)) cls = error_classes[name].ptr();
  py::object exc = py::reinterpret_borrow<py::object>(cls)(e.status.message(), name);
  PyErr_SetObject(cls, exc.ptr());
}

// ---- NumPy <-> tensors
DType dtype_of_array(const py::array& a) {
  py::dtype dt = a.dtype();
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'b') return DType::kBool;
  if (kind == 'f' && size == 2) return DType::kFloat16;
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 8) return DType::kFloat64;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'i' && size == 2) return DType::kInt16;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  if (kind == 'u' && size == 2) return DType::kUInt16;
  if (kind == 'u' && size == 4) return DType::kUInt32;
  if (kind == 'u' && size == 8) return DType::kUInt64;
  throw StatusError(Status(StatusCode::kInvalidArgument,
                           "asarray: NumPy dtype '" + std::string(py::str(dt)) +
                               "' has no tensord dtype"));
}

py::dtype numpy_dtype(DType t) {
  if (t == DType::kBFloat16)
    throw StatusError(Status(StatusCode::kUnimplemented,
                             "numpy(): NumPy has no bfloat16; cast the array first"));
  return py::dtype(dtype_name(t));
}

// A C-contiguous NumPy array -> an Array on `device`: one copy (upload); one-element arrays
// are embedded in the graphs that use them (no round trip).
Array from_numpy(const PyClient& c, py::array a, const std::string& device) {
  a = py::array::ensure(a, py::array::c_style);
  if (!a) throw py::error_already_set();
  const DType dtype = dtype_of_array(a);
  Shape shape(a.shape(), a.shape() + a.ndim());
  if (a.size() <= 1) {
    HostTensor t = value_or_throw(HostTensor::from_bytes(
        dtype, shape, a.data(), static_cast<size_t>(a.nbytes())));
    Array r = Array::from_host(t, device, c.ctx);
    check(r.status());
    return r;
  }
  const std::string dev = device.empty() ? c.client().default_device() : device;
  TensorView view{dtype, shape, a.data()};
  Result<TensorHandle> h = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    h = c.client().upload(view, dev);
  }
  check(h.status());
  return Array::from_handle(c.ctx, *h, TensorType{dtype, shape}, dev);
}

// Values this large are read into Client::allocate_host() memory (see to_numpy).
constexpr int64_t kHostBufferMinBytes = 1 << 20;

// Array -> a new NumPy array: the value's bytes go straight into the array's memory
// (Client::read_into: one copy, from the engine's memory or off the wire / out of the broker's
// shared-memory region; no intermediate HostTensor). A data-dependent shape is learned first
// (that evaluates the value).
py::array to_numpy(const Array& a) {
  check(a.status());
  Result<Shape> shape = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    shape = a.shape();
  }
  Shape s = value_or_throw(std::move(shape));
  (void)value_or_throw(checked_byte_size(a.dtype(), s));  // a size no host could hold
  py::dtype dt = numpy_dtype(a.dtype());
  const std::vector<py::ssize_t> dims(s.begin(), s.end());
  // Large values land in memory from Client::allocate_host() and NumPy gets that memory (the
  // array's base owns it): on a same-host broker it is a region the broker writes into
  // itself, one copy as an upload; embedded it is a recycled, already-mapped block instead of
  // fresh pages faulted in under the copy. Small ones go into an ordinary NumPy array.
  std::shared_ptr<Context> ctx = a.context();
  const int64_t bytes = value_or_throw(checked_byte_size(a.dtype(), s));
  py::object out;  // a py::array() would be an empty float64 array, not nothing
  if (ctx && bytes >= kHostBufferMinBytes) {
    Result<HostTensor> buf = Status(StatusCode::kUnknown, "");
    {
      py::gil_scoped_release release;
      buf = ctx->client().allocate_host(a.dtype(), s);
    }
    if (buf.ok() && buf->nbytes() == static_cast<size_t>(bytes)) {
      auto* owner = new HostTensor(std::move(*buf));
      py::capsule base(owner, [](void* p) { delete static_cast<HostTensor*>(p); });
      out = py::array(dt, dims, std::vector<py::ssize_t>{}, owner->mutable_data(), base);
    }
  }
  py::array arr = out ? py::reinterpret_steal<py::array>(out.release()) : py::array(dt, dims);
  void* dst = arr.nbytes() ? arr.mutable_data() : nullptr;
  const size_t room = static_cast<size_t>(arr.nbytes());
  Result<TensorType> t = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    t = a.read_into(dst, room);
  }
  TensorType type = value_or_throw(std::move(t));
  if (type.dtype == a.dtype() && type.shape == s) return arr;
  // The value is not what its Array said (should not happen): read it as it is.
  Result<HostTensor> r = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    r = a.to_host();
  }
  HostTensor h = value_or_throw(std::move(r));
  py::array exact(numpy_dtype(h.dtype()),
                  std::vector<py::ssize_t>(h.shape().begin(), h.shape().end()));
  if (h.nbytes()) std::memcpy(exact.mutable_data(), h.data(), h.nbytes());
  return exact;
}

// ---- ONNX attributes from Python values
Attribute to_attribute(const std::string& key, py::handle v) {
  if (py::isinstance<py::bool_>(v)) return Attribute(int64_t{v.cast<bool>()});
  if (py::isinstance<py::int_>(v)) return Attribute(v.cast<int64_t>());
  if (py::isinstance<py::float_>(v)) return Attribute(v.cast<double>());
  if (py::isinstance<py::str>(v)) return Attribute(v.cast<std::string>());
  if (py::isinstance<py::array>(v)) {
    py::array a = py::array::ensure(v, py::array::c_style);
    Shape shape(a.shape(), a.shape() + a.ndim());
    return Attribute(value_or_throw(HostTensor::from_bytes(
        dtype_of_array(a), shape, a.data(), static_cast<size_t>(a.nbytes()))));
  }
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(v);
    bool all_int = true, all_str = seq.size() > 0;
    for (py::handle x : seq) {
      all_int &= py::isinstance<py::int_>(x) || py::isinstance<py::bool_>(x);
      all_str &= py::isinstance<py::str>(x);
    }
    if (all_str) return Attribute(seq.cast<std::vector<std::string>>());
    if (all_int) return Attribute(seq.cast<std::vector<int64_t>>());
    return Attribute(seq.cast<std::vector<float>>());
  }
  throw StatusError(Status(StatusCode::kInvalidArgument,
                           "attribute '" + key + "': unsupported Python type " +
                               std::string(py::str(v.get_type()))));
}

// Any ONNX op over Arrays (None = an omitted optional input). Errors found while recording
// (shapes, types, attributes) are raised here, at the call that made them.
std::vector<Array> op(const std::string& op_type, const std::vector<std::optional<Array>>& inputs,
                      const py::dict& attrs, int num_outputs) {
  std::vector<Array> in;
  for (const auto& a : inputs) in.push_back(a ? *a : Array());
  AttributeMap map;
  for (auto [k, v] : attrs) {
    std::string key = k.cast<std::string>();
    map[key] = to_attribute(key, v);
  }
  std::vector<Array> out = Array::op(op_type, in, std::move(map), num_outputs);
  for (const Array& a : out) check(a.status());
  return out;
}

// ---- models
struct PyModel {
  std::shared_ptr<Context> ctx;
  ModelHandle handle = 0;
  std::string device;
  std::vector<ValueInfo> inputs, outputs;
  ~PyModel() {
    if (handle && ctx) {
      py::gil_scoped_release release;
      (void)ctx->client().unload(handle);
    }
  }
};

std::shared_ptr<PyModel> load_model(const PyClient& c, py::object source, const std::string& device) {
  Result<Graph> g = Status(StatusCode::kUnknown, "");
  if (py::isinstance<py::bytes>(source)) {
    std::string bytes = source.cast<std::string>();
    py::gil_scoped_release release;
    g = load_onnx_bytes(bytes, "<bytes>");
  } else {
    std::string path = py::str(source);  // str or os.PathLike via str()
    py::gil_scoped_release release;
    g = load_onnx_file(path);
  }
  Graph graph = value_or_throw(std::move(g));
  auto m = std::make_shared<PyModel>();
  m->ctx = c.ctx;
  m->device = device.empty() ? c.client().default_device() : device;
  m->inputs = graph.inputs;
  m->outputs = graph.outputs;
  Result<ModelHandle> h = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    h = c.client().load(graph, m->device);
  }
  m->handle = value_or_throw(std::move(h));
  return m;
}

// A named model of the broker (or of the embedded engine's models folder), opened in the
// client's session: nothing is loaded here.
std::shared_ptr<PyModel> open_named_model(const PyClient& c, const std::string& name) {
  ModelInfo info;
  Result<ModelHandle> h = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    h = c.client().open_model(name, &info);
  }
  const ModelHandle handle = value_or_throw(std::move(h));
  auto m = std::make_shared<PyModel>();
  m->ctx = c.ctx;
  m->handle = handle;
  m->device = info.device;
  m->inputs = info.inputs;
  m->outputs = info.outputs;
  return m;
}

py::list list_named_models(const PyClient& c) {
  Result<std::vector<ModelInfo>> models = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    models = c.client().list_models();
  }
  const auto values = [](const std::vector<ValueInfo>& list) {
    py::list r;
    for (const auto& v : list)
      r.append(py::make_tuple(v.name, std::string(dtype_name(v.type.dtype)), v.type.shape));
    return r;
  };
  py::list out;
  for (const ModelInfo& m : value_or_throw(std::move(models))) {
    py::dict d;
    d["name"] = m.name;
    d["ready"] = m.ready;
    d["reason"] = m.reason;
    d["device"] = m.device;
    d["inputs"] = values(m.inputs);
    d["outputs"] = values(m.outputs);
    d["weight_bytes"] = m.weight_bytes;
    d["opset"] = m.opset;
    d["ir_version"] = m.ir_version;
    d["producer"] = m.producer;
    out.append(d);
  }
  return out;
}

// `devices` non-empty: data parallel (Client::run_data_parallel), outputs on devices[0].
std::vector<Array> run_model(PyModel& m, const std::vector<Array>& inputs,
                             const std::vector<std::string>& devices) {
  if (inputs.size() != m.inputs.size())
    throw StatusError(Status(StatusCode::kInvalidArgument,
                             "model takes " + std::to_string(m.inputs.size()) + " inputs, got " +
                                 std::to_string(inputs.size())));
  std::vector<TensorHandle> handles;
  Result<std::vector<TensorHandle>> outs = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    Status s;
    for (size_t i = 0; i < inputs.size() && s.ok(); ++i) {
      if (inputs[i].context() != m.ctx) {
        s = Status(StatusCode::kInvalidArgument,
                   "model input '" + m.inputs[i].name + "' belongs to another client");
        break;
      }
      auto h = inputs[i].handle();
      if (!h.ok()) s = h.status().with_context("model input '" + m.inputs[i].name + "'");
      else handles.push_back(*h);
    }
    if (!s.ok()) outs = s;
    else if (devices.empty()) outs = m.ctx->client().run(m.handle, handles);
    else outs = m.ctx->client().run_data_parallel(m.handle, handles, devices);
  }
  std::vector<TensorHandle> hs = value_or_throw(std::move(outs));
  std::vector<Array> result;
  for (size_t i = 0; i < hs.size(); ++i) {
    TensorType type = i < m.outputs.size() && devices.empty() ? m.outputs[i].type : TensorType{};
    if (!type.defined()) {
      py::gil_scoped_release release;
      auto info = m.ctx->client().info(hs[i]);
      if (info.ok()) type = info->type;
    }
    result.push_back(
        Array::from_handle(m.ctx, hs[i], type, devices.empty() ? m.device : devices[0]));
  }
  return result;
}

py::dict device_dict(const DeviceInfo& d) {
  py::dict r;
  r["name"] = d.name;
  r["kind"] = d.kind;
  r["index"] = d.index;
  r["vendor"] = d.vendor;
  r["model"] = d.model;
  r["memory_bytes"] = d.memory_bytes;
  r["memory_in_use"] = d.memory_in_use;
  r["memory_peak"] = d.memory_peak;
  r["backend"] = d.backend;
  r["backend_version"] = d.backend_version;
  r["threads"] = d.threads;
  return r;
}

py::tuple shape_tuple(const Array& a) {
  check(a.status());
  Result<Shape> s = Status(StatusCode::kUnknown, "");
  {
    py::gil_scoped_release release;
    s = a.shape();
  }
  Shape shape = value_or_throw(std::move(s));
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t[i] = shape[i];
  return t;
}

}  // namespace
}  // namespace tensord::python

PYBIND11_MODULE(_tensord, m) {
  using namespace tensord;
  using namespace tensord::python;
  m.doc() = "tensord's C++ binding (use the `tensord` package)";
  m.attr("__version__") = kVersion;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      translate(e);
    }
  });
  m.def("_set_error_classes", [](py::dict d) { error_classes = d; });
  // Drop the classes before the interpreter tears down (py::object in a static).
  m.add_object("_cleanup", py::capsule([] { error_classes = py::object(); }));

  py::class_<PyClient, std::shared_ptr<PyClient>>(m, "Client")
      .def(py::init([](const std::string& address) {
             Result<std::unique_ptr<Client>> c = Status(StatusCode::kUnknown, "");
             {
               py::gil_scoped_release release;
               c = connect(address);
             }
             auto pc = std::make_shared<PyClient>();
             pc->ctx = std::make_shared<Context>(std::shared_ptr<Client>(value_or_throw(std::move(c))));
             pc->address = address;
             return pc;
           }),
           py::arg("address") = "")
      .def_static("local",
                  [](const std::string& devices, const std::string& default_device,
                     const std::string& models_dir) {
                    LocalClientOptions o{devices, default_device};
                    o.models_dir = models_dir;
                    Result<std::unique_ptr<Client>> c = Status(StatusCode::kUnknown, "");
                    {
                      py::gil_scoped_release release;
                      c = make_local_client(o);
                    }
                    auto pc = std::make_shared<PyClient>();
                    pc->ctx = std::make_shared<Context>(
                        std::shared_ptr<Client>(value_or_throw(std::move(c))));
                    return pc;
                  },
                  py::arg("devices") = "", py::arg("default_device") = "",
                  py::arg("models_dir") = "")
      .def_readonly("address", &PyClient::address)
      .def("devices",
           [](const PyClient& c) {
             Result<std::vector<DeviceInfo>> d = Status(StatusCode::kUnknown, "");
             {
               py::gil_scoped_release release;
               d = c.client().devices();
             }
             py::list out;
             for (const auto& x : value_or_throw(std::move(d))) out.append(device_dict(x));
             return out;
           })
      .def("default_device", [](const PyClient& c) { return c.client().default_device(); })
      .def("stats",
           [](const PyClient& c) {
             ClientStats s = c.client().stats();
             py::dict r;
             r["executes"] = s.executes;
             r["uploads"] = s.uploads;
             r["downloads"] = s.downloads;
             r["copies"] = s.copies;
             r["runs"] = s.runs;
             r["flushes"] = c.ctx->flushes();
             return r;
           })
      .def("from_numpy", &from_numpy, py::arg("array"), py::arg("device") = "")
      .def("constant",
           [](const PyClient& c, py::array a, const std::string& device) {
             a = py::array::ensure(a, py::array::c_style);
             Shape shape(a.shape(), a.shape() + a.ndim());
             HostTensor t = value_or_throw(HostTensor::from_bytes(
                 dtype_of_array(a), shape, a.data(), static_cast<size_t>(a.nbytes())));
             Array r = Array::constant(t, device, c.ctx);
             check(r.status());
             return r;
           },
           py::arg("array"), py::arg("device") = "")
      .def("full",
           [](const PyClient& c, const std::vector<int64_t>& shape, double value, int dtype,
              const std::string& device) {
             Array a = Array::full(shape, value, static_cast<DType>(dtype), device, c.ctx);
             check(a.status());
             return a;
           })
      .def("load", &load_model, py::arg("source"), py::arg("device") = "")
      .def("open_model", &open_named_model, py::arg("name"))
      .def("list_models", &list_named_models);

  py::class_<Array>(m, "Array")
      .def_property_readonly("dtype_code", [](const Array& a) { return static_cast<int>(a.dtype()); })
      .def_property_readonly("dtype_name", [](const Array& a) { return std::string(dtype_name(a.dtype())); })
      .def_property_readonly("device", &Array::device)
      .def_property_readonly("shape", &shape_tuple)
      .def_property_readonly("static_shape",
                             [](const Array& a) {  // -1 for dims not known without running
                               check(a.status());
                               auto s = a.impl() ? Result<Shape>(a.shape()) : Result<Shape>(Shape{});
                               return s.ok() ? *s : Shape{};
                             })
      .def("same_context", [](const Array& a, const PyClient& c) { return a.context() == c.ctx; })
      .def("numpy", &to_numpy)
      .def("eval",
           [](const Array& a) {
             Status s;
             {
               py::gil_scoped_release release;
               s = a.eval();
             }
             check(s);
           })
      .def("handle",
           [](const Array& a) {
             Result<TensorHandle> h = Status(StatusCode::kUnknown, "");
             {
               py::gil_scoped_release release;
               h = a.handle();
             }
             return value_or_throw(std::move(h));
           })
      .def("to",
           [](const Array& a, const std::string& device) {
             Array r;
             {
               py::gil_scoped_release release;
               r = a.to(device);
             }
             check(r.status());
             return r;
           });

  m.def("op", &op, py::arg("op_type"), py::arg("inputs"), py::arg("attrs") = py::dict(),
        py::arg("num_outputs") = 1);
  // Reverse-mode gradients of `loss` with respect to `wrt`, recorded lazily (tensord::grad).
  m.def(
      "grad",
      [](const Array& loss, const std::vector<Array>& wrt) {
        std::vector<Array> out;
        {
          py::gil_scoped_release release;
          out = grad(loss, wrt);
        }
        for (const Array& a : out) check(a.status());
        return out;
      },
      py::arg("loss"), py::arg("wrt"));
  // Computes several arrays in one flush (tensord::eval).
  m.def("eval_all", [](const std::vector<Array>& arrays) {
    Status s;
    {
      py::gil_scoped_release release;
      s = eval(arrays);
    }
    check(s);
  });

  py::class_<PyModel, std::shared_ptr<PyModel>>(m, "Model")
      .def_readonly("device", &PyModel::device)
      .def_property_readonly("input_names",
                             [](const PyModel& mo) {
                               std::vector<std::string> r;
                               for (const auto& v : mo.inputs) r.push_back(v.name);
                               return r;
                             })
      .def_property_readonly("output_names",
                             [](const PyModel& mo) {
                               std::vector<std::string> r;
                               for (const auto& v : mo.outputs) r.push_back(v.name);
                               return r;
                             })
      .def_property_readonly("input_types",
                             [](const PyModel& mo) {
                               py::list r;
                               for (const auto& v : mo.inputs)
                                 r.append(py::make_tuple(std::string(dtype_name(v.type.dtype)),
                                                         v.type.shape));
                               return r;
                             })
      .def_property_readonly(
          "output_types",
          [](const PyModel& mo) {
            py::list r;
            for (const auto& v : mo.outputs)
              r.append(py::make_tuple(std::string(dtype_name(v.type.dtype)), v.type.shape));
            return r;
          })
      .def("run", &run_model, py::arg("inputs"), py::arg("devices") = std::vector<std::string>{});

  register_dlpack(m);
}
