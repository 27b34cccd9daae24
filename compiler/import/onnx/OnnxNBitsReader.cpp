//===- OnnxNBitsReader.cpp - com.microsoft MatMulNBits weights ------------===//
// onnxruntime's block-quantized MatMul (what its 4-bit quantizer and
// onnxruntime-genai write): B [N, blocks, bytes] holds, per output row n
// and block of `block_size` inputs, `bits`-bit codes packed low bits first;
// scales [N * blocks] (float or float16); zero points either packed codes
// ([N, ceil(blocks * bits / 8)], uint8) or one float per block; absent,
// 2^(bits-1). W[n, k] = (code - zero) * scale, exactly as onnxruntime
// dequantizes it. llmc dequantizes to float32 at import (its passes
// quantize again to its own formats); g_idx (act-order) is refused.
//===----------------------------------------------------------------------===//
#include "compiler/import/onnx/OnnxRaiser.h"

namespace llmc::onnx_import {

std::shared_ptr<OwnedBuffer> Raiser::dequantizeNBits(const Linear &l) {
  const OnnxNode &mm = node(l.node);
  const int64_t bits = mm.ints.count("bits") ? mm.ints.at("bits") : 4;
  const int64_t block = mm.ints.count("block_size") ? mm.ints.at("block_size") : 0;
  const int64_t N = l.outDim, K = l.in;
  if ((bits != 4 && bits != 8 && bits != 2) || block < 16 || (block & (block - 1)) || N <= 0 ||
      K <= 0)
    fail(mm.describe() + ": bits " + std::to_string(bits) + ", block_size " +
         std::to_string(block) + ", N " + std::to_string(N) + ", K " + std::to_string(K) +
         " (llmc reads 2, 4 and 8 bits, power-of-two blocks >= 16)");
  if (mm.inputs.size() > 4 && !mm.inputs[4].empty())
    fail(mm.describe() + ": g_idx (act-order) is not read");
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8;
  const OnnxConstant &codes = *constant(mm.inputs[1]), &scales = *constant(mm.inputs[2]);
  const OnnxConstant *zeros =
      mm.inputs.size() > 3 && !mm.inputs[3].empty() ? constant(mm.inputs[3]) : nullptr;
  if (mm.inputs.size() > 3 && !mm.inputs[3].empty() && !zeros)
    fail(mm.describe() + ": its zero points are not a constant");
  const bool packedZeros = zeros && !zeros->isFloat();
  const int64_t zeroRow = packedZeros ? (blocks * bits + 7) / 8 : blocks;
  if (codes.type != OnnxType::Uint8 || codes.nbytes != N * blocks * blob ||
      !scales.isFloat() || scales.numElements() != N * blocks ||
      (zeros && zeros->numElements() != N * zeroRow))
    fail(mm.describe() + ": B, scales or zero points do not have the sizes N " +
         std::to_string(N) + ", K " + std::to_string(K) + ", block " + std::to_string(block) +
         " and " + std::to_string(bits) + " bits give");
  auto code = [&](const uint8_t *p, int64_t i) { // i-th code of a bitstream, low bits first
    const int64_t bit = i * bits;
    return int((p[bit / 8] >> (bit % 8)) & ((1 << bits) - 1));
  };
  auto buf = std::make_shared<OwnedBuffer>();
  buf->bytes.resize(size_t(N * K) * sizeof(float));
  float *w = reinterpret_cast<float *>(buf->bytes.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < blocks; ++b) {
      const float scale = float(scales.at(n * blocks + b));
      float zero = float(1 << (bits - 1));
      if (packedZeros)
        zero = float(code(zeros->data + n * zeroRow, b));
      else if (zeros)
        zero = float(zeros->at(n * blocks + b));
      const uint8_t *p = codes.data + (n * blocks + b) * blob;
      for (int64_t k = b * block; k < std::min(K, (b + 1) * block); ++k)
        w[n * K + k] = (float(code(p, k - b * block)) - zero) * scale;
    }
  claimed_.insert(canon(mm.inputs[1]));
  claimed_.insert(canon(mm.inputs[2]));
  if (zeros)
    claimed_.insert(canon(mm.inputs[3]));
  return buf;
}

} // namespace llmc::onnx_import
