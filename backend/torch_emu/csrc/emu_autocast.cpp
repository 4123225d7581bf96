// Autocast on emu: torch's mixed-precision policy for accelerators, on the
// AutocastPrivateUse1 dispatch key.
//
// A translation unit of its own because ATen/autocast_mode.h brings in the
// whole of ATen's operator headers; the core (emu_core.cpp) includes only the
// per-operator headers it needs, and the two compile side by side.
//
// The op lists and the cast wrappers are torch's own (AT_FORALL_* and
// KERNEL_PRIVATEUSEONE in ATen/autocast_mode.h, which exist so that a
// PrivateUse1 backend applies the same policy as CUDA):
//   lower_precision_fp  matmuls, convolutions, linear, RNN cells: floating
//                       inputs cast to the autocast dtype (float16 or bfloat16)
//   fp32                ops that lose accuracy in 16 bits: inputs cast to float32
//   fp32_set_opt_dtype  reductions with a dtype argument: run with dtype=float32
//   fp32_append_dtype   norm: redispatched to the overload with a dtype
//   promote             ops with several inputs: all cast to the widest of them
// and, as on CUDA, binary_cross_entropy is refused under autocast.  Every
// other op passes through (the Python package registers a fallthrough
// fallback for the key).  torch's wrappers do the casting and the weight-cast
// cache (cache_enabled) themselves.
//
// The kernels are registered when Python calls emu::register_autocast(), not
// at load time, so that a planted bug can leave emu without them.

#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <memory>

namespace emu {
namespace {

// The signatures in AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE name these unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

at::Tensor refuse_binary_cross_entropy(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast on emu: their inputs are probabilities, which 16-bit floats round "
              "to 0 or 1. Combine the sigmoid with the loss "
              "(binary_cross_entropy_with_logits, BCEWithLogitsLoss), which autocast runs in "
              "float32, or compute the loss outside the autocast region.");
}

// Named `m`: torch's KERNEL_* macros register through a torch::Library of that name.
void register_policy(torch::Library& m) {
#define EMU_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define EMU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define EMU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define EMU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(EMU_LOWER_PRECISION_FP)
  AT_FORALL_FP32(EMU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(EMU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(EMU_PROMOTE)
#undef EMU_LOWER_PRECISION_FP
#undef EMU_FP32
#undef EMU_FP32_SET_OPT_DTYPE
#undef EMU_PROMOTE
  m.impl("aten::binary_cross_entropy", TORCH_FN(refuse_binary_cross_entropy));
}

// Held for the life of the process: destroying a Library deregisters its kernels.
std::unique_ptr<torch::Library> autocast_library;

void register_autocast() {
  if (autocast_library) {
    return;
  }
  auto library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutocastPrivateUse1, __FILE__, __LINE__);
  register_policy(*library);
  autocast_library = std::move(library);
}

bool autocast_registered() { return autocast_library != nullptr; }

TORCH_LIBRARY_FRAGMENT(emu, m) {
  m.def("register_autocast() -> ()", TORCH_FN(register_autocast));
  m.def("autocast_registered() -> bool", TORCH_FN(autocast_registered));
}

}  // namespace
}  // namespace emu
