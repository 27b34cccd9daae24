//===- OnnxNBitsReader.cpp - Quantized ONNX weights -----------------------===//
// Two forms, both dequantized to float32 at import exactly as onnxruntime
// computes them (llmc's own passes quantize again):
//
// 1. com.microsoft MatMulNBits:
// onnxruntime's block-quantized MatMul (what its 4-bit quantizer and
// onnxruntime-genai write): B [N, blocks, bytes] holds, per output row n
// and block of `block_size` inputs, `bits`-bit codes packed low bits first;
// scales [N * blocks] (float or float16); zero points either packed codes
// ([N, ceil(blocks * bits / 8)], uint8) or one float per block; absent,
// 2^(bits-1). W[n, k] = (code - zero) * scale, exactly as onnxruntime
// dequantizes it; g_idx (act-order) is refused.
// 2. MatMul(x, DequantizeLinear(q, scale, zero_point)) of a constant
// weight [in, out] (QDQ; onnxruntime's weight-only quantizer writes 4-bit
// codes with per-block scales at opset 21): W = (q - zero) * scale, scale
// and zero per tensor, per `axis` entry, or per `block_size` run along
// `axis`.
//===----------------------------------------------------------------------===//
#include "compiler/import/onnx/OnnxRaiser.h"

namespace llmc::onnx_import {

std::shared_ptr<OwnedBuffer> Raiser::dequantizeNBits(const Linear &l) {
  const OnnxNode &mm = node(l.node);
  const int64_t bits = mm.intAttr("bits", 4);
  const int64_t block = mm.intAttr("block_size", 0);
  const int64_t N = l.outDim, K = l.in;
  if ((bits != 4 && bits != 8 && bits != 2) || block < 16 || (block & (block - 1)) || N <= 0 ||
      K <= 0)
    fail(mm.describe() + ": bits " + std::to_string(bits) + ", block_size " +
         std::to_string(block) + ", N " + std::to_string(N) + ", K " + std::to_string(K) +
         " (llmc reads 2, 4 and 8 bits, power-of-two blocks >= 16)");
  if (mm.inputs.size() > 4 && !mm.input(4).empty())
    fail(mm.describe() + ": g_idx (act-order) is not read");
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8;
  const OnnxConstant &codes = *constant(mm.input(1)), &scales = *constant(mm.input(2));
  const OnnxConstant *zeros =
      mm.inputs.size() > 3 && !mm.input(3).empty() ? constant(mm.input(3)) : nullptr;
  if (mm.inputs.size() > 3 && !mm.input(3).empty() && !zeros)
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
  claimed_.insert(canon(mm.input(1)));
  claimed_.insert(canon(mm.input(2)));
  if (zeros)
    claimed_.insert(canon(mm.input(3)));
  return buf;
}

std::shared_ptr<OwnedBuffer> Raiser::dequantizeQdq(const Linear &l) {
  const OnnxNode &dq = node(l.dq);
  const OnnxConstant &q = *constant(dq.input(0)), *scale = constant(dq.input(1));
  const OnnxConstant *zero =
      dq.inputs.size() > 2 && !dq.input(2).empty() ? constant(dq.input(2)) : nullptr;
  const int64_t K = l.in, N = l.outDim;
  int64_t axis = dq.intAttr("axis", 1);
  axis = axis < 0 ? axis + 2 : axis;
  const int64_t block = dq.intAttr("block_size", 0);
  if (q.isFloat() || !scale || !scale->isFloat() || (axis != 0 && axis != 1) || block < 0 ||
      (dq.inputs.size() > 2 && !dq.input(2).empty() && !zero) ||
      (zero && zero->shape != scale->shape))
    fail(dq.describe() + ": not an integer constant with constant scales (and zero points of "
                         "the same shape)");
  const int64_t along = axis == 0 ? K : N;
  const bool perTensor = scale->numElements() == 1;
  const int64_t groups = block > 0 ? (along + block - 1) / block : along;
  if (!perTensor && scale->numElements() != groups * (axis == 0 ? N : K))
    fail(dq.describe() + ": scales of " + std::to_string(scale->numElements()) +
         " values do not fit a weight [" + std::to_string(K) + ", " + std::to_string(N) +
         "], axis " + std::to_string(axis) + ", block " + std::to_string(block));
  auto at = [&](int64_t i, int64_t j) { // the scale / zero index of weight [i, j]
    if (perTensor)
      return int64_t(0);
    if (block == 0)
      return axis == 0 ? i : j;
    return axis == 0 ? (i / block) * N + j : i * groups + j / block;
  };
  auto buf = std::make_shared<OwnedBuffer>();
  buf->bytes.resize(size_t(N * K) * sizeof(float));
  float *w = reinterpret_cast<float *>(buf->bytes.data());
  for (int64_t i = 0; i < K; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const int64_t s = at(i, j);
      const float z = zero ? float(zero->at(s)) : 0.0f;
      w[j * K + i] = (float(q.at(i * N + j)) - z) * float(scale->at(s));
    }
  claimed_.insert(canon(dq.input(0)));
  claimed_.insert(canon(dq.input(1)));
  if (zero)
    claimed_.insert(canon(dq.input(2)));
  return buf;
}

} // namespace llmc::onnx_import
