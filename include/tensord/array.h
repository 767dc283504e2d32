// Array: the NumPy-like C++ API. Every call is recorded lazily into a pending graph and
// flushed as ONE graph when a value is needed (to_host(), eval(), to(), shape() of a
// data-dependent result), so a chain of a hundred element-wise ops costs one execute — one
// round trip to a remote broker — and the compiler sees the whole chain.
//
// Errors: a bad call (wrong shapes, bad axis, unknown op) does not throw. The resulting Array
// carries the error, every Array computed from it carries it too, and eval()/to_host() return
// it, naming the op. Errors found by the device at run time surface the same way.
//
// Threading: Arrays of one Context may be used from several threads; flushes are serialised
// per Context.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensord/client.h"
#include "tensord/graph.h"
#include "tensord/status.h"
#include "tensord/tensor.h"

namespace tensord {

namespace detail {
struct ArrayImpl;
}

// Binds Arrays to a Client and records their pending graph.
class Context {
 public:
  explicit Context(std::shared_ptr<Client> client);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // The process default: a client from connect() (TENSORD_ADDRESS, else embedded).
  static Result<std::shared_ptr<Context>> default_context();
  Client& client() { return *client_; }
  // Graphs flushed by this context so far.
  int64_t flushes() const;

  struct State;  // pending-graph bookkeeping (array.cpp)
  State& state() { return *state_; }

 private:
  std::shared_ptr<Client> client_;
  std::unique_ptr<State> state_;
};

struct ConvOptions {
  std::vector<int64_t> strides;    // default 1 per spatial axis
  std::vector<int64_t> pads;       // begin..., end...; default 0
  std::vector<int64_t> dilations;  // default 1
  int64_t group = 1;
};

struct PoolOptions {
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> strides;
  std::vector<int64_t> pads;
  bool ceil_mode = false;
  bool count_include_pad = false;  // AveragePool only
};

class Array {
 public:
  Array();  // empty: holds no value (valid() is false)
  Array(const Array& other);
  Array(Array&& other) noexcept;
  Array& operator=(const Array& other);
  Array& operator=(Array&& other) noexcept;
  ~Array();

  // ---- construction (device "" = the client's default device; ctx null = default context)
  static Array from_host(const HostTensor& value, const std::string& device = "",
                         std::shared_ptr<Context> ctx = nullptr);
  template <typename T>
  static Array from_vector(const std::vector<T>& values, Shape shape,
                           const std::string& device = "", std::shared_ptr<Context> ctx = nullptr) {
    if (static_cast<int64_t>(values.size()) != shape_numel(shape))
      return error_array(Status(StatusCode::kInvalidArgument,
                                "from_vector: " + std::to_string(values.size()) +
                                    " values do not fill shape " + shape_to_string(shape)));
    return from_host(HostTensor::from_vector(values, std::move(shape)), device, std::move(ctx));
  }
  static Array scalar(double value, DType dtype = DType::kFloat32, const std::string& device = "",
                      std::shared_ptr<Context> ctx = nullptr);
  static Array full(const Shape& shape, double value, DType dtype = DType::kFloat32,
                    const std::string& device = "", std::shared_ptr<Context> ctx = nullptr);
  static Array zeros(const Shape& shape, DType dtype = DType::kFloat32,
                     const std::string& device = "", std::shared_ptr<Context> ctx = nullptr);
  static Array ones(const Shape& shape, DType dtype = DType::kFloat32,
                    const std::string& device = "", std::shared_ptr<Context> ctx = nullptr);
  // An Array over a tensor the context's client already holds (a loaded model's outputs, a
  // zero-copy upload). The Array owns the handle from now on (releases it when it goes).
  static Array from_handle(std::shared_ptr<Context> ctx, TensorHandle handle,
                           const TensorType& type, const std::string& device);
  // A constant embedded in the graphs that use it, whatever its size (structural parameters:
  // shapes, axes, pads), so shape inference at record time sees its value; never uploaded on
  // its own unless handle() is asked for.
  static Array constant(const HostTensor& value, const std::string& device = "",
                        std::shared_ptr<Context> ctx = nullptr);
  // An Array that holds only an error.
  static Array error_array(Status status);

  // ---- any ONNX op (opset-17 form). The generic entry point every method below uses.
  static std::vector<Array> op(const std::string& op_type, const std::vector<Array>& inputs,
                               AttributeMap attrs = {}, int num_outputs = 1);

  // ---- metadata
  bool valid() const { return impl_ != nullptr; }
  // The error this Array carries from recording (not from running), OK otherwise.
  Status status() const;
  DType dtype() const;
  // Known without running unless the shape is data-dependent (then it evaluates).
  Result<Shape> shape() const;
  std::string device() const;

  // ---- values
  // Flushes the pending graph this Array depends on and waits for the value.
  Status eval() const;
  Result<HostTensor> to_host() const;
  // The value's bytes into the caller's memory `dst` when they fit in `room` bytes (nothing is
  // written otherwise); returns the value's type either way (Client::read_into: one copy, no
  // allocation: NumPy arrays, DLPack). An embedded constant is copied, never uploaded.
  Result<TensorType> read_into(void* dst, size_t room) const;
  template <typename T>
  Result<std::vector<T>> to_vector() const {
    TD_ASSIGN_OR_RETURN(HostTensor t, to_host());
    if (t.dtype() != dtype_v<T>)
      return Status(StatusCode::kInvalidArgument,
                    std::string("to_vector: array is ") + dtype_name(t.dtype()));
    return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
  }
  // The engine handle of this value (flushes it; a small embedded constant is uploaded first).
  // Owned by the Array: valid while it lives, never to be released by the caller.
  Result<TensorHandle> handle() const;
  // The context this Array belongs to (null for an error-only Array).
  std::shared_ptr<Context> context() const;
  // Explicit copy to another device (flushes this Array first).
  Array to(const std::string& device) const;

  // ---- element-wise (NumPy broadcasting)
  Array operator-() const;
  Array matmul(const Array& other) const;
  Array pow(const Array& exponent) const;
  Array equal(const Array& other) const;
  Array less(const Array& other) const;
  Array greater(const Array& other) const;
  Array abs() const;
  Array exp() const;
  Array log() const;
  Array sqrt() const;
  Array reciprocal() const;
  Array floor() const;
  Array ceil() const;
  Array relu() const;
  Array sigmoid() const;
  Array tanh() const;
  Array clip(double min_value, double max_value) const;
  Array softmax(int64_t axis = -1) const;
  Array cast(DType dtype) const;

  // ---- shape
  Array reshape(const Shape& shape) const;
  Array transpose(const std::vector<int64_t>& perm = {}) const;
  Array flatten(int64_t axis = 1) const;
  Array squeeze(const std::vector<int64_t>& axes = {}) const;
  Array unsqueeze(const std::vector<int64_t>& axes) const;
  Array slice(const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
              const std::vector<int64_t>& axes = {}, const std::vector<int64_t>& steps = {}) const;
  Array gather(const Array& indices, int64_t axis = 0) const;

  // ---- reductions (axes empty = all)
  Array sum(const std::vector<int64_t>& axes = {}, bool keepdims = false) const;
  Array mean(const std::vector<int64_t>& axes = {}, bool keepdims = false) const;
  Array max(const std::vector<int64_t>& axes = {}, bool keepdims = false) const;
  Array min(const std::vector<int64_t>& axes = {}, bool keepdims = false) const;
  Array argmax(int64_t axis = 0, bool keepdims = false) const;

  std::shared_ptr<detail::ArrayImpl> impl() const { return impl_; }
  explicit Array(std::shared_ptr<detail::ArrayImpl> impl);

 private:
  std::shared_ptr<detail::ArrayImpl> impl_;
};

Array operator+(const Array& a, const Array& b);
Array operator-(const Array& a, const Array& b);
Array operator*(const Array& a, const Array& b);
Array operator/(const Array& a, const Array& b);
// Scalars take the array's dtype.
Array operator+(const Array& a, double b);
Array operator-(const Array& a, double b);
Array operator*(const Array& a, double b);
Array operator/(const Array& a, double b);
Array operator+(double a, const Array& b);
Array operator-(double a, const Array& b);
Array operator*(double a, const Array& b);
Array operator/(double a, const Array& b);

Array matmul(const Array& a, const Array& b);
// Gemm: alpha * A' * B' + beta * C (C optional: pass an empty Array).
Array gemm(const Array& a, const Array& b, const Array& c, float alpha = 1.0f, float beta = 1.0f,
           bool trans_a = false, bool trans_b = false);
Array concat(const std::vector<Array>& arrays, int64_t axis);
Array where(const Array& condition, const Array& x, const Array& y);
// Conv (N-d, NCHW...; bias optional: pass an empty Array).
Array conv(const Array& x, const Array& w, const Array& bias, const ConvOptions& options = {});
Array max_pool(const Array& x, const PoolOptions& options);
Array avg_pool(const Array& x, const PoolOptions& options);
Array global_avg_pool(const Array& x);
Array batch_norm(const Array& x, const Array& scale, const Array& bias, const Array& mean,
                 const Array& var, float epsilon = 1e-5f);

// Reverse-mode gradients (tensord/autodiff.h) of `loss` (summed when not a scalar) with
// respect to each of `wrt`, recorded lazily like any other op: the backward nodes join the
// pending graph of `loss` and reuse its forward values, so evaluating the loss and the
// gradients together runs the forward pass once. `wrt` may be any Arrays `loss` was computed
// from (leaves or intermediate values); one it does not depend on gets zeros. An op on the
// path without a gradient rule makes every result an error naming it.
std::vector<Array> grad(const Array& loss, const std::vector<Array>& wrt);

// Computes every one of `arrays` (flushing their pending graphs on each device as ONE graph,
// where Array::eval() would flush one per array) and waits for them: a training step's new
// parameters, optimiser state and loss in one execute.
Status eval(const std::vector<Array>& arrays);

}  // namespace tensord
