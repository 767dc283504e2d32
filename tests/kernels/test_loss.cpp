#include "kernels/op_test_util.h"

namespace tensord::testing {
namespace {

}  // namespace
}  // namespace tensord::testing
