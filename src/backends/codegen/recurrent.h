// RNN, GRU and LSTM as a static loop of generated kernels and GEMMs (PlaidML's approach): the
// device-neutral half. A backend runs, per node call, with every command on one in-order
// queue and no host round trip per step:
//   init kernel (states from initial_h / initial_c or 0; Y_h, Y_c and, with sequence_lens,
//   Y zeroed) and the step kernel (steps[s] = s: each step's kernel reads its step number
//   from this buffer at offset s, so one compiled kernel serves every step);
//   XP[d] = X W[d]^T                                one GEMM per direction, all time steps;
//   per step s:  HR[d] = H[d] R[d]^T               one (batched over directions) GEMM,
//                GRU with linear_before_reset = 0 only: the reset kernel (RH = r . H), then
//                HR[d][:, 2H:3H] = RH[d] Rh[d]^T   a second GEMM;
//                the gate kernel                   (activations, biases, peepholes, the cell
//                                                  update; writes H, C, Y[t], Y_h, Y_c).
// Layouts of the scratch buffers (float32): XP [D][rows][G*H] with X's rows (t*B + b for
// layout 0, b*S + t for layout 1); HR [D][B][G*H]; H, C, RH [D][B][H]; steps [S] int32.
// Semantics follow the cpu reference (src/backends/cpu/kernels/rnn.cpp): outputs past an
// entry's sequence length are 0, an entry of length 0 has Y_h (Y_c) 0, the reverse direction
// runs over each entry's own length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/codegen/templates.h"

namespace tensord::codegen {

struct RecurrentPlan {
  enum Kind : uint8_t { kRnn, kGru, kLstm } kind = kRnn;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, gates = 1;
  int64_t layout = 0;
  bool reverse[2] = {false, true};  // per direction
  bool linear_before_reset = false;
  bool input_forget = false;
  bool bias = false, peepholes = false, lens = false, initial_h = false, initial_c = false;
  bool lens_int64 = false;
  bool y = false, y_h = false, y_c = false;  // which outputs the node asks for
  // The step's products H R^T inside the step kernels (one launch per step, two for GRU with
  // linear_before_reset = 0) instead of in HR from GEMMs: the state then ping-pongs between
  // two buffers (the kernels read H_{t-1} from one and write H_t to the other, an entry past
  // its length copying its state over). Set by the backend (a CPU device at batch 1-2).
  bool fused = false;
  int64_t state_numel() const { return dirs * batch * hidden; }
  int64_t gh() const { return gates * hidden; }
};

// The plan of an RNN / GRU / LSTM node for these input types (float32, static shapes), or
// UNIMPLEMENTED naming what the generated loop does not cover (clip, non-default
// activations, other dtypes), or INVALID_ARGUMENT for shapes that do not fit.
Result<RecurrentPlan> plan_recurrent(const Node& node, const std::vector<TensorType>& inputs);

// in: [initial_h] [initial_c] (as the plan has them); out: H, [C] (LSTM), [Y_h], [Y_c];
// n = state_numel().
TemplateKernel recurrent_init_kernel(const RecurrentPlan& p);
// out0[i] = 0 over n floats (Y before a run with sequence lengths).
TemplateKernel zero_kernel(int64_t n);
// out0[i] = i over n int32 (the step numbers).
TemplateKernel iota_kernel(int64_t n);
// GRU with linear_before_reset = 0: in: step, XP, HR, H, [B], [lens]; out: RH = r . H.
// Fused: in: step, XP, H_{t-1}, R, [B], [lens].
TemplateKernel recurrent_reset_kernel(const RecurrentPlan& p);
// in: step, XP, HR, [B], [P], [lens]; out: H, [C] (LSTM), [Y], [Y_h], [Y_c].
// Fused: in: step, XP, H_{t-1}, R, [RH] (GRU, linear_before_reset = 0), [B], [P], [lens];
// out: H_t, [C], [Y], [Y_h], [Y_c].
TemplateKernel recurrent_gate_kernel(const RecurrentPlan& p);

}  // namespace tensord::codegen
