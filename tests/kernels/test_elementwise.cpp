// Element-wise ops on the cpu reference kernels, against hand-computed values.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/op_registry.h"
#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename T>
HostTensor T_(std::vector<T> v, Shape s) {
  return HostTensor::from_vector<T>(v, std::move(s));
}

// A float16 or bfloat16 tensor from raw bits.
HostTensor bits16(DType dtype, std::vector<uint16_t> bits, Shape s) {
  HostTensor t(dtype, std::move(s));
  for (size_t i = 0; i < bits.size(); ++i) t.mutable_data<uint16_t>()[i] = bits[i];
  return t;
}
template <typename T>
std::vector<T> values(const HostTensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// Expects the op to fail with `code`, the message naming the op and each of `parts`.
void expect_error(const std::string& op, const std::vector<HostTensor>& inputs, AttributeMap attrs,
                  const std::vector<std::string>& parts,
                  StatusCode code = StatusCode::kInvalidArgument) {
  auto r = run_op(op, inputs, std::move(attrs));
  ASSERT_FALSE(r.ok()) << op << " unexpectedly succeeded";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_EQ(r.status().message().rfind(op + ":", 0), 0u) << r.status().message();
  for (const auto& p : parts)
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << r.status().message();
}

// ---- Add / Sub / Mul / Div ----

TEST(ElementwiseAdd, SameShape) {
  EXPECT_TRUE(tensors_near(run1("Add", {F32({1, 2, 3}, {3}), F32({10, 20, 30.5f}, {3})}),
                           F32({11, 22, 33.5f}, {3})));
}

TEST(ElementwiseAdd, BroadcastRow) {
  EXPECT_TRUE(tensors_near(run1("Add", {F32({1, 2, 3, 4, 5, 6}, {2, 3}), F32({10, 20, 30}, {3})}),
                           F32({11, 22, 33, 14, 25, 36}, {2, 3})));
}

TEST(ElementwiseAdd, BroadcastBothWaysRank3) {
  // [2,1,3] + [4,1] -> [2,4,3].
  auto y = run1("Add", {F32({1, 2, 3, 4, 5, 6}, {2, 1, 3}), F32({10, 20, 30, 40}, {4, 1})});
  EXPECT_TRUE(tensors_near(y, F32({11, 12, 13, 21, 22, 23, 31, 32, 33, 41, 42, 43,
                                   14, 15, 16, 24, 25, 26, 34, 35, 36, 44, 45, 46},
                                  {2, 4, 3})));
}

TEST(ElementwiseAdd, Scalars) {
  EXPECT_TRUE(tensors_near(run1("Add", {F32({1.5f}, {}), F32({2}, {})}), F32({3.5f}, {})));
  EXPECT_TRUE(tensors_near(run1("Add", {I64({1, 2}, {2}), I64({100}, {})}), I64({101, 102}, {2})));
}

TEST(ElementwiseAdd, EmptyBroadcast) {
  auto y = run1("Add", {F32({}, {0, 3}), F32({1, 2, 3}, {3})});
  EXPECT_EQ(y.shape(), (Shape{0, 3}));
}

TEST(ElementwiseAdd, IntegersWrap) {
  EXPECT_TRUE(tensors_near(run1("Add", {U8({250, 3}, {2}), U8({10, 4}, {2})}), U8({4, 7}, {2})));
  EXPECT_TRUE(tensors_near(run1("Add", {I32({INT32_MAX, -5}, {2}), I32({1, 2}, {2})}),
                           I32({INT32_MIN, -3}, {2})));
}

TEST(ElementwiseAdd, Float16RoundsOnNarrowing) {
  // 1002.25 is not a float16; the nearest is 1002 (spacing 0.5 in [512, 1024)).
  auto y = run1("Add", {F16({1.5f, 2.25f}, {2}), F16({0.25f, 1000}, {2})});
  EXPECT_TRUE(tensors_near(y, F16({1.75f, 1002}, {2})));
  EXPECT_EQ(values<uint16_t>(y)[1], 0x63D4);  // 1002 = 1.95703125 * 2^9
}

TEST(ElementwiseAdd, Float64) {
  EXPECT_TRUE(tensors_near(run1("Add", {F64({0.1}, {1}), F64({0.2}, {1})}),
                           F64({0.30000000000000004}, {1}), 0, 0));
}

TEST(ElementwiseAdd, IncompatibleShapesIsError) {
  expect_error("Add", {F32({1, 2, 3, 4, 5, 6}, {2, 3}), F32({1, 2, 3, 4}, {4})}, {},
               {"cannot broadcast", "[2, 3]", "[4]", "test_Add"});
}

TEST(ElementwiseAdd, DtypeMismatchIsError) {
  expect_error("Add", {F32({1}, {1}), I64({1}, {1})}, {}, {"float32", "int64"});
}

TEST(ElementwiseAdd, BoolIsError) {
  expect_error("Add", {Bool({true}, {1}), Bool({true}, {1})}, {}, {"bool"});
}

TEST(ElementwiseAdd, UnknownAttributeIsError) {
  expect_error("Add", {F32({1}, {1}), F32({1}, {1})}, {{"alpha", 1.0f}}, {"alpha"});
}

TEST(ElementwiseSub, Broadcast) {
  EXPECT_TRUE(tensors_near(run1("Sub", {F32({5, 6, 7, 8, 9, 10}, {2, 3}), F32({1, 2, 3}, {3})}),
                           F32({4, 4, 4, 7, 7, 7}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("Sub", {I64({10, 20}, {2, 1}), I64({1, 2, 3}, {1, 3})}),
                           I64({9, 8, 7, 19, 18, 17}, {2, 3})));
}

TEST(ElementwiseSub, UnsignedWraps) {
  EXPECT_TRUE(tensors_near(run1("Sub", {U8({0, 9}, {2}), U8({1, 4}, {2})}), U8({255, 5}, {2})));
}

TEST(ElementwiseMul, Broadcast) {
  EXPECT_TRUE(tensors_near(run1("Mul", {F32({1, 2, 3}, {1, 3}), F32({2, 3}, {2, 1})}),
                           F32({2, 4, 6, 3, 6, 9}, {2, 3})));
}

TEST(ElementwiseMul, SmallIntegersWrap) {
  // 300 * 300 = 90000 = 65536 + 24464; 65535 * 65535 = 1 (mod 65536).
  EXPECT_TRUE(tensors_near(run1("Mul", {T_<int16_t>({300}, {1}), T_<int16_t>({300}, {1})}),
                           T_<int16_t>({24464}, {1})));
  EXPECT_TRUE(tensors_near(run1("Mul", {T_<uint16_t>({65535}, {1}), T_<uint16_t>({65535}, {1})}),
                           T_<uint16_t>({1}, {1})));
}

TEST(ElementwiseDiv, Float) {
  auto y = run1("Div", {F32({1, 3, -6, 1}, {4}), F32({4, 2, 4, 0}, {4})});
  ASSERT_EQ(y.numel(), 4);
  EXPECT_TRUE(tensors_near(run1("Div", {F32({1, 3, -6}, {3}), F32({4, 2, 4}, {3})}),
                           F32({0.25f, 1.5f, -1.5f}, {3})));
  EXPECT_TRUE(std::isinf(y.data<float>()[3]) && y.data<float>()[3] > 0);
}

TEST(ElementwiseDiv, IntegersTruncateTowardZero) {
  EXPECT_TRUE(
      tensors_near(run1("Div", {I32({7, -7, 7, -7, INT32_MIN}, {5}), I32({2, 2, -2, -2, -1}, {5})}),
                   I32({3, -3, -3, 3, INT32_MIN}, {5})));
  EXPECT_TRUE(tensors_near(run1("Div", {U8({250, 7}, {2}), U8({3, 8}, {2})}), U8({83, 0}, {2})));
}

TEST(ElementwiseDiv, IntegerDivisionByZeroIsError) {
  expect_error("Div", {I64({1, 2, 3}, {3}), I64({1, 0, 1}, {3})}, {},
               {"division by zero", "element 1"});
}

// ---- Pow ----

TEST(ElementwisePow, Float) {
  EXPECT_TRUE(tensors_near(run1("Pow", {F32({1, 2, 3}, {3}), F32({4, 5, 6}, {3})}),
                           F32({1, 32, 729}, {3})));
  EXPECT_TRUE(
      tensors_near(run1("Pow", {F32({4, 2}, {2}), F32({0.5f}, {})}), F32({2, 1.41421356f}, {2})));
}

TEST(ElementwisePow, BroadcastArray) {
  EXPECT_TRUE(tensors_near(run1("Pow", {F32({1, 2, 3, 4, 5, 6}, {2, 3}), F32({1, 2, 3}, {3})}),
                           F32({1, 4, 27, 4, 25, 216}, {2, 3})));
}

TEST(ElementwisePow, IntBaseFloatExponentTruncates) {
  EXPECT_TRUE(tensors_near(run1("Pow", {I32({1, 2, 3, 2}, {4}), F32({4, 5, 6, 0.5f}, {4})}),
                           I32({1, 32, 729, 1}, {4})));
}

TEST(ElementwisePow, IntegerExponents) {
  EXPECT_TRUE(tensors_near(
      run1("Pow", {I64({2, -3, 10, 2, -1, -1}, {6}), I64({10, 3, 0, -1, -3, -2}, {6})}),
      I64({1024, -27, 1, 0, -1, 1}, {6})));
  EXPECT_TRUE(tensors_near(run1("Pow", {F32({1.5f, 2, -2}, {3}), I64({2, -1, 3}, {3})}),
                           F32({2.25f, 0.5f, -8}, {3})));
  EXPECT_TRUE(tensors_near(run1("Pow", {I32({3}, {1}), T_<uint8_t>({4}, {1})}), I32({81}, {1})));
}

TEST(ElementwisePow, LargeInt64IsExact) {
  // 3^39 = 4052555153018976267 (not representable in a double).
  auto y = run1("Pow", {I64({3}, {1}), I64({39}, {1})});
  EXPECT_EQ(values<int64_t>(y), std::vector<int64_t>{4052555153018976267});
}

TEST(ElementwisePow, UnsupportedBaseIsError) {
  expect_error("Pow", {U8({2}, {1}), U8({2}, {1})}, {}, {"uint8"});
}

// ---- Mod ----

TEST(ElementwiseMod, SignOfDivisor) {
  EXPECT_TRUE(
      tensors_near(run1("Mod", {I8({-4, 7, 5, 4, -7, 8}, {6}), I8({2, -3, 8, -2, 3, 5}, {6})}),
                   I8({0, -2, 5, 0, 2, 3}, {6})));
}

TEST(ElementwiseMod, FmodSignOfDividend) {
  EXPECT_TRUE(tensors_near(
      run1("Mod", {I64({-4, 7, 5, 4, -7, 8}, {6}), I64({2, -3, 8, -2, 3, 5}, {6})}, {{"fmod", 1}}),
      I64({0, 1, 5, 0, -1, 3}, {6})));
  EXPECT_TRUE(tensors_near(run1("Mod", {I32({INT32_MIN}, {1}), I32({-1}, {1})}, {{"fmod", 1}}),
                           I32({0}, {1})));
}

TEST(ElementwiseMod, FloatFmod) {
  auto y = run1("Mod",
                {F32({-4.3f, 7.2f, 5.0f, 4.3f, -7.2f, 8.0f}, {6}),
                 F32({2.1f, -3.4f, 8.0f, -2.1f, 3.4f, 5.0f}, {6})},
                {{"fmod", 1}});
  EXPECT_TRUE(tensors_near(y, F32({-0.1f, 0.4f, 5.0f, 0.1f, -0.4f, 3.0f}, {6}), 1e-5, 1e-5));
}

TEST(ElementwiseMod, UnsignedBroadcast) {
  EXPECT_TRUE(tensors_near(run1("Mod", {U8({10, 11, 12, 13, 14, 15}, {2, 3}), U8({3, 4, 5}, {3})}),
                           U8({1, 3, 2, 1, 2, 0}, {2, 3})));
}

TEST(ElementwiseMod, FloatWithoutFmodIsError) {
  expect_error("Mod", {F32({1}, {1}), F32({1}, {1})}, {}, {"fmod", "float32"});
}

TEST(ElementwiseMod, BadFmodIsError) {
  expect_error("Mod", {I32({1}, {1}), I32({1}, {1})}, {{"fmod", 2}}, {"fmod", "2"});
}

TEST(ElementwiseMod, ZeroDivisorIsError) {
  expect_error("Mod", {I32({5, 6}, {2}), I32({0}, {1})}, {}, {"division by zero"});
}

// ---- BitShift and bitwise ----

TEST(ElementwiseBitShift, RightAndLeft) {
  EXPECT_TRUE(tensors_near(
      run1("BitShift", {U8({16, 4, 1}, {3}), U8({1, 2, 3}, {3})}, {{"direction", "RIGHT"}}),
      U8({8, 1, 0}, {3})));
  EXPECT_TRUE(
      tensors_near(run1("BitShift", {T_<uint16_t>({16, 4, 1}, {3}), T_<uint16_t>({1, 2, 3}, {3})},
                        {{"direction", "LEFT"}}),
                   T_<uint16_t>({32, 16, 8}, {3})));
}

TEST(ElementwiseBitShift, LeftDropsHighBitsAndWideShiftsGiveZero) {
  EXPECT_TRUE(tensors_near(
      run1("BitShift", {U8({0x81, 1, 0xFF}, {3}), U8({1, 8, 7}, {3})}, {{"direction", "LEFT"}}),
      U8({0x02, 0, 0x80}, {3})));
  auto y = run1("BitShift", {T_<uint64_t>({1, 1}, {2}), T_<uint64_t>({63, 64}, {2})},
                {{"direction", "LEFT"}});
  EXPECT_EQ(values<uint64_t>(y), (std::vector<uint64_t>{uint64_t{1} << 63, 0}));
}

TEST(ElementwiseBitShift, BroadcastScalarShift) {
  EXPECT_TRUE(tensors_near(run1("BitShift", {T_<uint32_t>({8, 16, 24}, {3}), T_<uint32_t>({3}, {})},
                                {{"direction", "RIGHT"}}),
                           T_<uint32_t>({1, 2, 3}, {3})));
}

TEST(ElementwiseBitShift, MissingOrBadDirectionIsError) {
  expect_error("BitShift", {U8({1}, {1}), U8({1}, {1})}, {}, {"direction"});
  expect_error("BitShift", {U8({1}, {1}), U8({1}, {1})}, {{"direction", "UP"}},
               {"direction", "UP"});
}

TEST(ElementwiseBitShift, SignedIsError) {
  expect_error("BitShift", {I32({1}, {1}), I32({1}, {1})}, {{"direction", "LEFT"}}, {"int32"});
}

TEST(ElementwiseBitwise, AndOrXor) {
  auto a = I32({12, -1, 5}, {3});
  auto b = I32({10, 7, -8}, {3});
  // 12 = 1100, 10 = 1010; -1 & 7 = 7; 5 = ...0101, -8 = ...1000.
  EXPECT_TRUE(tensors_near(run1("BitwiseAnd", {a, b}), I32({8, 7, 0}, {3})));
  EXPECT_TRUE(tensors_near(run1("BitwiseOr", {a, b}), I32({14, -1, -3}, {3})));
  EXPECT_TRUE(tensors_near(run1("BitwiseXor", {a, b}), I32({6, -8, -3}, {3})));
  EXPECT_TRUE(tensors_near(run1("BitwiseAnd", {U8({0xF0, 0x3C}, {2}), U8({0x3C}, {})}),
                           U8({0x30, 0x3C}, {2})));
}

TEST(ElementwiseBitwise, Not) {
  EXPECT_TRUE(tensors_near(run1("BitwiseNot", {I8({5, 0, -128}, {3})}), I8({-6, -1, 127}, {3})));
  EXPECT_TRUE(tensors_near(run1("BitwiseNot", {U8({0, 0x0F}, {2})}), U8({255, 0xF0}, {2})));
}

TEST(ElementwiseBitwise, FloatIsError) {
  expect_error("BitwiseAnd", {F32({1}, {1}), F32({1}, {1})}, {}, {"float32"});
  expect_error("BitwiseNot", {F32({1}, {1})}, {}, {"float32"});
}

// ---- comparison and logic ----

TEST(ElementwiseCompare, FloatsWithNaN) {
  auto a = F32({1, 2, kNaN, 4}, {4});
  auto b = F32({2, 2, 1, kNaN}, {4});
  EXPECT_TRUE(tensors_near(run1("Less", {a, b}), Bool({true, false, false, false}, {4})));
  EXPECT_TRUE(tensors_near(run1("Greater", {a, b}), Bool({false, false, false, false}, {4})));
  EXPECT_TRUE(tensors_near(run1("LessOrEqual", {a, b}), Bool({true, true, false, false}, {4})));
  EXPECT_TRUE(tensors_near(run1("GreaterOrEqual", {a, b}), Bool({false, true, false, false}, {4})));
  EXPECT_TRUE(tensors_near(run1("Equal", {a, b}), Bool({false, true, false, false}, {4})));
}

TEST(ElementwiseCompare, Broadcast) {
  EXPECT_TRUE(tensors_near(run1("Equal", {I64({1, 2, 3, 4}, {2, 2}), I64({2}, {1})}),
                           Bool({false, true, false, false}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("Greater", {I32({1, 5}, {2, 1}), I32({0, 3, 6}, {3})}),
                           Bool({true, false, false, true, true, false}, {2, 3})));
  EXPECT_TRUE(
      tensors_near(run1("Less", {U8({0, 200}, {2}), U8({100}, {})}), Bool({true, false}, {2})));
}

TEST(ElementwiseCompare, EqualBoolAndFloat16) {
  EXPECT_TRUE(
      tensors_near(run1("Equal", {Bool({true, false, true}, {3}), Bool({true, true, false}, {3})}),
                   Bool({true, false, false}, {3})));
  EXPECT_TRUE(tensors_near(run1("Equal", {F16({0.5f, 1}, {2}), F16({0.5f, 2}, {2})}),
                           Bool({true, false}, {2})));
}

TEST(ElementwiseCompare, LessOnBoolIsError) {
  expect_error("Less", {Bool({true}, {1}), Bool({false}, {1})}, {}, {"bool"});
}

TEST(ElementwiseLogic, TruthTables) {
  auto a = Bool({true, true, false, false}, {4});
  auto b = Bool({true, false, true, false}, {4});
  EXPECT_TRUE(tensors_near(run1("And", {a, b}), Bool({true, false, false, false}, {4})));
  EXPECT_TRUE(tensors_near(run1("Or", {a, b}), Bool({true, true, true, false}, {4})));
  EXPECT_TRUE(tensors_near(run1("Xor", {a, b}), Bool({false, true, true, false}, {4})));
  EXPECT_TRUE(tensors_near(run1("Not", {a}), Bool({false, false, true, true}, {4})));
}

TEST(ElementwiseLogic, Broadcast) {
  EXPECT_TRUE(
      tensors_near(run1("And", {Bool({true, false, true, true}, {2, 2}), Bool({true, false}, {2})}),
                   Bool({true, false, true, false}, {2, 2})));
  EXPECT_TRUE(tensors_near(run1("Or", {Bool({false, true}, {2, 1}), Bool({false, true, false}, {3})}),
                           Bool({false, true, false, true, true, true}, {2, 3})));
}

TEST(ElementwiseLogic, NonBoolIsError) {
  expect_error("And", {F32({1}, {1}), F32({1}, {1})}, {}, {"float32", "bool"});
  expect_error("Not", {I32({1}, {1})}, {}, {"int32"});
}

// ---- variadic ----

TEST(ElementwiseVariadic, ThreeInputs) {
  std::vector<HostTensor> in = {F32({3, 2, 1}, {3}), F32({1, 4, 4}, {3}), F32({2, 5, 3}, {3})};
  EXPECT_TRUE(tensors_near(run1("Max", in), F32({3, 5, 4}, {3})));
  EXPECT_TRUE(tensors_near(run1("Min", in), F32({1, 2, 1}, {3})));
  EXPECT_TRUE(tensors_near(run1("Sum", in), F32({6, 11, 8}, {3})));
  EXPECT_TRUE(tensors_near(run1("Mean", in), F32({2, 3.6666667f, 2.6666667f}, {3})));
}

TEST(ElementwiseVariadic, OneInput) {
  for (const char* op : {"Max", "Min", "Sum", "Mean"})
    EXPECT_TRUE(tensors_near(run1(op, {F32({3, -2}, {2})}), F32({3, -2}, {2}))) << op;
}

TEST(ElementwiseVariadic, Broadcast) {
  // [2,1], [3], scalar -> [2,3].
  std::vector<HostTensor> in = {F32({1, 10}, {2, 1}), F32({0, 5, 20}, {3}), F32({4}, {})};
  EXPECT_TRUE(tensors_near(run1("Max", in), F32({4, 5, 20, 10, 10, 20}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("Min", in), F32({0, 1, 1, 0, 4, 4}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("Sum", in), F32({5, 10, 25, 14, 19, 34}, {2, 3})));
}

TEST(ElementwiseVariadic, Integers) {
  EXPECT_TRUE(tensors_near(run1("Max", {I8({-128, 5}, {2}), I8({0, -3}, {2})}), I8({0, 5}, {2})));
  EXPECT_TRUE(
      tensors_near(run1("Min", {I8({-128, 5}, {2}), I8({0, -3}, {2})}), I8({-128, -3}, {2})));
  const uint64_t big = (uint64_t{1} << 63) + 1;
  auto y = run1("Max", {T_<uint64_t>({big, 5}, {2}), T_<uint64_t>({3, UINT64_MAX}, {2})});
  EXPECT_EQ(values<uint64_t>(y), (std::vector<uint64_t>{big, UINT64_MAX}));
}

TEST(ElementwiseVariadic, NaNPropagates) {
  auto y = run1("Max", {F32({kNaN, 1}, {2}), F32({1, 2}, {2})});
  ASSERT_EQ(y.numel(), 2);
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
  EXPECT_EQ(y.data<float>()[1], 2.0f);
  auto z = run1("Min", {F32({1, 2}, {2}), F32({kNaN, 1}, {2})});
  ASSERT_EQ(z.numel(), 2);
  EXPECT_TRUE(std::isnan(z.data<float>()[0]));
}

TEST(ElementwiseVariadic, Float16) {
  EXPECT_TRUE(
      tensors_near(run1("Mean", {F16({1, 2}, {2}), F16({2, 4}, {2})}), F16({1.5f, 3}, {2})));
  EXPECT_TRUE(tensors_near(run1("Max", {F16({1, 7}, {2}), F16({2, 4}, {2})}), F16({2, 7}, {2})));
}

TEST(ElementwiseVariadic, Errors) {
  expect_error("Max", {F32({1}, {1}), I32({1}, {1})}, {}, {"input 1", "int32", "float32"});
  expect_error("Sum", {I32({1}, {1}), I32({1}, {1})}, {}, {"int32"});
  expect_error("Min", {F32({1, 2}, {2}), F32({1, 2, 3}, {3})}, {}, {"[2]", "[3]"});
}

// ---- unary math ----

TEST(ElementwiseUnary, NegAbsSign) {
  EXPECT_TRUE(tensors_near(run1("Neg", {F32({-4, 2, 0}, {3})}), F32({4, -2, 0}, {3})));
  EXPECT_TRUE(tensors_near(run1("Neg", {I8({-128, 5}, {2})}), I8({-128, -5}, {2})));
  EXPECT_TRUE(tensors_near(run1("Abs", {F32({-1.5f, 0, 2}, {3})}), F32({1.5f, 0, 2}, {3})));
  EXPECT_TRUE(
      tensors_near(run1("Abs", {I32({-5, 3, INT32_MIN}, {3})}), I32({5, 3, INT32_MIN}, {3})));
  EXPECT_TRUE(tensors_near(run1("Abs", {U8({200}, {1})}), U8({200}, {1})));
  EXPECT_TRUE(tensors_near(run1("Sign", {F32({-2, 0, 3, kNaN}, {4})}), F32({-1, 0, 1, kNaN}, {4})));
  EXPECT_TRUE(tensors_near(run1("Sign", {I64({-7, 0, 9}, {3})}), I64({-1, 0, 1}, {3})));
  EXPECT_TRUE(tensors_near(run1("Sign", {U8({0, 5}, {2})}), U8({0, 1}, {2})));
}

TEST(ElementwiseUnary, NegUnsignedIsError) {
  expect_error("Neg", {U8({1}, {1})}, {}, {"input 0 has dtype uint8"});
}

TEST(ElementwiseUnary, ExpLogSqrtReciprocal) {
  EXPECT_TRUE(
      tensors_near(run1("Exp", {F32({-1, 0, 1}, {3})}), F32({0.36787944f, 1, 2.71828183f}, {3})));
  EXPECT_TRUE(
      tensors_near(run1("Log", {F32({1, 10, 2.71828183f}, {3})}), F32({0, 2.30258509f, 1}, {3})));
  EXPECT_TRUE(tensors_near(run1("Sqrt", {F32({4, 2, 0}, {3})}), F32({2, 1.41421356f, 0}, {3})));
  EXPECT_TRUE(
      tensors_near(run1("Reciprocal", {F32({2, -4, 0.5f}, {3})}), F32({0.5f, -0.25f, 2}, {3})));
  EXPECT_TRUE(tensors_near(run1("Exp", {F64({1}, {1})}), F64({2.718281828459045}, {1}), 1e-15, 0));
}

TEST(ElementwiseUnary, LogAndSqrtOutsideDomain) {
  auto y = run1("Log", {F32({0, -1}, {2})});
  ASSERT_EQ(y.numel(), 2);
  EXPECT_TRUE(std::isinf(y.data<float>()[0]) && y.data<float>()[0] < 0);
  EXPECT_TRUE(std::isnan(y.data<float>()[1]));
  EXPECT_TRUE(tensors_near(run1("Sqrt", {F32({-1}, {1})}), F32({kNaN}, {1})));
}

TEST(ElementwiseUnary, FloorCeilRound) {
  EXPECT_TRUE(tensors_near(run1("Floor", {F32({-1.5f, 1.2f, 2}, {3})}), F32({-2, 1, 2}, {3})));
  EXPECT_TRUE(tensors_near(run1("Ceil", {F32({-1.5f, 1.2f, 2}, {3})}), F32({-1, 2, 2}, {3})));
  // Half to even.
  EXPECT_TRUE(tensors_near(run1("Round", {F32({0.1f, 0.5f, 0.9f, 1.2f, 1.5f, 1.8f, 2.3f, 2.5f, 2.7f,
                                               -1.1f, -1.5f, -1.9f, -2.2f, -2.5f, -2.8f},
                                              {15})}),
                           F32({0, 0, 1, 1, 2, 2, 2, 2, 3, -1, -2, -2, -2, -2, -3}, {15})));
}

TEST(ElementwiseUnary, Trigonometric) {
  EXPECT_TRUE(tensors_near(run1("Sin", {F32({0, 1}, {2})}), F32({0, 0.84147098f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Cos", {F32({0, 1}, {2})}), F32({1, 0.54030231f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Tan", {F32({0, 0.5f}, {2})}), F32({0, 0.54630249f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Asin", {F32({0, 0.5f}, {2})}), F32({0, 0.52359878f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Acos", {F32({1, 0.5f}, {2})}), F32({0, 1.04719755f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Atan", {F32({0, 1}, {2})}), F32({0, 0.78539816f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Sinh", {F32({0, 1}, {2})}), F32({0, 1.17520119f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Cosh", {F32({0, 1}, {2})}), F32({1, 1.54308063f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Asinh", {F32({0, 1}, {2})}), F32({0, 0.88137359f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Acosh", {F32({1, 2}, {2})}), F32({0, 1.31695790f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Atanh", {F32({0, 0.5f}, {2})}), F32({0, 0.54930614f}, {2})));
  EXPECT_TRUE(tensors_near(run1("Asin", {F32({2}, {1})}), F32({kNaN}, {1})));
}

TEST(ElementwiseUnary, Erf) {
  EXPECT_TRUE(tensors_near(run1("Erf", {F32({0, 0.5f, 1, -1}, {4})}),
                           F32({0, 0.52049988f, 0.84270079f, -0.84270079f}, {4})));
  // Integers: erf is in (-1, 1), so the truncated result is 0.
  EXPECT_TRUE(tensors_near(run1("Erf", {I64({0, 1, 3, -2}, {4})}), I64({0, 0, 0, 0}, {4})));
}

TEST(ElementwiseUnary, IsNaNIsInf) {
  auto x = F32({-kInf, -1, kInf, kNaN, 0}, {5});
  EXPECT_TRUE(tensors_near(run1("IsNaN", {x}), Bool({false, false, false, true, false}, {5})));
  EXPECT_TRUE(tensors_near(run1("IsInf", {x}), Bool({true, false, true, false, false}, {5})));
  EXPECT_TRUE(tensors_near(run1("IsInf", {x}, {{"detect_negative", 0}}),
                           Bool({false, false, true, false, false}, {5})));
  EXPECT_TRUE(tensors_near(run1("IsInf", {x}, {{"detect_positive", 0}}),
                           Bool({true, false, false, false, false}, {5})));
  EXPECT_TRUE(tensors_near(run1("IsNaN", {F64({1, std::nan("")}, {2})}), Bool({false, true}, {2})));
}

TEST(ElementwiseUnary, Float16) {
  // exp(1) = 2.71828 -> float16 2.71875 (0x4170).
  auto y = run1("Exp", {F16({0, 1}, {2})});
  EXPECT_EQ(y.dtype(), DType::kFloat16);
  EXPECT_EQ(values<uint16_t>(y), (std::vector<uint16_t>{0x3C00, 0x4170}));
}

TEST(ElementwiseUnary, IntegerInputToFloatOpIsError) {
  expect_error("Exp", {I64({1}, {1})}, {}, {"int64", "float32"});
  expect_error("IsInf", {F32({1}, {1})}, {{"detect_negative", 2}}, {"detect_negative", "2"});
}

// ---- activations ----

TEST(ElementwiseActivation, Relu) {
  EXPECT_TRUE(tensors_near(run1("Relu", {F32({-3, 0, 2.5f}, {3})}), F32({0, 0, 2.5f}, {3})));
  EXPECT_TRUE(tensors_near(run1("Relu", {I32({-3, 0, 5}, {3})}), I32({0, 0, 5}, {3})));
  expect_error("Relu", {U8({1}, {1})}, {}, {"uint8"});
}

TEST(ElementwiseActivation, SigmoidTanh) {
  EXPECT_TRUE(tensors_near(run1("Sigmoid", {F32({-1000, -1, 0, 1, 1000}, {5})}),
                           F32({0, 0.26894142f, 0.5f, 0.73105858f, 1}, {5})));
  EXPECT_TRUE(tensors_near(run1("Tanh", {F32({-0.5f, 0, 0.5f}, {3})}),
                           F32({-0.46211716f, 0, 0.46211716f}, {3})));
}

TEST(ElementwiseActivation, LeakyRelu) {
  EXPECT_TRUE(tensors_near(run1("LeakyRelu", {F32({-1, 0, 1}, {3})}), F32({-0.01f, 0, 1}, {3})));
  EXPECT_TRUE(tensors_near(run1("LeakyRelu", {F32({-2, 3}, {2})}, {{"alpha", 0.1f}}),
                           F32({-0.2f, 3}, {2})));
}

TEST(ElementwiseActivation, EluSeluCelu) {
  EXPECT_TRUE(tensors_near(run1("Elu", {F32({-1, 0, 1}, {3})}), F32({-0.63212056f, 0, 1}, {3})));
  EXPECT_TRUE(tensors_near(run1("Elu", {F32({-1, 0, 1}, {3})}, {{"alpha", 2.0f}}),
                           F32({-1.26424112f, 0, 1}, {3})));
  EXPECT_TRUE(
      tensors_near(run1("Selu", {F32({-1, 0, 1}, {3})}), F32({-1.11133074f, 0, 1.05070102f}, {3})));
  EXPECT_TRUE(tensors_near(run1("Selu", {F32({-1, 0, 1}, {3})}, {{"alpha", 2.0f}, {"gamma", 3.0f}}),
                           F32({-3.79272335f, 0, 3}, {3})));
  EXPECT_TRUE(tensors_near(run1("Celu", {F32({-1, 0, 1}, {3})}), F32({-0.63212056f, 0, 1}, {3})));
  EXPECT_TRUE(tensors_near(run1("Celu", {F32({-1, 0, 1}, {3})}, {{"alpha", 2.0f}}),
                           F32({-0.78693868f, 0, 1}, {3})));
  expect_error("Celu", {F64({1}, {1})}, {}, {"float64"});
}

TEST(ElementwiseActivation, HardSigmoidHardSwish) {
  EXPECT_TRUE(
      tensors_near(run1("HardSigmoid", {F32({-3, 0, 1, 3}, {4})}), F32({0, 0.5f, 0.7f, 1}, {4})));
  EXPECT_TRUE(
      tensors_near(run1("HardSigmoid", {F32({-1, 1}, {2})}, {{"alpha", 0.5f}, {"beta", 0.6f}}),
                   F32({0.1f, 1}, {2})));
  EXPECT_TRUE(tensors_near(run1("HardSwish", {F32({-4, -1, 1, 4}, {4})}),
                           F32({0, -0.33333333f, 0.66666667f, 4}, {4})));
}

TEST(ElementwiseActivation, SoftplusSoftsign) {
  EXPECT_TRUE(tensors_near(run1("Softplus", {F32({-1, 0, 1, 100}, {4})}),
                           F32({0.31326169f, 0.69314718f, 1.31326169f, 100}, {4})));
  EXPECT_TRUE(tensors_near(run1("Softsign", {F32({-1, 0, 3}, {3})}), F32({-0.5f, 0, 0.75f}, {3})));
}

TEST(ElementwiseActivation, ThresholdedRelu) {
  EXPECT_TRUE(tensors_near(run1("ThresholdedRelu", {F32({0.5f, 1, 2}, {3})}), F32({0, 0, 2}, {3})));
  EXPECT_TRUE(tensors_near(run1("ThresholdedRelu", {F32({2, 2.5f}, {2})}, {{"alpha", 2.0f}}),
                           F32({0, 2.5f}, {2})));
}

TEST(ElementwiseActivation, BadAttributeKindIsError) {
  expect_error("LeakyRelu", {F32({1}, {1})}, {{"alpha", "big"}}, {"alpha", "float", "string"});
}

TEST(ElementwisePRelu, SlopeBroadcast) {
  auto x = F32({-1, 2, -3, 4, -5, -6}, {2, 3});
  EXPECT_TRUE(tensors_near(run1("PRelu", {x, F32({0.5f, 1, 2}, {3})}),
                           F32({-0.5f, 2, -6, 4, -5, -12}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("PRelu", {x, F32({0.1f}, {1})}),
                           F32({-0.1f, 2, -0.3f, 4, -0.5f, -0.6f}, {2, 3})));
  EXPECT_TRUE(
      tensors_near(run1("PRelu", {x, F32({2, 3}, {2, 1})}), F32({-2, 2, -6, 4, -15, -18}, {2, 3})));
  EXPECT_TRUE(tensors_near(run1("PRelu", {I32({-4, 4}, {2}), I32({3}, {})}), I32({-12, 4}, {2})));
}

TEST(ElementwisePRelu, SlopeNotBroadcastableToXIsError) {
  auto x = F32({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_error("PRelu", {x, F32({1, 2}, {2})}, {}, {"[2]", "[2, 3]"});
  // Multidirectional broadcasting would give [2, 2, 3]; PRelu's output must keep X's shape.
  expect_error("PRelu", {x, F32({1, 2}, {2, 1, 1})}, {}, {"[2, 1, 1]", "[2, 3]"});
}

// ---- Clip ----

TEST(ElementwiseClip, MinAndMax) {
  auto x = F32({-2, -1, 0, 1, 2}, {5});
  EXPECT_TRUE(
      tensors_near(run1("Clip", {x, F32({-1}, {}), F32({1}, {})}), F32({-1, -1, 0, 1, 1}, {5})));
  EXPECT_TRUE(
      tensors_near(run1("Clip", {x, HostTensor(), F32({0}, {})}), F32({-2, -1, 0, 0, 0}, {5})));
  EXPECT_TRUE(tensors_near(run1("Clip", {x, F32({0}, {})}), F32({0, 0, 0, 1, 2}, {5})));
  EXPECT_TRUE(tensors_near(run1("Clip", {x}), x));
  EXPECT_TRUE(tensors_near(run1("Clip", {x, F32({-1.5f}, {1}), F32({0.5f}, {1})}),
                           F32({-1.5f, -1, 0, 0.5f, 0.5f}, {5})));
}

TEST(ElementwiseClip, MinAboveMaxGivesMax) {
  EXPECT_TRUE(tensors_near(run1("Clip", {F32({-5, 0, 5}, {3}), F32({2}, {}), F32({1}, {})}),
                           F32({1, 1, 1}, {3})));
}

TEST(ElementwiseClip, IntegersAndNaN) {
  EXPECT_TRUE(
      tensors_near(run1("Clip", {I8({-128, -5, 100}, {3}), I8({-1}, {})}), I8({-1, -1, 100}, {3})));
  EXPECT_TRUE(tensors_near(run1("Clip", {I8({-128, -5, 100}, {3}), HostTensor(), I8({0}, {})}),
                           I8({-128, -5, 0}, {3})));
  EXPECT_TRUE(tensors_near(run1("Clip", {F32({kNaN, 3}, {2}), F32({0}, {}), F32({1}, {})}),
                           F32({kNaN, 1}, {2})));
}

TEST(ElementwiseClip, Errors) {
  auto x = F32({1, 2}, {2});
  expect_error("Clip", {x, F32({0, 1}, {2})}, {}, {"min", "[2]"});
  expect_error("Clip", {x, HostTensor(), F32({0}, {1, 1})}, {}, {"max", "[1, 1]"});
  expect_error("Clip", {x, I64({0}, {})}, {}, {"int64", "float32"});
}

// ---- Where ----

TEST(ElementwiseWhere, Example) {
  EXPECT_TRUE(tensors_near(run1("Where", {Bool({true, false, true, true}, {2, 2}),
                                          F32({1, 2, 3, 4}, {2, 2}), F32({9, 8, 7, 6}, {2, 2})}),
                           F32({1, 8, 3, 4}, {2, 2})));
}

TEST(ElementwiseWhere, ThreeWayBroadcast) {
  // cond [2,1], X [1,3], Y scalar -> [2,3].
  EXPECT_TRUE(
      tensors_near(run1("Where", {Bool({true, false}, {2, 1}), I64({1, 2, 3}, {1, 3}), I64({-1}, {})}),
                   I64({1, 2, 3, -1, -1, -1}, {2, 3})));
  EXPECT_TRUE(
      tensors_near(run1("Where", {Bool({false, true, false}, {3}), I64({5}, {}), I64({7, 8}, {2, 1})}),
                   I64({7, 5, 7, 8, 5, 8}, {2, 3})));
}

TEST(ElementwiseWhere, Float16AndBoolValues) {
  auto y = run1("Where", {Bool({true, false}, {2}), bits16(DType::kFloat16, {0x3C00, 0x3C01}, {2}),
                          bits16(DType::kFloat16, {0x7E00, 0x4000}, {2})});
  EXPECT_EQ(y.dtype(), DType::kFloat16);
  EXPECT_EQ(values<uint16_t>(y), (std::vector<uint16_t>{0x3C00, 0x4000}));
  EXPECT_TRUE(tensors_near(run1("Where", {Bool({true, false}, {2}), Bool({true}, {}), Bool({false}, {})}),
                           Bool({true, false}, {2})));
}

TEST(ElementwiseWhere, Errors) {
  expect_error("Where", {F32({1}, {1}), F32({1}, {1}), F32({1}, {1})}, {}, {"float32", "bool"});
  expect_error("Where", {Bool({true}, {1}), F32({1}, {1}), I64({1}, {1})}, {}, {"int64", "float32"});
  expect_error("Where", {Bool({true, false}, {2}), F32({1, 2, 3}, {3}), F32({1}, {1})}, {},
               {"[2]", "[3]"});
}

// ---- Cast / CastLike ----

AttributeMap to(DType t) { return {{"to", static_cast<int64_t>(t)}}; }

TEST(ElementwiseCast, FloatToIntTruncatesTowardZero) {
  EXPECT_TRUE(
      tensors_near(run1("Cast", {F32({-2.7f, -0.5f, 0.5f, 2.7f, kNaN}, {5})}, to(DType::kInt32)),
                   I32({-2, 0, 0, 2, 0}, {5})));
  // In int64's range, out-of-range values wrap as numpy does.
  EXPECT_TRUE(tensors_near(run1("Cast", {F32({-1, 255.9f, 256}, {3})}, to(DType::kUInt8)),
                           U8({255, 255, 0}, {3})));
}

TEST(ElementwiseCast, IntegerToInteger) {
  EXPECT_TRUE(tensors_near(run1("Cast", {I64({300, -129, 5}, {3})}, to(DType::kInt8)),
                           I8({44, 127, 5}, {3})));
  auto y = run1("Cast", {T_<uint64_t>({UINT64_MAX, 7}, {2})}, to(DType::kInt64));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{-1, 7}));
  EXPECT_TRUE(
      tensors_near(run1("Cast", {I32({-7, 3}, {2})}, to(DType::kFloat64)), F64({-7, 3}, {2})));
}

TEST(ElementwiseCast, BoolBothWays) {
  EXPECT_TRUE(
      tensors_near(run1("Cast", {Bool({true, false}, {2})}, to(DType::kFloat32)), F32({1, 0}, {2})));
  EXPECT_TRUE(tensors_near(run1("Cast", {F32({0, -0.0f, 0.5f, kNaN}, {4})}, to(DType::kBool)),
                           Bool({false, false, true, true}, {4})));
  EXPECT_TRUE(
      tensors_near(run1("Cast", {I64({0, -3}, {2})}, to(DType::kBool)), Bool({false, true}, {2})));
}

TEST(ElementwiseCast, ToFloat16RoundsToNearestEven) {
  // 1/3 -> 0x3555; 65520 (halfway to 65536) and 70000 overflow to inf; 2049 ties to 2048.
  auto y = run1("Cast", {F32({1.0f / 3, 65520, 70000, -2, 2049}, {5})}, to(DType::kFloat16));
  EXPECT_EQ(y.dtype(), DType::kFloat16);
  EXPECT_EQ(values<uint16_t>(y), (std::vector<uint16_t>{0x3555, 0x7C00, 0x7C00, 0xC000, 0x6800}));
  auto z = run1("Cast", {F64({0.1}, {1})}, to(DType::kFloat16));
  EXPECT_EQ(values<uint16_t>(z), (std::vector<uint16_t>{0x2E66}));
  auto w = run1("Cast", {I64({2049, 2051}, {2})}, to(DType::kFloat16));
  EXPECT_EQ(values<uint16_t>(w), (std::vector<uint16_t>{0x6800, 0x6802}));
}

TEST(ElementwiseCast, FromFloat16AndBFloat16) {
  EXPECT_TRUE(tensors_near(
      run1("Cast", {bits16(DType::kFloat16, {0x3C00, 0xC000, 0x3555}, {3})}, to(DType::kFloat32)),
      F32({1, -2, 0.333251953125f}, {3}), 0, 0));
  EXPECT_TRUE(tensors_near(
      run1("Cast", {bits16(DType::kFloat16, {0x4170, 0xC170}, {2})}, to(DType::kInt32)),
      I32({2, -2}, {2})));
  EXPECT_TRUE(tensors_near(
      run1("Cast", {bits16(DType::kBFloat16, {0x3F80, 0x4049}, {2})}, to(DType::kFloat64)),
      F64({1, 3.140625}, {2}), 0, 0));
  auto y = run1("Cast", {F32({3.14159f, 1}, {2})}, to(DType::kBFloat16));
  EXPECT_EQ(y.dtype(), DType::kBFloat16);
  EXPECT_EQ(values<uint16_t>(y), (std::vector<uint16_t>{0x4049, 0x3F80}));
  // float16 -> bfloat16: 0x3555 (0.33325195) -> bfloat16 0x3EAB (0.333984375).
  auto z = run1("Cast", {bits16(DType::kFloat16, {0x3555}, {1})}, to(DType::kBFloat16));
  EXPECT_EQ(values<uint16_t>(z), (std::vector<uint16_t>{0x3EAB}));
}

TEST(ElementwiseCast, Errors) {
  auto x = F32({1}, {1});
  expect_error("Cast", {x}, {{"to", 8}}, {"string"}, StatusCode::kUnimplemented);
  expect_error("Cast", {x}, {{"to", 99}}, {"99"});
  expect_error("Cast", {x}, {}, {"'to'"});
  expect_error("Cast", {x}, {{"to", "float"}}, {"'to'", "int", "string"});
}

TEST(ElementwiseCastLike, TargetFromSecondInput) {
  EXPECT_TRUE(
      tensors_near(run1("CastLike", {F32({1.9f, -1.9f}, {2}), I64({0}, {1})}), I64({1, -1}, {2})));
  auto y = run1("CastLike", {F64({1.0 / 3}, {1}), F16({0}, {})});
  EXPECT_EQ(y.dtype(), DType::kFloat16);
  EXPECT_EQ(values<uint16_t>(y), (std::vector<uint16_t>{0x3555}));
  expect_error("CastLike", {F32({1}, {1})}, {}, {"2 inputs"});
}

// ---- inference with unknown (-1) dims ----

// Output 0's type from schema inference alone, or the error.
Result<TensorType> infer(const std::string& op, std::vector<TensorType> inputs,
                         AttributeMap attrs = {}) {
  Node n;
  n.name = "inf";
  n.op = op;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i)
    n.inputs.push_back(inputs[i].defined() ? "x" + std::to_string(i) : "");
  n.outputs = {"y"};
  InferenceContext ctx(n, std::move(inputs), {});
  TD_RETURN_IF_ERROR(infer_node(OpRegistry::global(), ctx));
  return ctx.output_types()[0];
}

TEST(ElementwiseInfer, UnknownDimsPropagate) {
  auto add = infer("Add", {{DType::kFloat32, {-1, 3}}, {DType::kFloat32, {3}}});
  ASSERT_TRUE(add.ok()) << add.status().to_string();
  EXPECT_EQ(*add, (TensorType{DType::kFloat32, {-1, 3}}));
  auto eq = infer("Equal", {{DType::kInt64, {-1, 1}}, {DType::kInt64, {4}}});
  ASSERT_TRUE(eq.ok()) << eq.status().to_string();
  EXPECT_EQ(*eq, (TensorType{DType::kBool, {-1, 4}}));
  auto where =
      infer("Where", {{DType::kBool, {-1}}, {DType::kFloat16, {2, 1}}, {DType::kFloat16, {}}});
  ASSERT_TRUE(where.ok()) << where.status().to_string();
  EXPECT_EQ(*where, (TensorType{DType::kFloat16, {2, -1}}));
  auto mx = infer("Max", {{DType::kInt32, {-1}}, {DType::kInt32, {1}}, {DType::kInt32, {5}}});
  ASSERT_TRUE(mx.ok()) << mx.status().to_string();
  EXPECT_EQ(mx->shape, (Shape{5}));
}

TEST(ElementwiseInfer, UnknownDimsInPReluClipCast) {
  auto prelu = infer("PRelu", {{DType::kFloat32, {-1, 3}}, {DType::kFloat32, {-1}}});
  ASSERT_TRUE(prelu.ok()) << prelu.status().to_string();
  EXPECT_EQ(prelu->shape, (Shape{-1, 3}));
  auto clip = infer("Clip", {{DType::kFloat32, {-1}}, {DType::kFloat32, {-1}}, {}});
  ASSERT_TRUE(clip.ok()) << clip.status().to_string();
  EXPECT_EQ(clip->shape, (Shape{-1}));
  auto cast = infer("Cast", {{DType::kFloat32, {-1, 2}}}, {{"to", 10}});
  ASSERT_TRUE(cast.ok()) << cast.status().to_string();
  EXPECT_EQ(*cast, (TensorType{DType::kFloat16, {-1, 2}}));
  auto like = infer("CastLike", {{DType::kInt8, {-1}}, {DType::kBFloat16, {}}});
  ASSERT_TRUE(like.ok()) << like.status().to_string();
  EXPECT_EQ(*like, (TensorType{DType::kBFloat16, {-1}}));
}

TEST(ElementwiseInfer, KnownMismatchStillFails) {
  auto r = infer("Mul", {{DType::kFloat32, {-1, 3}}, {DType::kFloat32, {1, 4}}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      r.status().message().find("Mul: cannot broadcast shapes [?, 3] and [1, 4] (node 'inf')"),
      std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace tensord::testing
