//===- CudaAttentionSource.cpp - CUDA RoPE + KV append, flash decoding ----===//
// Template texts with the shape as constants (@H@ heads, @KV@ KV heads,
// @HD@ head size, @G@ query heads per KV head, @D@ = @HD@ / 32 dimensions
// per lane, @BLK@ positions per cache block) and the RoPE frequencies as a
// table of doubles, so the angle is computed as the CPU engine does (double
// position times double frequency, cos and sin rounded to float). The
// warp-wide sums go through llmcWarpAllSumF, so the host emulation
// (test/unit/CudaEmulation.h) replays them.
//===----------------------------------------------------------------------===//
#include "codegen/cuda/CudaAttentionSource.h"
#include "codegen/TemplateText.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace llmc::codegen {

namespace {

const char *kRopeTemplate = R"(
// RoPE (@STYLE@, base @THETA@) on @H@ query and @KV@ key heads of @HD@, k and v appended
// to the paged f16 cache
namespace {
__constant__ const double @ROPE@_freq[@HALF@] = {@FREQS@};
} // namespace
extern "C" __global__ void @ROPE@(const float *qkv, long long ldqkv, int T, const int *pos,
                                 const int *cacheSlot, const int *rowSeq, float *q, long long ldq,
                                 unsigned short *kpool, unsigned short *vpool,
                                 const int *blockTable, int maxBlocks) {
  const int t = blockIdx.x;
  if (t >= T)
    return;
  const float *src = qkv + (long long)t * ldqkv;
  const int p = pos[t];
  const int at = cacheSlot ? cacheSlot[t] : p; // the row's cache slot (its position unless
                                               // a KV policy evicted entries before it)
  const int seq = rowSeq ? rowSeq[t] : 0;
  const long long blk = blockTable[(long long)seq * maxBlocks + at / @BLK@];
  const long long slot = at % @BLK@;
  for (int i = threadIdx.x; i < (@H@ + @KV@) * @HALF@; i += blockDim.x) {
    const int head = i / @HALF@, j = i % @HALF@;
    const double a = (double)p * @ROPE@_freq[j];
    const float c = (float)cos(a), s = (float)sin(a);
    const int ia = @INTERLEAVED@ ? 2 * j : j, ib = @INTERLEAVED@ ? 2 * j + 1 : j + @HALF@;
    const float x0 = src[head * @HD@ + ia], x1 = src[head * @HD@ + ib];
    const float r0 = x0 * c - x1 * s, r1 = x0 * s + x1 * c;
    if (head < @H@) {
      float *d = q + (long long)t * ldq + head * @HD@;
      d[ia] = r0;
      d[ib] = r1;
    } else {
      unsigned short *d = kpool + ((blk * @KV@ + (head - @H@)) * @BLK@ + slot) * @HD@;
      d[ia] = llmcToHalf(r0);
      d[ib] = llmcToHalf(r1);
    }
  }
  for (int i = threadIdx.x; i < @KV@ * @HD@; i += blockDim.x) {
    const int kh = i / @HD@, d = i % @HD@;
    vpool[((blk * @KV@ + kh) * @BLK@ + slot) * @HD@ + d] =
        llmcToHalf(src[(@H@ + @KV@) * @HD@ + i]);
  }
}
)";

const char *kAttendTemplate = R"(
// Flash decoding over the paged cache (@POOL@ rows): @H@ heads, @KV@ KV heads of @HD@, one warp per
// (row, KV head, split), lane l holding dimensions l + 32 j (j < @D@); split s of
// nSplits covers positions [s len, (s + 1) len) of 0..pos, len = max(splitLen,
// ceil((pos + 1) / nSplits)), less the KV head's hole
extern "C" __global__ void __launch_bounds__(32)
@ATTEND@(const float *q, long long ldq, int T, const int *pos, const int *rowSeq,
         const int *hole, const @POOL@ *kpool, const @POOL@ *vpool,
         const int *blockTable, int maxBlocks, int nSplits, int splitLen, float *part) {
  const long long b = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int split = (int)(b % nSplits), kh = (int)((b / nSplits) % @KV@);
  const long long t = b / ((long long)nSplits * @KV@);
  if (t >= T)
    return;
  const int p = pos[t];
  const int seq = rowSeq ? rowSeq[t] : 0;
  // The positions 0..p are cut into nSplits splits of len >= splitLen each
  // (a step's split count is fixed: a captured graph replays it at every
  // length, and the chain of positions one warp walks stays short).
  const int per = (p + nSplits) / nSplits;
  const int len = per > splitLen ? per : splitLen;
  const int lo = split * len;
  const int hi = lo + len < p + 1 ? lo + len : p + 1;
  // Slots [holeLo, holeHi) of this KV head hold nothing (its policy kept
  // fewer entries than the layer's other heads).
  const int holeLo = hole ? hole[((long long)seq * @KV@ + kh) * 2] : 0;
  const int holeHi = hole ? hole[((long long)seq * @KV@ + kh) * 2 + 1] : 0;
  const float scale = @SCALE@f;
  float qv[@G@][@D@], acc[@G@][@D@], m[@G@], l[@G@];
#pragma unroll
  for (int g = 0; g < @G@; ++g) {
    m[g] = -3.0e38f;
    l[g] = 0.0f;
#pragma unroll
    for (int j = 0; j < @D@; ++j) {
      qv[g][j] = q[t * ldq + (kh * @G@ + g) * @HD@ + lane + 32 * j];
      acc[g][j] = 0.0f;
    }
  }
#pragma unroll 2
  for (int pp = lo; pp < hi; ++pp) {
    if (pp >= holeLo && pp < holeHi) {
      pp = holeHi - 1;
      continue;
    }
    const long long blk = blockTable[(long long)seq * maxBlocks + pp / @BLK@];
    const long long ent = (blk * @KV@ + kh) * @BLK@ + pp % @BLK@; // the entry's row
    float kf[@D@], vf[@D@];
@LOAD@
#pragma unroll
    for (int g = 0; g < @G@; ++g) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < @D@; ++j)
        s += qv[g][j] * kf[j];
      s = llmcWarpAllSumF(s) * scale;
      const float mNew = s > m[g] ? s : m[g];
      const float corr = expf(m[g] - mNew), e = expf(s - mNew);
      l[g] = l[g] * corr + e;
#pragma unroll
      for (int j = 0; j < @D@; ++j)
        acc[g][j] = acc[g][j] * corr + e * vf[j];
      m[g] = mNew;
    }
  }
#pragma unroll
  for (int g = 0; g < @G@; ++g) {
    float *dst = part + ((t * @H@ + kh * @G@ + g) * nSplits + split) * (@HD@ + 2);
    if (lane == 0) {
      dst[0] = m[g];
      dst[1] = l[g];
    }
#pragma unroll
    for (int j = 0; j < @D@; ++j)
      dst[2 + lane + 32 * j] = acc[g][j];
  }
}

// Merges the splits of each (row, head)
extern "C" __global__ void __launch_bounds__(32)
@COMBINE@(const float *part, int T, int nSplits, float *out, long long ldo@COMBINE_ARGS@) {
  const long long b = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const long long t = b / @H@;
  const int h = (int)(b % @H@);
  if (t >= T)
    return;
  const float *src = part + b * nSplits * (@HD@ + 2);
  float mMax = -3.0e38f;
  for (int s = 0; s < nSplits; ++s)
    if (src[s * (@HD@ + 2) + 1] > 0.0f && src[s * (@HD@ + 2)] > mMax)
      mMax = src[s * (@HD@ + 2)];
  float sum = 0.0f, acc[@D@];
#pragma unroll
  for (int j = 0; j < @D@; ++j)
    acc[j] = 0.0f;
  for (int s = 0; s < nSplits; ++s) {
    const float *ps = src + s * (@HD@ + 2);
    if (ps[1] > 0.0f) {
      const float w = expf(ps[0] - mMax);
      sum += w * ps[1];
#pragma unroll
      for (int j = 0; j < @D@; ++j)
        acc[j] += w * ps[2 + lane + 32 * j];
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
@FINISH@
}
)";

// The f16 entries' reads and the merge's last step.
const char *kF16Load = R"(#pragma unroll
    for (int j = 0; j < @D@; ++j) {
      kf[j] = llmcHalf(kpool[ent * @HD@ + lane + 32 * j]);
      vf[j] = llmcHalf(vpool[ent * @HD@ + lane + 32 * j]);
    })";
const char *kF16Finish = R"(#pragma unroll
  for (int j = 0; j < @D@; ++j)
    out[t * ldo + h * @HD@ + lane + 32 * j] = acc[j] * inv;)";

// PolyKV's: int8 key codes times their block's f16 scale; the value's 3-bit
// level times its norm / hd (the rotated domain); the merge rotates back.
const char *kPolyKvLoad = R"(    const unsigned char *kr = kpool + ent * @KB@, *vr = vpool + ent * @VB@;
    const float vn = llmcHalf(llmcU16(vr)) / (float)@HD@;
#pragma unroll
    for (int j = 0; j < @D@; ++j) {
      kf[j] = (float)(signed char)kr[lane + 32 * j] * llmcHalf(llmcU16(kr + @HD@ + 2 * j));
      const int bit = 96 * j + 3 * lane, sh = bit & 7;
      unsigned bits = vr[2 + (bit >> 3)];
      if (sh > 5)
        bits |= (unsigned)vr[3 + (bit >> 3)] << 8;
      vf[j] = vn * @PROPE@_level[(bits >> sh) & 7u];
    })";
const char *kPolyKvFinish = R"(#pragma unroll
  for (int j = 0; j < @D@; ++j)
    acc[j] *= inv;
  @PROPE@_fwht(acc, lane);
#pragma unroll
  for (int j = 0; j < @D@; ++j)
    out[t * ldo + h * @HD@ + lane + 32 * j] = acc[j] * signs[lane + 32 * j];)";

const char *kPolyKvTemplate = R"(
// PolyKV entries (runtime/src/kv/KvQuant.h) for @H@ heads, @KV@ KV heads of @HD@: a key is
// int8 codes in blocks of 32 with an f16 scale each (@KB@ bytes), a value its f16 norm and
// the 3-bit Lloyd-Max codes of its unit vector rotated by H D / sqrt(d) (@VB@ bytes); D is
// the layer's signs (@HD@ floats, an argument)
namespace {
__constant__ const double @PROPE@_freq[@HALF@] = {@FREQS@};
__constant__ const float @PROPE@_thr[7] = {-1.7480f, -1.0500f, -0.5006f, 0.0f,
                                          0.5006f,  1.0500f,  1.7480f};
__constant__ const float @PROPE@_level[8] = {-2.1519f, -1.3439f, -0.7560f, -0.2451f,
                                              0.2451f,  0.7560f,  1.3439f,  2.1519f};
} // namespace
// In-register Walsh-Hadamard transform of a warp's @HD@ values (lane l, register j:
// element l + 32 j), the stages in the host's order (runtime/src/kv/KvQuant.cpp fwht)
__device__ __forceinline__ void @PROPE@_fwht(float (&y)[@D@], int lane) {
  for (int len = 1; len < 32; len <<= 1)
#pragma unroll
    for (int j = 0; j < @D@; ++j) {
      const float o = llmcWarpXorF(y[j], len);
      y[j] = (lane & len) ? o - y[j] : y[j] + o;
    }
  for (int r = 1; r < @D@; r <<= 1)
#pragma unroll
    for (int j = 0; j < @D@; ++j)
      if (!(j & r)) {
        const float a = y[j], b = y[j + r];
        y[j] = a + b;
        y[j + r] = a - b;
      }
}
// RoPE as @ROPE@, the key and value of each KV head encoded by one warp into the caches
extern "C" __global__ void @PROPE@(const float *qkv, long long ldqkv, int T, const int *pos,
                                  const int *cacheSlot, const int *rowSeq, float *q,
                                  long long ldq, unsigned char *kpool, unsigned char *vpool,
                                  const int *blockTable, int maxBlocks, const float *signs) {
  const int t = blockIdx.x;
  if (t >= T)
    return;
  const float *src = qkv + (long long)t * ldqkv;
  const int p = pos[t];
  const int at = cacheSlot ? cacheSlot[t] : p;
  const int seq = rowSeq ? rowSeq[t] : 0;
  const long long blk = blockTable[(long long)seq * maxBlocks + at / @BLK@];
  const long long slot = at % @BLK@;
  for (int i = threadIdx.x; i < @H@ * @HALF@; i += blockDim.x) {
    const int head = i / @HALF@, j = i % @HALF@;
    const double a = (double)p * @PROPE@_freq[j];
    const float c = (float)cos(a), s = (float)sin(a);
    const int ia = @INTERLEAVED@ ? 2 * j : j, ib = @INTERLEAVED@ ? 2 * j + 1 : j + @HALF@;
    const float x0 = src[head * @HD@ + ia], x1 = src[head * @HD@ + ib];
    float *d = q + (long long)t * ldq + head * @HD@;
    d[ia] = x0 * c - x1 * s;
    d[ib] = x0 * s + x1 * c;
  }
  const int lane = threadIdx.x & 31;
  for (int kh = (int)(threadIdx.x >> 5); kh < @KV@; kh += (int)(blockDim.x >> 5)) {
    const float *ks = src + (@H@ + kh) * @HD@, *vs = src + (@H@ + @KV@ + kh) * @HD@;
    unsigned char *kd = kpool + ((blk * @KV@ + kh) * @BLK@ + slot) * @KB@;
    unsigned char *vd = vpool + ((blk * @KV@ + kh) * @BLK@ + slot) * @VB@;
#pragma unroll
    for (int j = 0; j < @D@; ++j) { // key block j: element lane + 32 j, rotated
      const int i = lane + 32 * j;
      const int f = @INTERLEAVED@ ? i / 2 : i % @HALF@;
      const int ia = @INTERLEAVED@ ? 2 * f : f, ib = @INTERLEAVED@ ? 2 * f + 1 : f + @HALF@;
      const double a = (double)p * @PROPE@_freq[f];
      const float c = (float)cos(a), s = (float)sin(a);
      const float x0 = ks[ia], x1 = ks[ib];
      const float x = i == ia ? x0 * c - x1 * s : x0 * s + x1 * c;
      float amax = fabsf(x);
      for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, llmcWarpXorF(amax, o));
      const unsigned short hs = llmcToHalf(amax / 127.0f);
      const float stored = llmcHalf(hs);
      const float inv = stored > 0.0f ? 1.0f / stored : 0.0f;
      int code = (int)roundf(x * inv); // half away from zero, as lround
      code = code < -127 ? -127 : code > 127 ? 127 : code;
      kd[32 * j + lane] = (unsigned char)(signed char)code;
      if (lane == 0) {
        kd[@HD@ + 2 * j] = (unsigned char)(hs & 255);
        kd[@HD@ + 2 * j + 1] = (unsigned char)(hs >> 8);
      }
    }
    float y[@D@];
    double n2 = 0.0;
#pragma unroll
    for (int j = 0; j < @D@; ++j) {
      y[j] = vs[lane + 32 * j];
      n2 += (double)y[j] * y[j];
    }
    const float norm = (float)sqrt(llmcWarpAllSum(n2));
    const float inv = norm > 0.0f ? 1.0f / norm : 0.0f;
#pragma unroll
    for (int j = 0; j < @D@; ++j)
      y[j] = y[j] * inv * signs[lane + 32 * j];
    @PROPE@_fwht(y, lane);
    if (lane == 0) {
      const unsigned short hn = llmcToHalf(norm);
      vd[0] = (unsigned char)(hn & 255);
      vd[1] = (unsigned char)(hn >> 8);
    }
#pragma unroll
    for (int j = 0; j < @D@; ++j) { // 32 codes of 3 bits: three words, little-endian
      unsigned idx = 0;
      while (idx < 7 && y[j] > @PROPE@_thr[idx])
        ++idx;
      const int bit = 3 * lane, w = bit >> 5, sh = bit & 31;
      const unsigned lo = idx << sh, hi = sh > 29 ? idx >> (32 - sh) : 0u;
      for (int m = 0; m < 3; ++m) { // disjoint bits: the sum is the OR, exact in double
        const unsigned mine = (m == w ? lo : 0u) | (m == w + 1 ? hi : 0u);
        const unsigned word = (unsigned)llmcWarpAllSum((double)mine);
        if (lane < 4)
          vd[2 + 12 * j + 4 * m + lane] = (unsigned char)((word >> (8 * lane)) & 255);
      }
    }
  }
}

)";

std::string exact(double v) {
  char buf[40];
  snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string thetaName(double theta) {
  char buf[40];
  snprintf(buf, sizeof buf, "%.10g", theta);
  std::string s = buf;
  for (char &c : s)
    if (c == '.' || c == '+' || c == '-')
      c = 'p';
  return s;
}

} // namespace

std::string CudaAttentionSpec::ropeSymbol() const {
  return "llmc_cu_rope_kv_" + std::to_string(heads) + "_" + std::to_string(kvHeads) + "_" +
         std::to_string(headDim) + "_" + std::string(spelling(style)) + "_" + thetaName(theta);
}

std::string CudaAttentionSpec::attendSymbol() const {
  return "llmc_cu_attend_" + std::to_string(heads) + "_" + std::to_string(kvHeads) + "_" +
         std::to_string(headDim);
}

std::string CudaAttentionSpec::polyKvRopeSymbol() const {
  return "llmc_cu_pkv_rope_" + ropeSymbol().substr(std::string("llmc_cu_rope_kv_").size());
}

std::string CudaAttentionSpec::polyKvAttendSymbol() const {
  return "llmc_cu_pkv_attend_" + std::to_string(heads) + "_" + std::to_string(kvHeads) + "_" +
         std::to_string(headDim);
}

std::string CudaAttentionSpec::polyKvCombineSymbol() const {
  return "llmc_cu_pkv_combine_" + std::to_string(heads) + "_" + std::to_string(headDim);
}

std::string CudaAttentionSpec::combineSymbol() const {
  return "llmc_cu_attend_combine_" + std::to_string(heads) + "_" + std::to_string(headDim);
}

bool canGenerateCudaAttention(const CudaAttentionSpec &s, std::string *why) {
  std::string w;
  if (s.heads < 1 || s.kvHeads < 1 || s.heads % s.kvHeads != 0)
    w = "heads must be a positive multiple of the KV heads";
  else if (s.heads / s.kvHeads > 8)
    w = "more than 8 query heads per KV head";
  else if (s.headDim < 32 || s.headDim > 256 || s.headDim % 32 != 0)
    w = "head size must be a multiple of 32 up to 256";
  else if (!(s.theta > 0) || !std::isfinite(s.theta))
    w = "RoPE base must be positive";
  if (why)
    *why = w;
  return w.empty();
}

bool canGenerateCudaPolyKv(const CudaAttentionSpec &s, std::string *why) {
  std::string w;
  if (!canGenerateCudaAttention(s, &w))
    ;
  else if ((s.headDim & (s.headDim - 1)) != 0)
    w = "PolyKV's rotation needs a power-of-two head size";
  if (why)
    *why = w;
  return w.empty();
}

std::string cudaAttentionSource(const CudaAttentionSpec &s) {
  std::string why;
  if (!canGenerateCudaAttention(s, &why))
    throw std::invalid_argument("no CUDA attention kernels for " + std::to_string(s.heads) +
                                " heads, " + std::to_string(s.kvHeads) + " KV heads of " +
                                std::to_string(s.headDim) + ": " + why);
  const int64_t half = s.headDim / 2;
  std::string freqs;
  for (int64_t i = 0; i < half; ++i) // as ops::ropeFrequencies
    freqs += (i ? ", " : "") + exact(std::pow(s.theta, -2.0 * double(i) / double(s.headDim)));
  // The attention and merge kernels over f16 entries, and over PolyKV's.
  auto attend = [](const std::string &attendName, const std::string &combineName,
                   const char *pool, const char *load, const char *combineArgs,
                   const char *finish) {
    std::string k = replaceAll(kAttendTemplate, "@LOAD@", load);
    k = replaceAll(k, "@FINISH@", finish);
    k = replaceAll(k, "@ATTEND@", attendName);
    k = replaceAll(k, "@COMBINE@", combineName);
    k = replaceAll(k, "@COMBINE_ARGS@", combineArgs);
    return replaceAll(k, "@POOL@", pool);
  };
  std::string out = replaceAll(kRopeTemplate, "@FREQS@", freqs) +
                    attend(s.attendSymbol(), s.combineSymbol(), "unsigned short", kF16Load, "",
                           kF16Finish);
  if (s.polyKv) {
    if (!canGenerateCudaPolyKv(s, &why))
      throw std::invalid_argument("no CUDA PolyKV kernels for head size " +
                                  std::to_string(s.headDim) + ": " + why);
    out += replaceAll(kPolyKvTemplate, "@FREQS@", freqs) +
           attend(s.polyKvAttendSymbol(), s.polyKvCombineSymbol(), "unsigned char", kPolyKvLoad,
                  ", const float *signs", kPolyKvFinish);
    out = replaceAll(out, "@PROPE@", s.polyKvRopeSymbol());
    out = replaceAll(out, "@KB@", std::to_string(s.headDim + s.headDim / 16));
    out = replaceAll(out, "@VB@", std::to_string(2 + 3 * s.headDim / 8));
  }
  out = replaceAll(out, "@ROPE@", s.ropeSymbol());
  out = replaceAll(out, "@STYLE@", std::string(spelling(s.style)));
  out = replaceAll(out, "@INTERLEAVED@", s.style == RopeStyle::Interleaved ? "true" : "false");
  out = replaceAll(out, "@THETA@", exact(s.theta));
  out = replaceAll(out, "@SCALE@", exact(float(1.0 / std::sqrt(double(s.headDim)))));
  out = replaceAll(out, "@HALF@", std::to_string(half));
  out = replaceAll(out, "@HD@", std::to_string(s.headDim));
  out = replaceAll(out, "@H@", std::to_string(s.heads));
  out = replaceAll(out, "@KV@", std::to_string(s.kvHeads));
  out = replaceAll(out, "@G@", std::to_string(s.heads / s.kvHeads));
  out = replaceAll(out, "@D@", std::to_string(s.headDim / 32));
  out = replaceAll(out, "@BLK@", std::to_string(kCudaKvBlock));
  return out;
}

} // namespace llmc::codegen
