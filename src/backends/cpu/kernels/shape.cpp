// Reference kernels of the shape and data-movement ops. Inference has already validated the
// attributes and computed every output shape; kernels re-read the values that only they see
// (indices, axes known only at run time) and check them.
//
// Pure data movement works on element bytes (dispatch_by_size) and keeps float16/bfloat16 as
// they are (native_low_precision); ops that compute on values let the executor widen them.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "backends/cpu/dispatch.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"

namespace tensord::cpu {
namespace {

// Row-major strides (in elements) of a shape.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// Values of an integer tensor as int64.
std::vector<int64_t> read_ints(const TensorView& v) {
  std::vector<int64_t> out(static_cast<size_t>(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (v.dtype) {
      case DType::kInt32:
        out[i] = v.as<int32_t>()[i];
        break;
      case DType::kInt64:
        out[i] = v.as<int64_t>()[i];
        break;
      case DType::kInt16:
        out[i] = v.as<int16_t>()[i];
        break;
      case DType::kInt8:
        out[i] = v.as<int8_t>()[i];
        break;
      case DType::kUInt8:
        out[i] = v.as<uint8_t>()[i];
        break;
      case DType::kUInt16:
        out[i] = v.as<uint16_t>()[i];
        break;
      case DType::kUInt32:
        out[i] = v.as<uint32_t>()[i];
        break;
      case DType::kUInt64:
        out[i] = static_cast<int64_t>(v.as<uint64_t>()[i]);
        break;
      default:
        out[i] = 0;
        break;
    }
  }
  return out;
}

// Element i of a numeric tensor as double (indices and depth of OneHot may be floats).
double read_double(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kFloat32:
      return v.as<float>()[i];
    case DType::kFloat64:
      return v.as<double>()[i];
    case DType::kInt8:
      return v.as<int8_t>()[i];
    case DType::kUInt8:
      return v.as<uint8_t>()[i];
    case DType::kInt16:
      return v.as<int16_t>()[i];
    case DType::kUInt16:
      return v.as<uint16_t>()[i];
    case DType::kInt32:
      return v.as<int32_t>()[i];
    case DType::kUInt32:
      return v.as<uint32_t>()[i];
    case DType::kInt64:
      return static_cast<double>(v.as<int64_t>()[i]);
    case DType::kUInt64:
      return static_cast<double>(v.as<uint64_t>()[i]);
    case DType::kBool:
      return v.as<bool>()[i] ? 1 : 0;
    default:
      return 0;
  }
}

// Index i of an int32/int64 indices tensor.
int64_t read_index(const TensorView& v, int64_t i) {
  return v.dtype == DType::kInt32 ? v.as<int32_t>()[i] : v.as<int64_t>()[i];
}

// Normalises a data-dependent index into [0, size); error names it.
Result<int64_t> checked_index(const KernelContext& ctx, int64_t index, int64_t size, int64_t axis) {
  if (index < -size || index >= size)
    return ctx.error("index {} is out of range for axis {} of size {}", index, axis, size);
  return index < 0 ? index + size : index;
}

// dst[i] = src[offset + sum_d idx_d * strides[d]] over the row-major indices of `shape`.
// The one loop behind Transpose, Slice, Expand, DepthToSpace and SpaceToDepth. Dims of size 1
// are dropped and dims that stay adjacent merged; then an innermost run with stride 1 is a
// block copy, and otherwise the last two dims go in 16x16 tiles (a transpose such as NCHW to
// NHWC reads a cache line once, not once per element).
template <typename T>
void copy_strided(const T* src, T* dst, const Shape& shape, const std::vector<int64_t>& strides,
                  int64_t offset) {
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  Shape dims;
  std::vector<int64_t> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!dims.empty() && st.back() == strides[d] * shape[d]) {
      dims.back() *= shape[d];
      st.back() = strides[d];
    } else {
      dims.push_back(shape[d]);
      st.push_back(strides[d]);
    }
  }
  if (dims.empty()) {
    dst[0] = src[offset];
    return;
  }
  const size_t rank = dims.size();
  const int64_t cols = dims[rank - 1], sc = st[rank - 1];
  // A broadcast innermost axis (stride 0: Expand of [N,1] to [N,D]) is a fill, not tiles.
  const bool tiled = sc != 1 && sc != 0 && rank >= 2;
  const size_t outer_rank = tiled ? rank - 2 : rank - 1;
  const int64_t rows = tiled ? dims[rank - 2] : 1, sr = tiled ? st[rank - 2] : 0;
  const int64_t block = rows * cols;  // values written per outer index
  std::vector<int64_t> idx(outer_rank, 0);
  int64_t s = offset;
  for (int64_t o = 0; o < n / block; ++o) {
    const T* sp = src + s;
    T* dp = dst + o * block;
    if (!tiled) {
      if (sc == 1) {
        std::copy(sp, sp + cols, dp);
      } else if (sc == 0) {
        std::fill(dp, dp + cols, sp[0]);
      } else {
        for (int64_t c = 0; c < cols; ++c) dp[c] = sp[c * sc];
      }
    } else {
      constexpr int64_t kTile = 16;
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        const int64_t r1 = std::min(rows, r0 + kTile);
        for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
          const int64_t c1 = std::min(cols, c0 + kTile);
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) dp[r * cols + c] = sp[r * sr + c * sc];
        }
      }
    }
    for (size_t d = outer_rank; d-- > 0;) {
      if (++idx[d] < dims[d]) {
        s += st[d];
        break;
      }
      s -= st[d] * (dims[d] - 1);
      idx[d] = 0;
    }
  }
}

Status strided_copy_kernel(KernelContext& ctx, const std::vector<int64_t>& strides,
                           int64_t offset) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  return dispatch_by_size(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    copy_strided<T>(in.as<T>(), out.as<T>(), out.shape, strides, offset);
    return OkStatus();
  });
}

// strided_copy_kernel with the outermost output axis of more than one element split across the
// compute threads when the copy is large: the fast Transpose, Expand and Slice (Transpose is in
// every attention block, and on one thread it was up to 10% of a ConvNeXt's and a Swin's time;
// Expand 7% of a message-passing network's, Slice 3% of a Swin's).
Status strided_copy_fast(KernelContext& ctx, const std::vector<int64_t>& strides,
                         int64_t offset) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  const size_t rank = out.shape.size();
  size_t axis = 0;
  while (axis < rank && out.shape[axis] == 1) ++axis;
  constexpr int64_t kParallelMin = 1 << 15;
  if (axis == rank || out.numel() < kParallelMin || threads_available() < 2)
    return strided_copy_kernel(ctx, strides, offset);
  const int64_t n = out.shape[axis];
  const int64_t out_stride = shape_numel(out.shape) / product(out.shape, 0, axis + 1);
  return dispatch_by_size(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    ThreadPool::get().parallel_for(n, 1, [&](int64_t lo, int64_t hi) {
      Shape part = out.shape;
      part[axis] = hi - lo;
      copy_strided<T>(in.as<T>(), out.as<T>() + lo * out_stride, part, strides,
                      offset + lo * strides[axis]);
    });
    return OkStatus();
  });
}

using StridedCopy = Status (*)(KernelContext&, const std::vector<int64_t>&, int64_t);

// Identity, Reshape, Flatten, Squeeze, Unsqueeze: same bytes, new shape.
Status copy_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  if (out.numel() != in.numel())
    return ctx.make_error(StatusCode::kInternal,
                          fmt::format("output {} and input {} differ in size",
                                      shape_to_string(out.shape), shape_to_string(in.shape)));
  if (in.nbytes()) std::memcpy(out.data, in.data, static_cast<size_t>(in.nbytes()));
  return OkStatus();
}

// ---- Constant ----

Status constant_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  if (const Attribute* a = ctx.attr("value")) {
    const HostTensor& t = *a->get_if<HostTensor>();
    if (t.nbytes()) std::memcpy(out.data, t.data(), t.nbytes());
  } else if (ctx.has_attr("value_float")) {
    TD_ASSIGN_OR_RETURN(*out.as<float>(), ctx.attr_float("value_float", 0));
  } else if (ctx.has_attr("value_floats")) {
    TD_ASSIGN_OR_RETURN(auto v, ctx.attr_floats("value_floats"));
    std::copy(v.begin(), v.end(), out.as<float>());
  } else if (ctx.has_attr("value_int")) {
    TD_ASSIGN_OR_RETURN(*out.as<int64_t>(), ctx.attr_int("value_int", 0));
  } else {
    TD_ASSIGN_OR_RETURN(auto v, ctx.attr_ints("value_ints"));
    std::copy(v.begin(), v.end(), out.as<int64_t>());
  }
  return OkStatus();
}

// ---- Squeeze (checks axes known only at run time) ----

Status squeeze_kernel(KernelContext& ctx) {
  if (ctx.has_input(1)) {
    const Shape& in = ctx.input(0).shape;
    const int64_t rank = static_cast<int64_t>(in.size());
    for (int64_t a : read_ints(ctx.input(1))) {
      if (a < -rank || a >= rank) return ctx.error("axis {} is out of range for rank {}", a, rank);
      const int64_t d = in[static_cast<size_t>(a < 0 ? a + rank : a)];
      if (d != 1)
        return ctx.error("cannot squeeze axis {} of size {} (input shape {})", a, d,
                         shape_to_string(in));
    }
  }
  return copy_kernel(ctx);
}

// ---- Transpose ----

// The input's strides in the output's order, copied by `copy`.
Status transpose_with(KernelContext& ctx, StridedCopy copy) {
  const Shape& in = ctx.input(0).shape;
  const size_t rank = in.size();
  std::vector<int64_t> perm;
  if (ctx.has_attr("perm")) {
    TD_ASSIGN_OR_RETURN(perm, ctx.attr_ints("perm"));
  } else {
    for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  const auto in_strides = strides_of(in);
  std::vector<int64_t> strides(rank);
  for (size_t i = 0; i < rank; ++i) strides[i] = in_strides[static_cast<size_t>(perm[i])];
  return copy(ctx, strides, 0);
}
Status transpose_kernel(KernelContext& ctx) { return transpose_with(ctx, strided_copy_kernel); }
Status transpose_fast(KernelContext& ctx) { return transpose_with(ctx, strided_copy_fast); }

// ---- Concat, Split (byte copies of contiguous blocks) ----

// One side of a Concat or Split: `outer` rows of `block` bytes, `stride` bytes apart, starting
// at `data` (for the concatenated tensor, at the part's offset within its row).
struct BlockPart {
  char* dst;
  const char* src;
  int64_t block, dst_stride, src_stride;
};

// Copies rows [lo, hi) of every part.
void copy_block_rows(const std::vector<BlockPart>& parts, int64_t lo, int64_t hi) {
  for (int64_t o = lo; o < hi; ++o)
    for (const BlockPart& p : parts)
      std::memcpy(p.dst + o * p.dst_stride, p.src + o * p.src_stride,
                  static_cast<size_t>(p.block));
}

// The fast Concat and Split: the rows split across the compute threads when the copy is large
// enough for one thread's memcpy to be short of the memory's bandwidth (below a MiB it is not:
// attention's Q/K/V Split of 96 KiB took 4.5 us on one thread, 7 us on two); with few rows,
// each part's block is cut in pieces instead.
void copy_blocks(const std::vector<BlockPart>& parts, int64_t outer, bool parallel) {
  int64_t row_bytes = 0;
  for (const BlockPart& p : parts) row_bytes += p.block;
  constexpr int64_t kParallelBytes = 1 << 20;
  if (!parallel || outer * row_bytes < kParallelBytes || threads_available() < 2)
    return copy_block_rows(parts, 0, outer);
  const int64_t threads = threads_available();
  if (outer >= 2 * threads) {
    ThreadPool::get().parallel_for(outer, std::max<int64_t>(1, 8192 / std::max<int64_t>(row_bytes, 1)),
                                   [&](int64_t lo, int64_t hi) { copy_block_rows(parts, lo, hi); });
    return;
  }
  constexpr int64_t kPiece = 1 << 15;
  struct Piece {
    char* dst;
    const char* src;
    int64_t bytes;
  };
  std::vector<Piece> pieces;
  for (int64_t o = 0; o < outer; ++o)
    for (const BlockPart& p : parts)
      for (int64_t at = 0; at < p.block; at += kPiece)
        pieces.push_back({p.dst + o * p.dst_stride + at, p.src + o * p.src_stride + at,
                          std::min(kPiece, p.block - at)});
  ThreadPool::get().parallel_for(static_cast<int64_t>(pieces.size()), 1,
                                 [&](int64_t lo, int64_t hi) {
                                   for (int64_t i = lo; i < hi; ++i) {
                                     const Piece& q = pieces[static_cast<size_t>(i)];
                                     std::memcpy(q.dst, q.src, static_cast<size_t>(q.bytes));
                                   }
                                 });
}

Status concat_with(KernelContext& ctx, bool parallel) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  const int64_t rank = static_cast<int64_t>(out.shape.size());
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  const int64_t outer = product(out.shape, 0, a);
  const int64_t elem = static_cast<int64_t>(dtype_size(out.dtype));
  const int64_t out_block = product(out.shape, a, out.shape.size()) * elem;
  std::vector<BlockPart> parts;
  int64_t at = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const TensorView& in = ctx.input(i);
    const int64_t block = product(in.shape, a, in.shape.size()) * elem;
    if (block == 0) continue;
    parts.push_back({static_cast<char*>(out.data) + at, static_cast<const char*>(in.data), block,
                     out_block, block});
    at += block;
  }
  if (at != out_block)
    return ctx.error("the inputs' blocks on axis {} sum to {} bytes, but the output {} has {}",
                     axis, at, shape_to_string(out.shape), out_block);
  copy_blocks(parts, outer, parallel);
  return OkStatus();
}
Status concat_kernel(KernelContext& ctx) { return concat_with(ctx, false); }
Status concat_fast(KernelContext& ctx) { return concat_with(ctx, true); }

Status split_with(KernelContext& ctx, bool parallel) {
  const TensorView& in = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  const int64_t outer = product(in.shape, 0, a);
  const int64_t elem = static_cast<int64_t>(dtype_size(in.dtype));
  const int64_t in_block = product(in.shape, a, in.shape.size()) * elem;
  std::vector<BlockPart> parts;
  int64_t total = 0, at = 0;
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    TD_ASSIGN_OR_RETURN(MutableTensorView o, ctx.output(i));
    total += o.shape[a];
    const int64_t block = product(o.shape, a, o.shape.size()) * elem;
    if (block != 0)
      parts.push_back({static_cast<char*>(o.data), static_cast<const char*>(in.data) + at, block,
                       block, in_block});
    at += block;
  }
  if (total != in.shape[a])
    return ctx.error("the outputs' sizes on axis {} sum to {}, but the input {} has {}", axis,
                     total, shape_to_string(in.shape), in.shape[a]);
  copy_blocks(parts, outer, parallel);
  return OkStatus();
}
Status split_kernel(KernelContext& ctx) { return split_with(ctx, false); }
Status split_fast(KernelContext& ctx) { return split_with(ctx, true); }

// ---- Slice ----

Status slice_with(KernelContext& ctx, StridedCopy copy) {
  const Shape& in = ctx.input(0).shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  const auto starts = read_ints(ctx.input(1));
  const auto ends = read_ints(ctx.input(2));
  std::vector<int64_t> axes, steps;
  if (ctx.has_input(3)) {
    axes = read_ints(ctx.input(3));
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  steps = ctx.has_input(4) ? read_ints(ctx.input(4)) : std::vector<int64_t>(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return ctx.error("starts, ends, axes and steps must have the same length");
  const auto in_strides = strides_of(in);
  std::vector<int64_t> strides = in_strides;
  int64_t offset = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i];
    if (a < -rank || a >= rank) return ctx.error("axis {} is out of range for rank {}", a, rank);
    if (a < 0) a += rank;
    const size_t k = static_cast<size_t>(a);
    const int64_t dim = in[k], step = steps[i];
    if (step == 0) return ctx.error("steps contains 0");
    int64_t start = starts[i];
    if (start < 0) start += dim;
    start = step > 0 ? std::clamp<int64_t>(start, 0, dim)
                     : std::clamp<int64_t>(start, 0, std::max<int64_t>(dim - 1, 0));
    offset += start * in_strides[k];
    strides[k] = in_strides[k] * step;
  }
  return copy(ctx, strides, offset);
}
Status slice_kernel(KernelContext& ctx) { return slice_with(ctx, strided_copy_kernel); }
Status slice_fast(KernelContext& ctx) { return slice_with(ctx, strided_copy_fast); }

// ---- Gather, GatherElements, GatherND ----

// `parallel`: the row copies split across the compute threads when the output is large (the
// fast Gather: a graph network's messages, [E] rows of an [N,D] feature table, were 7% of its
// time on one thread).
Status gather_rows(KernelContext& ctx, bool parallel) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& data = ctx.input(0);
  const TensorView& idx = ctx.input(1);
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  const int64_t outer = product(data.shape, 0, a);
  const int64_t size = data.shape[a];
  const int64_t elem = static_cast<int64_t>(dtype_size(data.dtype));
  const int64_t inner = product(data.shape, a + 1, data.shape.size()) * elem;
  const int64_t n = idx.numel();
  std::vector<int64_t> index(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    TD_ASSIGN_OR_RETURN(index[static_cast<size_t>(j)],
                        checked_index(ctx, read_index(idx, j), size, axis));
  }
  const char* src = static_cast<const char*>(data.data);
  char* dst = static_cast<char*>(out.data);
  if (inner == 0) return OkStatus();
  auto copy_rows = [&](int64_t lo, int64_t hi) {  // output rows [lo, hi) of outer * n
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t o = r / n, j = r % n;
      std::memcpy(dst + r * inner, src + (o * size + index[static_cast<size_t>(j)]) * inner,
                  static_cast<size_t>(inner));
    }
  };
  const int64_t rows = outer * n;
  constexpr int64_t kParallelBytes = 1 << 17;
  if (parallel && rows > 1 && rows * inner >= kParallelBytes && threads_available() >= 2)
    ThreadPool::get().parallel_for(rows, std::max<int64_t>(1, 4096 / inner), copy_rows);
  else
    copy_rows(0, rows);
  return OkStatus();
}
Status gather_kernel(KernelContext& ctx) { return gather_rows(ctx, false); }
Status gather_fast(KernelContext& ctx) { return gather_rows(ctx, true); }

// Offsets into data of every element of indices (GatherElements / ScatterElements): the
// element's own coordinates, with the coordinate on `axis` replaced by its index value.
Result<std::vector<int64_t>> element_offsets(const KernelContext& ctx, const Shape& data,
                                             const TensorView& idx, int64_t axis) {
  const auto dst = strides_of(data);
  const int64_t n = idx.numel();
  std::vector<int64_t> offsets(static_cast<size_t>(n));
  std::vector<int64_t> coord(idx.shape.size(), 0);
  const size_t a = static_cast<size_t>(axis);
  for (int64_t i = 0; i < n; ++i) {
    TD_ASSIGN_OR_RETURN(int64_t v, checked_index(ctx, read_index(idx, i), data[a], axis));
    int64_t off = 0;
    for (size_t d = 0; d < coord.size(); ++d) off += (d == a ? v : coord[d]) * dst[d];
    offsets[static_cast<size_t>(i)] = off;
    for (size_t d = coord.size(); d-- > 0;) {
      if (++coord[d] < idx.shape[d]) break;
      coord[d] = 0;
    }
  }
  return offsets;
}

Status gather_elements_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& data = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  if (axis < 0) axis += static_cast<int64_t>(data.shape.size());
  TD_ASSIGN_OR_RETURN(auto offsets, element_offsets(ctx, data.shape, ctx.input(1), axis));
  return dispatch_by_size(data.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = data.as<T>();
    T* dst = out.as<T>();
    for (size_t i = 0; i < offsets.size(); ++i) dst[i] = src[offsets[i]];
    return OkStatus();
  });
}

// For GatherND / ScatterND: the element offset into data of each index tuple (the last dim of
// indices), within its batch; batch b starts at b * prod(data[batch_dims:]).
Result<std::vector<int64_t>> tuple_offsets(const KernelContext& ctx, const Shape& data,
                                           const TensorView& idx, int64_t batch_dims) {
  const size_t b = static_cast<size_t>(batch_dims);
  const int64_t k = idx.shape.back();
  const int64_t tuples = idx.numel() / std::max<int64_t>(k, 1);
  const int64_t per_batch = tuples / std::max<int64_t>(product(idx.shape, 0, b), 1);
  const int64_t batch_stride = product(data, b, data.size());
  const auto st = strides_of(data);
  std::vector<int64_t> offsets(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = per_batch > 0 ? (t / per_batch) * batch_stride : 0;
    for (int64_t j = 0; j < k; ++j) {
      const size_t d = b + static_cast<size_t>(j);
      TD_ASSIGN_OR_RETURN(int64_t v, checked_index(ctx, idx.as<int64_t>()[t * k + j], data[d],
                                                   static_cast<int64_t>(d)));
      off += v * st[d];
    }
    offsets[static_cast<size_t>(t)] = off;
  }
  return offsets;
}

Status gather_nd_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& data = ctx.input(0);
  const TensorView& idx = ctx.input(1);
  TD_ASSIGN_OR_RETURN(int64_t b, ctx.attr_int("batch_dims", 0));
  TD_ASSIGN_OR_RETURN(auto offsets, tuple_offsets(ctx, data.shape, idx, b));
  const int64_t elem = static_cast<int64_t>(dtype_size(data.dtype));
  const size_t k = static_cast<size_t>(idx.shape.back());
  const int64_t slice = product(data.shape, static_cast<size_t>(b) + k, data.shape.size()) * elem;
  if (slice == 0) return OkStatus();
  const char* src = static_cast<const char*>(data.data);
  char* dst = static_cast<char*>(out.data);
  for (int64_t off : offsets) {
    std::memcpy(dst, src + off * elem, static_cast<size_t>(slice));
    dst += slice;
  }
  return OkStatus();
}

// ---- ScatterElements, ScatterND ----

template <typename T>
void combine(T& dst, T v, const std::string& reduction) {
  if constexpr (std::is_same_v<T, bool>) {
    dst = v;  // inference rejects add/mul on bool
  } else if (reduction == "none") {
    dst = v;
  } else if (reduction == "max") {  // opset 18; NaN in either propagates, as std::fmax does not
    if (v > dst || v != v) dst = v;
  } else if (reduction == "min") {
    if (v < dst || v != v) dst = v;
  } else if constexpr (std::is_integral_v<T>) {  // wraps around, no signed overflow
    const uint64_t a = static_cast<uint64_t>(dst), b = static_cast<uint64_t>(v);
    dst = static_cast<T>(reduction == "add" ? a + b : a * b);
  } else {
    dst = reduction == "add" ? dst + v : dst * v;
  }
}

Status scatter_elements_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& data = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(std::string reduction, ctx.attr_string("reduction", "none"));
  if (axis < 0) axis += static_cast<int64_t>(data.shape.size());
  TD_ASSIGN_OR_RETURN(auto offsets, element_offsets(ctx, data.shape, ctx.input(1), axis));
  return dispatch_all(data.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T* dst = out.as<T>();
    std::copy(data.as<T>(), data.as<T>() + data.numel(), dst);
    const T* upd = ctx.input(2).as<T>();
    for (size_t i = 0; i < offsets.size(); ++i) combine<T>(dst[offsets[i]], upd[i], reduction);
    return OkStatus();
  });
}

// ScatterElements on float32 with reduction none or add, indices of data's shape on every
// axis but `axis` (message passing's scatter-add of edge messages): the reduction chosen once
// and each element's offset from its flat position, no per-element coordinate walk or string
// compare (the reference kernel's are 25x slower on a [2048, 64] scatter-add).
Status scatter_elements_accepts(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() != 3 || in[0].dtype != DType::kFloat32 || in[2].dtype != DType::kFloat32 ||
      (in[1].dtype != DType::kInt64 && in[1].dtype != DType::kInt32))
    return errors::Unimplemented("fast ScatterElements: float32 data, int32/int64 indices");
  std::string reduction = "none";
  if (auto it = node.attrs.find("reduction"); it != node.attrs.end())
    if (const auto* v = it->second.get_if<std::string>()) reduction = *v;
  if (reduction != "none" && reduction != "add")
    return errors::Unimplemented("fast ScatterElements: reduction '{}'", reduction);
  int64_t axis = 0;
  if (auto it = node.attrs.find("axis"); it != node.attrs.end())
    if (const auto* v = it->second.get_if<int64_t>()) axis = *v;
  const Shape& ds = in[0].shape;
  const Shape& is = in[1].shape;
  const int64_t rank = static_cast<int64_t>(ds.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || is.size() != ds.size() || in[2].shape != is)
    return errors::Unimplemented("fast ScatterElements: shapes");
  for (size_t k = 0; k < ds.size(); ++k)
    if (static_cast<int64_t>(k) != axis && is[k] != ds[k])
      return errors::Unimplemented("fast ScatterElements: indices narrower than data");
  return OkStatus();
}

Status scatter_elements_fast(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& data = ctx.input(0);
  const TensorView& idx = ctx.input(1);
  const float* upd = ctx.input(2).as<float>();
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", 0));
  TD_ASSIGN_OR_RETURN(std::string reduction, ctx.attr_string("reduction", "none"));
  const size_t rank = data.shape.size();
  if (axis < 0) axis += static_cast<int64_t>(rank);
  const size_t a = static_cast<size_t>(axis);
  float* dst = out.as<float>();
  const float* src = data.as<float>();
  const int64_t inner = product(data.shape, a + 1, rank);  // data's = the indices' (accepts)
  const int64_t n = idx.shape[a];
  const int64_t outer = product(idx.shape, 0, a);
  const int64_t size = data.shape[a];
  const bool add = reduction == "add";
  // Row o of the outer axes writes only its own slab of data (size * inner values): rows go
  // to the threads (MaxPool's gradient scatters [N*C, H*W] plane by plane), each copying its
  // slab and then scattering into it. An index out of range stops its row; the first one
  // found is the error.
  std::atomic<int64_t> bad_row{-1}, bad_index{0};
  auto rows = [&](auto* ix, int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      float* base = dst + o * size * inner;
      std::copy(src + o * size * inner, src + (o + 1) * size * inner, base);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t e0 = (o * n + i) * inner;
        for (int64_t j = 0; j < inner; ++j) {
          int64_t v = static_cast<int64_t>(ix[e0 + j]);
          if (v < -size || v >= size) {
            int64_t none = -1;
            if (bad_row.compare_exchange_strong(none, o)) bad_index = v;
            return;
          }
          if (v < 0) v += size;
          float& d = base[v * inner + j];
          d = add ? d + upd[e0 + j] : upd[e0 + j];
        }
      }
    }
  };
  auto run = [&](auto* ix) {
    constexpr int64_t kParallelValues = 1 << 15;
    if (outer > 1 && outer * (size + n) * inner >= kParallelValues && threads_available() >= 2)
      ThreadPool::get().parallel_for(outer, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, (size + n) * inner)),
                                     [&](int64_t lo, int64_t hi) { rows(ix, lo, hi); });
    else
      rows(ix, 0, outer);
  };
  if (idx.dtype == DType::kInt32)
    run(idx.as<int32_t>());
  else
    run(idx.as<int64_t>());
  if (bad_row.load() >= 0)
    return ctx.error("index {} is out of range for axis {} of size {}", bad_index.load(), axis, size);
  return OkStatus();
}

Status scatter_nd_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& data = ctx.input(0);
  const TensorView& idx = ctx.input(1);
  TD_ASSIGN_OR_RETURN(std::string reduction, ctx.attr_string("reduction", "none"));
  TD_ASSIGN_OR_RETURN(auto offsets, tuple_offsets(ctx, data.shape, idx, 0));
  const size_t k = static_cast<size_t>(idx.shape.back());
  const int64_t slice = product(data.shape, k, data.shape.size());
  if (static_cast<int64_t>(offsets.size()) * slice != ctx.input(2).numel())
    return ctx.error("updates {} do not match indices {} and data {}",
                     shape_to_string(ctx.input(2).shape), shape_to_string(idx.shape),
                     shape_to_string(data.shape));
  return dispatch_all(data.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T* dst = out.as<T>();
    std::copy(data.as<T>(), data.as<T>() + data.numel(), dst);
    const T* upd = ctx.input(2).as<T>();
    for (size_t t = 0; t < offsets.size(); ++t)
      for (int64_t j = 0; j < slice; ++j)
        combine<T>(dst[offsets[t] + j], upd[static_cast<int64_t>(t) * slice + j], reduction);
    return OkStatus();
  });
}

// ---- Shape, Size ----

Status shape_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const Shape& in = ctx.input(0).shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  TD_ASSIGN_OR_RETURN(int64_t start, ctx.attr_int("start", 0));
  if (start < 0) start += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  for (int64_t i = 0; i < out.numel(); ++i)
    out.as<int64_t>()[i] = in[static_cast<size_t>(start + i)];
  return OkStatus();
}

Status size_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  *out.as<int64_t>() = ctx.input(0).numel();
  return OkStatus();
}

// ---- Expand, Tile, Pad, ConstantOfShape ----

// The input's strides on the output's axes, 0 on a broadcast one, copied by `copy`.
Status expand_with(KernelContext& ctx, StridedCopy copy) {
  const Shape& in = ctx.input(0).shape;
  const Shape& out = ctx.output_type(0).shape;
  const auto in_strides = strides_of(in);
  std::vector<int64_t> strides(out.size(), 0);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) strides[lead + i] = in[i] == 1 ? 0 : in_strides[i];
  return copy(ctx, strides, 0);
}
Status expand_kernel(KernelContext& ctx) { return expand_with(ctx, strided_copy_kernel); }
Status expand_fast(KernelContext& ctx) { return expand_with(ctx, strided_copy_fast); }

Status tile_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  const auto in_strides = strides_of(in.shape);
  const size_t rank = out.shape.size();
  return dispatch_by_size(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = in.as<T>();
    T* dst = out.as<T>();
    std::vector<int64_t> coord(rank, 0);
    for (int64_t i = 0; i < out.numel(); ++i) {
      int64_t s = 0;
      for (size_t d = 0; d < rank; ++d) s += (coord[d] % in.shape[d]) * in_strides[d];
      dst[i] = src[s];
      for (size_t d = rank; d-- > 0;) {
        if (++coord[d] < out.shape[d]) break;
        coord[d] = 0;
      }
    }
    return OkStatus();
  });
}

// Maps output coordinate `o` of a padded axis to an input coordinate, or -1 for the constant.
// The axis keeps input elements [lo, hi) (negative pads crop) placed after `before` pads.
int64_t pad_source(int64_t o, int64_t before, int64_t lo, int64_t hi, const std::string& mode) {
  const int64_t i = o - before + lo;
  if (i >= lo && i < hi) return i;
  if (mode == "constant") return -1;
  if (mode == "edge") return i < lo ? lo : hi - 1;
  if (mode == "wrap") {  // opset 19: numpy's 'wrap', periodic over the kept elements
    const int64_t n = hi - lo;
    int64_t r = (i - lo) % n;
    if (r < 0) r += n;
    return lo + r;
  }
  // reflect (numpy's 'reflect': the edge element is not repeated), periodic for wide pads
  const int64_t n = hi - lo;
  if (n == 1) return lo;
  const int64_t period = 2 * (n - 1);
  int64_t r = (i - lo) % period;
  if (r < 0) r += period;
  return lo + (r < n ? r : period - r);
}

Status pad_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "constant"));
  const auto pads = read_ints(ctx.input(1));
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) {
    axes = read_ints(ctx.input(3));
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const size_t n = axes.size();
  std::vector<int64_t> before(static_cast<size_t>(rank), 0), lo(static_cast<size_t>(rank), 0),
      hi(in.shape.begin(), in.shape.end());
  for (size_t i = 0; i < n; ++i) {
    const size_t a = static_cast<size_t>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    const int64_t pb = pads[i], pe = pads[i + n];
    before[a] = std::max<int64_t>(pb, 0);
    lo[a] = std::max<int64_t>(-pb, 0);
    hi[a] = in.shape[a] - std::max<int64_t>(-pe, 0);
  }
  const auto in_strides = strides_of(in.shape);
  const bool has_value = ctx.has_input(2) && ctx.input(2).numel() > 0;
  return dispatch_by_size(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T value{};  // all-zero bits: 0 in every dtype
    if (has_value) value = ctx.input(2).as<T>()[0];
    const T* src = in.as<T>();
    T* dst = out.as<T>();
    std::vector<int64_t> coord(static_cast<size_t>(rank), 0);
    for (int64_t i = 0; i < out.numel(); ++i) {
      int64_t s = 0;
      bool inside = true;
      for (size_t d = 0; d < coord.size() && inside; ++d) {
        const int64_t k = pad_source(coord[d], before[d], lo[d], hi[d], mode);
        inside = k >= 0;
        s += k * in_strides[d];
      }
      dst[i] = inside ? src[s] : value;
      for (size_t d = coord.size(); d-- > 0;) {
        if (++coord[d] < out.shape[d]) break;
        coord[d] = 0;
      }
    }
    return OkStatus();
  });
}

// Pad in constant mode with no crop: the output filled with the value, then each innermost
// row of the input copied whole (the reference walks coordinates and compares the mode per
// element: Swin's window padding spent a quarter of its time there). Negative pads (crops)
// go to the reference kernel.
Status pad_fast_accepts(const Node& node, const std::vector<TensorType>&) {
  if (auto it = node.attrs.find("mode"); it != node.attrs.end()) {
    const auto* m = it->second.get_if<std::string>();
    if (!m || *m != "constant") return errors::Unimplemented("fast Pad: constant mode only");
  }
  return OkStatus();
}

Status pad_fast(KernelContext& ctx) {
  const TensorView& in = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  if (rank == 0 || in.numel() == 0) return pad_kernel(ctx);
  const auto pads = read_ints(ctx.input(1));
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) {
    axes = read_ints(ctx.input(3));
  } else {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  }
  const size_t n = axes.size();
  if (pads.size() != 2 * n) return pad_kernel(ctx);  // its error message
  std::vector<int64_t> before(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank || pads[i] < 0 || pads[i + n] < 0) return pad_kernel(ctx);
    before[static_cast<size_t>(a)] = pads[i];
  }
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const auto out_strides = strides_of(out.shape);
  const bool has_value = ctx.has_input(2) && ctx.input(2).numel() > 0;
  const size_t r = static_cast<size_t>(rank);
  return dispatch_by_size(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T value{};  // all-zero bits: 0 in every dtype
    if (has_value) value = ctx.input(2).as<T>()[0];
    const T* src = in.as<T>();
    T* dst = out.as<T>();
    std::fill(dst, dst + out.numel(), value);
    const int64_t row = in.shape[r - 1];
    const int64_t rows = in.numel() / row;
    std::vector<int64_t> coord(r - 1, 0);
    for (int64_t i = 0; i < rows; ++i) {
      int64_t off = before[r - 1];
      for (size_t d = 0; d + 1 < r; ++d) off += (coord[d] + before[d]) * out_strides[d];
      std::memcpy(dst + off, src + i * row, static_cast<size_t>(row) * sizeof(T));
      for (size_t d = coord.size(); d-- > 0;) {
        if (++coord[d] < in.shape[d]) break;
        coord[d] = 0;
      }
    }
    return OkStatus();
  });
}

Status constant_of_shape_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const Attribute* a = ctx.attr("value");
  const HostTensor* value = a ? a->get_if<HostTensor>() : nullptr;
  return dispatch_by_size(out.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T v{};  // float32 0 by default
    if (value) std::memcpy(&v, value->data(), sizeof(T));
    std::fill(out.as<T>(), out.as<T>() + out.numel(), v);
    return OkStatus();
  });
}

// ---- Range, OneHot, NonZero, Trilu, CumSum, TopK ----

Status range_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  return dispatch_numeric(out.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T start = ctx.input(0).as<T>()[0];
    const T delta = ctx.input(2).as<T>()[0];
    T* dst = out.as<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      if constexpr (std::is_floating_point_v<T>)
        dst[i] = static_cast<T>(static_cast<double>(start) + static_cast<double>(i) * delta);
      else  // exact: every value lies between start and limit, but i * delta alone may not
            // (start INT64_MIN, delta INT64_MAX): two's complement arithmetic, no signed overflow
        dst[i] = static_cast<T>(static_cast<int64_t>(
            static_cast<uint64_t>(static_cast<int64_t>(start)) +
            static_cast<uint64_t>(i) * static_cast<uint64_t>(static_cast<int64_t>(delta))));
    }
    return OkStatus();
  });
}

Status one_hot_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& idx = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", -1));
  const int64_t rank = static_cast<int64_t>(out.shape.size());
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  const int64_t depth = out.shape[a];
  const int64_t outer = product(out.shape, 0, a);
  const int64_t inner = product(out.shape, a + 1, out.shape.size());
  return dispatch_all(out.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T off = ctx.input(2).as<T>()[0];
    const T on = ctx.input(2).as<T>()[1];
    T* dst = out.as<T>();
    std::fill(dst, dst + out.numel(), off);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < inner; ++j) {
        const double v = read_double(idx, o * inner + j);
        if (!std::isfinite(v)) continue;
        int64_t k = static_cast<int64_t>(std::clamp(v, -2.0 * depth, 2.0 * depth));
        if (k < 0) k += depth;
        if (k >= 0 && k < depth) dst[(o * depth + k) * inner + j] = on;
      }
    }
    return OkStatus();
  });
}

Status non_zero_kernel(KernelContext& ctx) {
  const TensorView& in = ctx.input(0);
  const Shape shape = in.shape.empty() ? Shape{1} : in.shape;
  const auto st = strides_of(shape);
  return dispatch_all(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = in.as<T>();
    std::vector<int64_t> hits;
    for (int64_t i = 0; i < in.numel(); ++i)
      if (src[i] != T(0)) hits.push_back(i);
    const int64_t n = static_cast<int64_t>(hits.size());
    TD_ASSIGN_OR_RETURN(
        MutableTensorView out,
        ctx.allocate_output(0, DType::kInt64, {static_cast<int64_t>(shape.size()), n}));
    int64_t* dst = out.as<int64_t>();
    for (size_t d = 0; d < shape.size(); ++d)
      for (int64_t j = 0; j < n; ++j)
        dst[static_cast<int64_t>(d) * n + j] = (hits[static_cast<size_t>(j)] / st[d]) % shape[d];
    return OkStatus();
  });
}

Status trilu_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  TD_ASSIGN_OR_RETURN(int64_t upper, ctx.attr_int("upper", 1));
  int64_t k = 0;
  if (ctx.has_input(1)) {
    if (ctx.input(1).numel() != 1) return ctx.error("k must hold one value");
    k = ctx.input(1).as<int64_t>()[0];
  }
  const size_t r = in.shape.size();
  const int64_t rows = in.shape[r - 2], cols = in.shape[r - 1];
  const int64_t mats = product(in.shape, 0, r - 2);
  return dispatch_by_size(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = in.as<T>();
    T* dst = out.as<T>();
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t p = (m * rows + i) * cols + j;
          const bool keep = upper ? (j - i >= k) : (j - i <= k);
          dst[p] = keep ? src[p] : T{};
        }
    return OkStatus();
  });
}

// Accumulator of sums: double for floats, wrapping 64-bit unsigned arithmetic for integers
// (two's complement wrap-around, no signed overflow).
template <typename T>
using SumAcc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

Status cum_sum_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& in = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  if (ctx.input(1).numel() != 1) return ctx.error("axis must hold one value");
  const int64_t axis_v = read_index(ctx.input(1), 0);
  if (axis_v < -rank || axis_v >= rank)
    return ctx.error("axis {} is out of range for rank {}", axis_v, rank);
  const size_t a = static_cast<size_t>(axis_v < 0 ? axis_v + rank : axis_v);
  TD_ASSIGN_OR_RETURN(int64_t exclusive, ctx.attr_int("exclusive", 0));
  TD_ASSIGN_OR_RETURN(int64_t reverse, ctx.attr_int("reverse", 0));
  const int64_t outer = product(in.shape, 0, a), n = in.shape[a];
  const int64_t inner = product(in.shape, a + 1, in.shape.size());
  return dispatch_numeric(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = in.as<T>();
    T* dst = out.as<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        SumAcc<T> acc = 0;
        for (int64_t t = 0; t < n; ++t) {
          const int64_t k = reverse ? n - 1 - t : t;
          const int64_t p = (o * n + k) * inner + j;
          if (exclusive) dst[p] = static_cast<T>(acc);
          acc += static_cast<SumAcc<T>>(src[p]);
          if (!exclusive) dst[p] = static_cast<T>(acc);
        }
      }
    return OkStatus();
  });
}

Status top_k_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView values, ctx.output(0));
  TD_ASSIGN_OR_RETURN(MutableTensorView indices, ctx.output(1));
  const TensorView& in = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  TD_ASSIGN_OR_RETURN(int64_t axis, ctx.attr_int("axis", -1));
  TD_ASSIGN_OR_RETURN(int64_t largest, ctx.attr_int("largest", 1));
  if (axis < 0) axis += rank;
  const size_t a = static_cast<size_t>(axis);
  const int64_t outer = product(in.shape, 0, a), n = in.shape[a];
  const int64_t inner = product(in.shape, a + 1, in.shape.size());
  const int64_t k = values.shape[a];
  return dispatch_numeric(in.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* src = in.as<T>();
    // NaN ranks above every number, so the order is strict and weak.
    auto greater = [](T x, T y) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x)) return !std::isnan(y);
        if (std::isnan(y)) return false;
      }
      return x > y;
    };
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        auto at = [&](int64_t t) { return src[(o * n + t) * inner + j]; };
        std::iota(order.begin(), order.end(), 0);
        // Stable: equal values keep the lower index first.
        std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
          return largest ? greater(at(x), at(y)) : greater(at(y), at(x));
        });
        for (int64_t t = 0; t < k; ++t) {
          const int64_t p = (o * k + t) * inner + j;
          values.as<T>()[p] = at(order[static_cast<size_t>(t)]);
          indices.as<int64_t>()[p] = order[static_cast<size_t>(t)];
        }
      }
    return OkStatus();
  });
}

// ---- DepthToSpace, SpaceToDepth, EyeLike ----

Status depth_to_space_kernel(KernelContext& ctx) {
  const Shape& in = ctx.input(0).shape;
  TD_ASSIGN_OR_RETURN(int64_t b, ctx.attr_int("blocksize", 1));
  TD_ASSIGN_OR_RETURN(std::string mode, ctx.attr_string("mode", "DCR"));
  const int64_t c = in[1] / (b * b), h = in[2], w = in[3];
  // Output [N, C/b², H*b, W*b] read as [N, C', H, b, W, b].
  const Shape view{in[0], c, h, b, w, b};
  std::vector<int64_t> strides;
  if (mode == "DCR")  // input [N, b, b, C', H, W]
    strides = {in[1] * h * w, h * w, w, b * c * h * w, 1, c * h * w};
  else  // CRD: input [N, C', b, b, H, W]
    strides = {in[1] * h * w, b * b * h * w, w, b * h * w, 1, h * w};
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  MutableTensorView out_view = out;
  out_view.shape = view;
  const TensorView& src = ctx.input(0);
  return dispatch_by_size(src.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    copy_strided<T>(src.as<T>(), out_view.as<T>(), view, strides, 0);
    return OkStatus();
  });
}

Status space_to_depth_kernel(KernelContext& ctx) {
  const Shape& in = ctx.input(0).shape;
  TD_ASSIGN_OR_RETURN(int64_t b, ctx.attr_int("blocksize", 1));
  const int64_t c = in[1], h = in[2], w = in[3];
  // Output [N, C*b*b, H/b, W/b] read as [N, b, b, C, H/b, W/b].
  const Shape view{in[0], b, b, c, h / b, w / b};
  const std::vector<int64_t> strides{c * h * w, w, 1, h * w, b * w, b};
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  const TensorView& src = ctx.input(0);
  return dispatch_by_size(src.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    copy_strided<T>(src.as<T>(), out.as<T>(), view, strides, 0);
    return OkStatus();
  });
}

Status eye_like_kernel(KernelContext& ctx) {
  TD_ASSIGN_OR_RETURN(MutableTensorView out, ctx.output(0));
  TD_ASSIGN_OR_RETURN(int64_t k, ctx.attr_int("k", 0));
  const int64_t rows = out.shape[0], cols = out.shape[1];
  return dispatch_all(out.dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    T* dst = out.as<T>();
    std::fill(dst, dst + out.numel(), T(0));
    for (int64_t i = 0; i < rows; ++i) {
      if (k > cols || k < -rows) break;  // the diagonal misses the matrix (no overflow below)
      const int64_t j = i + k;
      if (j >= 0 && j < cols) dst[i * cols + j] = T(1);
    }
    return OkStatus();
  });
}

}  // namespace

void register_reference_shape_kernels(KernelRegistry& r) {
  auto move = [&](const char* op, KernelFn fn) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn), /*native_low_precision=*/true});
  };
  auto compute = [&](const char* op, KernelFn fn) {
    r.add(KernelDef{op, "reference", nullptr, std::move(fn), /*native_low_precision=*/false});
  };
  move("Constant", constant_kernel);
  move("Identity", copy_kernel);
  move("Reshape", copy_kernel);
  move("Flatten", copy_kernel);
  move("Squeeze", squeeze_kernel);
  move("Unsqueeze", copy_kernel);
  r.add(KernelDef{"Transpose", "fast", nullptr, transpose_fast, /*native_low_precision=*/true});
  move("Transpose", transpose_kernel);
  r.add(KernelDef{"Concat", "fast", nullptr, concat_fast, /*native_low_precision=*/true});
  move("Concat", concat_kernel);
  r.add(KernelDef{"Split", "fast", nullptr, split_fast, /*native_low_precision=*/true});
  move("Split", split_kernel);
  r.add(KernelDef{"Slice", "fast", nullptr, slice_fast, /*native_low_precision=*/true});
  move("Slice", slice_kernel);
  r.add(KernelDef{"Gather", "fast", nullptr, gather_fast, /*native_low_precision=*/true});
  move("Gather", gather_kernel);
  move("GatherElements", gather_elements_kernel);
  move("GatherND", gather_nd_kernel);
  move("Shape", shape_kernel);
  move("Size", size_kernel);
  r.add(KernelDef{"Expand", "fast", nullptr, expand_fast, /*native_low_precision=*/true});
  move("Expand", expand_kernel);
  move("Tile", tile_kernel);
  r.add(KernelDef{"Pad", "fast", pad_fast_accepts, pad_fast, /*native_low_precision=*/true});
  move("Pad", pad_kernel);
  move("ConstantOfShape", constant_of_shape_kernel);
  move("Trilu", trilu_kernel);
  move("DepthToSpace", depth_to_space_kernel);
  move("SpaceToDepth", space_to_depth_kernel);
  r.add(KernelDef{"ScatterElements", "fast", scatter_elements_accepts, scatter_elements_fast,
                  /*native_low_precision=*/false});
  compute("ScatterElements", scatter_elements_kernel);
  compute("ScatterND", scatter_nd_kernel);
  compute("Range", range_kernel);
  compute("OneHot", one_hot_kernel);
  compute("NonZero", non_zero_kernel);
  compute("CumSum", cum_sum_kernel);
  compute("TopK", top_k_kernel);
  compute("EyeLike", eye_like_kernel);
}

}  // namespace tensord::cpu
