// The streamed GEMM's Python module (streamed_gemm.py); the kernels are in streamed_gemm.h, which the decode step's
// own module (decode_step.cpp) includes too.
#include "streamed_gemm.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("pack", &pack, "weight [N, K] -> panels [N/16, K, 16]");
  module.def("linear", &streamed_linear, "x [M, K], panels, bias -> x W^T + bias");
}
