//===- CodegenOpKernelTest.cpp - Generated op kernels vs the library -------===//
// The plan's non-product kernels as generated (codegen/cpu/CpuOpKernels.h),
// built for the baseline x86-64 level and this CPU's, against the runtime's
// library ops and double-precision references: RMSNorm (odd widths), SiLU
// and GELU gates (lengths with and without a partial vector), RoPE (both
// styles, two head shapes, large positions), attention over f32 rows (head
// sizes with and without a multiple of 8, 1 to 300 keys, a dominant key),
// embedding lookups in every generated format (grouped integers of 2 to 8
// bits included), the add.
//===----------------------------------------------------------------------===//
#include "codegen/cpu/CpuKernelSource.h"
#include "codegen/cpu/CpuOpKernels.h"
#include "llmc/codegen.h"
#include "codegen/cpu/HostCompiler.h"
#include "llmc/dtype.h"
#include "../../runtime/src/exec/Ops.h"
#include "../../runtime/src/kernels/kv_q8_row.h"
#include "llmc/kv_row_type.h"
#include "GeneratedObject.h"

#include "MissingInput.h"
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace llmc;
using namespace llmc::codegen;
using llmc::cgtest::GeneratedObject;
using Spec = OpKernelSpec;

namespace {

Spec rmsNorm(int64_t cols) {
  Spec s;
  s.kind = Spec::Kind::RmsNorm;
  s.cols = cols;
  return s;
}
Spec gate(const char *act) {
  Spec s;
  s.kind = Spec::Kind::Gate;
  s.activation = act;
  return s;
}
Spec rope(int64_t h, int64_t kv, int64_t hd, double theta, bool interleaved) {
  Spec s;
  s.kind = Spec::Kind::Rope;
  s.heads = h;
  s.kvHeads = kv;
  s.headDim = hd;
  s.theta = theta;
  s.interleaved = interleaved;
  return s;
}
Spec attend(int64_t hd) {
  Spec s;
  s.kind = Spec::Kind::AttendF32;
  s.headDim = hd;
  return s;
}
Spec embed(DType t, int64_t cols) {
  Spec s;
  s.kind = Spec::Kind::Embed;
  s.dtype = t;
  s.cols = cols;
  return s;
}

/// (group, head_dim) of the grouped (GQA) attention kernels: groups with
/// one, two and three heads per score pass (8 = 2 x 4 passes).
const std::vector<std::pair<int64_t, int64_t>> kGroups = {{2, 8}, {3, 64}, {4, 64}, {8, 16}, {2, 32}};
Spec groupAttend(int64_t group, int64_t hd, bool rows) {
  Spec s;
  s.kind = rows ? Spec::Kind::AttendF32RowsGroup : Spec::Kind::AttendF32Group;
  s.heads = group;
  s.headDim = hd;
  return s;
}

const std::vector<int64_t> kNormWidths = {7, 64, 576, 1001};
const std::vector<int64_t> kHeadDims = {6, 8, 64};
const std::vector<std::pair<DType, int64_t>> kEmbeds = {
    {DType::F32, 33}, {DType::F16, 33}, {DType::BF16, 64},
    {DType::Q8_0, 96}, {DType::Q4_0, 96}, {DType::Q4_1, 576}, {DType::Q5_0, 96}, {DType::Q5_1, 576},
    {groupedIntDType(4, true, 32), 576}, {groupedIntDType(4, false, 64), 576},
    {groupedIntDType(3, false, 128), 256}, {groupedIntDType(2, true, 64), 192},
    {groupedIntDType(8, true, 32), 96}, {groupedIntDType(5, false, 32), 64}};

std::vector<Spec> allSpecs() {
  std::vector<Spec> ops;
  for (int64_t w : kNormWidths)
    ops.push_back(rmsNorm(w));
  ops.push_back(gate("silu"));
  ops.push_back(gate("gelu"));
  for (bool inter : {false, true}) {
    ops.push_back(rope(3, 1, 8, 10000.0, inter));
    ops.push_back(rope(9, 3, 64, 100000.0, inter));
  }
  for (int64_t hd : kHeadDims) {
    ops.push_back(attend(hd));
    Spec rows = attend(hd);
    rows.kind = Spec::Kind::AttendF32Rows;
    ops.push_back(rows);
  }
  for (auto [g, hd] : kGroups) {
    if (std::find(kHeadDims.begin(), kHeadDims.end(), hd) == kHeadDims.end())
      ops.push_back(attend(hd));
    ops.push_back(groupAttend(g, hd, false));
    ops.push_back(groupAttend(g, hd, true));
    Spec half = groupAttend(g, hd, true);
    half.kind = Spec::Kind::AttendF16RowsGroup;
    ops.push_back(half);
    if (hd % 32 == 0) {
      Spec q8 = groupAttend(g, hd, true);
      q8.kind = Spec::Kind::AttendQ8RowsGroup;
      ops.push_back(q8);
    }
  }
  for (auto [t, c] : kEmbeds)
    ops.push_back(embed(t, c));
  Spec add;
  add.kind = Spec::Kind::Add;
  ops.push_back(add);
  return ops;
}

class OpKernels : public ::testing::Test {
protected:
  void SetUp() override {
  }
  std::mt19937 rng{23};
  std::normal_distribution<float> nd{0.0f, 1.0f};
  std::vector<float> randoms(int64_t n, float scale = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float &x : v)
      x = scale * nd(rng);
    return v;
  }
};

/// Each level's object, built once for the whole suite.
const std::vector<std::unique_ptr<GeneratedObject>> &objects() {
  static std::vector<std::unique_ptr<GeneratedObject>> objs = [] {
    std::vector<std::unique_ptr<GeneratedObject>> v;
    const std::string src = kernelSource({}, allSpecs());
    for (IsaLevel l : cgtest::testLevels()) {
      v.push_back(std::make_unique<GeneratedObject>());
      cgtest::loadGenerated(*v.back(), src, l);
    }
    return v;
  }();
  return objs;
}

} // namespace

TEST_F(OpKernels, RmsNormMatchesTheLibrary) {
  for (const auto &obj : objects())
    for (int64_t D : kNormWidths) {
      auto fn = obj->fn<RmsNormFn>(rmsNorm(D).symbol());
      ASSERT_NE(fn, nullptr) << rmsNorm(D).symbol();
      const int64_t rows = 3;
      auto x = randoms(rows * D, 4.0f), w = randoms(D);
      std::vector<float> got(size_t(rows * D)), want(size_t(rows * D));
      fn(x.data(), w.data(), got.data(), rows, 1e-5f);
      ops::rmsNorm(x.data(), w.data(), want.data(), rows, D, 1e-5f);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-6f * std::fabs(want[i]) + 1e-7f) << "D " << D << " at " << i;
    }
}

TEST_F(OpKernels, GatesMatchTheLibrary) {
  for (const auto &obj : objects())
    for (const char *act : {"silu", "gelu"}) {
      auto fn = obj->fn<GateFn>(gate(act).symbol());
      ASSERT_NE(fn, nullptr);
      for (int64_t n : {1, 8, 13, 1536}) {
        auto g = randoms(n, 6.0f), u = randoms(n);
        if (n > 3) { // the clamped ends of the exp
          g[0] = -120.0f;
          g[1] = 95.0f;
          g[2] = -87.5f;
        }
        std::vector<float> want = g;
        ops::gatedActivation(std::string(act) == "silu" ? Activation::SiLU : Activation::GELU,
                             want.data(), u.data(), n);
        fn(g.data(), u.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_FALSE(std::isnan(g[size_t(i)])) << act << " n " << n << " at " << i;
          ASSERT_NEAR(g[size_t(i)], want[size_t(i)], 1e-6f * std::fabs(want[size_t(i)]) + 1e-7f)
              << act << " n " << n << " at " << i;
        }
      }
    }
}

TEST_F(OpKernels, RopeRotatesQAndKAndCopiesV) {
  for (const auto &obj : objects())
    for (const Spec &s : {rope(3, 1, 8, 10000.0, false), rope(3, 1, 8, 10000.0, true),
                          rope(9, 3, 64, 100000.0, false), rope(9, 3, 64, 100000.0, true)}) {
      auto fn = obj->fn<RopeFn>(s.symbol());
      ASSERT_NE(fn, nullptr) << s.symbol();
      const int64_t qd = s.heads * s.headDim, kvd = s.kvHeads * s.headDim;
      const int64_t ld = qd + 2 * kvd + 5, T = 3, pos = 4093;
      auto qkv = randoms(T * ld);
      std::vector<float> q(size_t(T * qd)), kv(size_t(T * 2 * kvd));
      fn(qkv.data(), ld, q.data(), kv.data(), T, pos);
      const std::vector<double> freq = ops::ropeFrequencies(s.theta, s.headDim);
      const RopeStyle style = s.interleaved ? RopeStyle::Interleaved : RopeStyle::Half;
      std::vector<float> cs(size_t(s.headDim));
      for (int64_t t = 0; t < T; ++t) {
        std::vector<float> wq(qkv.begin() + t * ld, qkv.begin() + t * ld + qd);
        std::vector<float> wk(qkv.begin() + t * ld + qd, qkv.begin() + t * ld + qd + kvd);
        ops::applyRope(wq.data(), s.heads, s.headDim, pos + t, freq, style, cs.data());
        ops::applyRope(wk.data(), s.kvHeads, s.headDim, pos + t, freq, style, cs.data());
        for (int64_t i = 0; i < qd; ++i)
          ASSERT_NEAR(q[size_t(t * qd + i)], wq[size_t(i)], 1e-5f) << s.symbol() << " q " << i;
        for (int64_t i = 0; i < kvd; ++i) {
          ASSERT_NEAR(kv[size_t(t * 2 * kvd + i)], wk[size_t(i)], 1e-5f) << s.symbol() << " k " << i;
          ASSERT_EQ(kv[size_t(t * 2 * kvd + kvd + i)], qkv[size_t(t * ld + qd + kvd + i)])
              << s.symbol() << " v " << i;
        }
      }
    }
}

/// Rows of k and v (n rows of hd) stored in reverse order in ks / vs, with
/// kp[j] / vp[j] pointing at row j: a paged cache's scattered rows.
static void scatterReversed(const std::vector<float> &k, const std::vector<float> &v, int64_t n,
                            int64_t hd, std::vector<float> &ks, std::vector<float> &vs,
                            std::vector<const float *> &kp, std::vector<const float *> &vp) {
  ks.resize(k.size());
  vs.resize(v.size());
  kp.resize(size_t(n));
  vp.resize(size_t(n));
  for (int64_t j = 0; j < n; ++j) {
    std::copy_n(k.data() + j * hd, hd, ks.data() + (n - 1 - j) * hd);
    std::copy_n(v.data() + j * hd, hd, vs.data() + (n - 1 - j) * hd);
    kp[size_t(j)] = ks.data() + (n - 1 - j) * hd;
    vp[size_t(j)] = vs.data() + (n - 1 - j) * hd;
  }
}

// The rows-by-pointer kernel (paged caches) on rows scattered in reverse
// order gives bit for bit what the contiguous kernel gives.
TEST_F(OpKernels, AttentionOverRowPointersEqualsContiguousBitForBit) {
  for (const auto &obj : objects())
    for (int64_t hd : kHeadDims) {
      Spec rs = attend(hd);
      rs.kind = Spec::Kind::AttendF32Rows;
      auto flat = obj->fn<AttendFn>(attend(hd).symbol());
      auto rows = obj->fn<AttendRowsFn>(rs.symbol());
      ASSERT_NE(rows, nullptr) << rs.symbol();
      for (int64_t n : {1, 4, 7, 33}) {
        auto q = randoms(hd, 2.0f), k = randoms(n * hd), v = randoms(n * hd);
        std::vector<float> ks, vs;
        std::vector<const float *> kp, vp;
        scatterReversed(k, v, n, hd, ks, vs, kp, vp);
        std::vector<float> w1(static_cast<size_t>(n)), w2(w1), o1(static_cast<size_t>(hd)), o2(o1);
        flat(q.data(), k.data(), v.data(), n, w1.data(), o1.data());
        rows(q.data(), kp.data(), vp.data(), n, w2.data(), o2.data());
        ASSERT_EQ(w1, w2) << rs.symbol() << " n " << n;
        ASSERT_EQ(o1, o2) << rs.symbol() << " n " << n;
      }
    }
}

// The GQA-group kernels (contiguous rows and rows by pointer, scattered in
// reverse order) give each head of the group bit for bit what the per-head
// kernel gives, probabilities included (at rows ldw apart).
TEST_F(OpKernels, GroupedAttentionEqualsPerHeadBitForBit) {
  for (const auto &obj : objects())
    for (auto [G, hd] : kGroups) {
      auto one = obj->fn<AttendFn>(attend(hd).symbol());
      auto flat = obj->fn<AttendGroupFn>(groupAttend(G, hd, false).symbol());
      auto rows = obj->fn<AttendRowsGroupFn>(groupAttend(G, hd, true).symbol());
      ASSERT_NE(flat, nullptr) << groupAttend(G, hd, false).symbol();
      ASSERT_NE(rows, nullptr) << groupAttend(G, hd, true).symbol();
      for (int64_t n : {1, 3, 4, 7, 33, 300}) {
        auto q = randoms(G * hd, 2.0f), k = randoms(n * hd), v = randoms(n * hd);
        std::vector<float> ks, vs;
        std::vector<const float *> kp, vp;
        scatterReversed(k, v, n, hd, ks, vs, kp, vp);
        const int64_t ldw = n + 5;
        std::vector<float> wf(size_t(G * ldw)), wr(wf), of(size_t(G * hd)), orr(of);
        flat(q.data(), k.data(), v.data(), n, wf.data(), ldw, of.data());
        rows(q.data(), kp.data(), vp.data(), n, wr.data(), ldw, orr.data());
        for (int64_t g = 0; g < G; ++g) {
          std::vector<float> w1(static_cast<size_t>(n)), o1(static_cast<size_t>(hd));
          one(q.data() + g * hd, k.data(), v.data(), n, w1.data(), o1.data());
          for (int64_t j = 0; j < n; ++j) {
            ASSERT_EQ(wf[size_t(g * ldw + j)], w1[size_t(j)]) << G << "x" << hd << " n " << n;
            ASSERT_EQ(wr[size_t(g * ldw + j)], w1[size_t(j)]) << G << "x" << hd << " n " << n;
          }
          for (int64_t d = 0; d < hd; ++d) {
            ASSERT_EQ(of[size_t(g * hd + d)], o1[size_t(d)]) << G << "x" << hd << " n " << n << " g " << g;
            ASSERT_EQ(orr[size_t(g * hd + d)], o1[size_t(d)]) << G << "x" << hd << " n " << n << " g " << g;
          }
        }
      }
    }
}

// The f16 rows-by-pointer group kernel (paged caches on an f16 pool) gives
// bit for bit what the f32 one gives on the same rows widened to f32, and
// reads what the rows hold (all of n's tails: 4-row passes and the rest).
TEST_F(OpKernels, HalfRowGroupAttentionEqualsF32OnWidenedRows) {
  for (const auto &obj : objects())
    for (auto [G, hd] : kGroups) {
      Spec hs = groupAttend(G, hd, true);
      hs.kind = Spec::Kind::AttendF16RowsGroup;
      auto rows = obj->fn<AttendRowsGroupFn>(groupAttend(G, hd, true).symbol());
      auto half = obj->fn<AttendRowsGroupF16Fn>(hs.symbol());
      ASSERT_NE(half, nullptr) << hs.symbol();
      for (int64_t n : {1, 3, 4, 7, 33, 300}) {
        auto q = randoms(G * hd, 2.0f), k = randoms(n * hd), v = randoms(n * hd);
        std::vector<uint16_t> kh(k.size()), vh(v.size());
        for (size_t i = 0; i < k.size(); ++i) {
          kh[i] = floatToHalf(k[i]);
          vh[i] = floatToHalf(v[i]);
          k[i] = halfToFloat(kh[i]);
          v[i] = halfToFloat(vh[i]);
        }
        std::vector<float> ks, vs;
        std::vector<const float *> kp, vp;
        scatterReversed(k, v, n, hd, ks, vs, kp, vp);
        std::vector<const uint16_t *> khp(static_cast<size_t>(n)), vhp(khp);
        for (int64_t j = 0; j < n; ++j) { // the f16 rows in order
          khp[size_t(j)] = kh.data() + j * hd;
          vhp[size_t(j)] = vh.data() + j * hd;
        }
        const int64_t ldw = n + 2;
        std::vector<float> w1(size_t(G * ldw)), w2(w1), o1(size_t(G * hd)), o2(o1);
        rows(q.data(), kp.data(), vp.data(), n, w1.data(), ldw, o1.data());
        half(q.data(), khp.data(), vhp.data(), n, w2.data(), ldw, o2.data());
        ASSERT_EQ(w1, w2) << hs.symbol() << " n " << n;
        ASSERT_EQ(o1, o2) << hs.symbol() << " n " << n;
      }
    }
}

// The q8_0 rows-by-pointer group kernel (paged caches on a Q8 pool) gives
// bit for bit what the f32 one gives on the same rows decoded by the
// runtime (kernels::floatRowQ8), over rows of 68 bytes (not 4-aligned).
TEST_F(OpKernels, Q8RowGroupAttentionEqualsF32OnDecodedRows) {
  int tested = 0;
  for (const auto &obj : objects())
    for (auto [G, hd] : kGroups) {
      if (hd % 32)
        continue;
      Spec qs = groupAttend(G, hd, true);
      qs.kind = Spec::Kind::AttendQ8RowsGroup;
      auto rows = obj->fn<AttendRowsGroupFn>(groupAttend(G, hd, true).symbol());
      auto q8 = obj->fn<AttendRowsGroupQ8Fn>(qs.symbol());
      ASSERT_NE(q8, nullptr) << qs.symbol();
      const int64_t rb = kvRowBytes(KvRowType::Q8, hd);
      for (int64_t n : {1, 3, 4, 7, 33, 300}) {
        auto q = randoms(G * hd, 2.0f), k = randoms(n * hd, 3.0f), v = randoms(n * hd);
        std::vector<uint8_t> kq(size_t(n * rb)), vq(kq.size());
        std::vector<const uint8_t *> kqp(static_cast<size_t>(n)), vqp(kqp);
        for (int64_t j = 0; j < n; ++j) {
          kernels::q8Row(k.data() + j * hd, hd, kq.data() + j * rb);
          kernels::q8Row(v.data() + j * hd, hd, vq.data() + j * rb);
          kernels::floatRowQ8(kq.data() + j * rb, hd, k.data() + j * hd);
          kernels::floatRowQ8(vq.data() + j * rb, hd, v.data() + j * hd);
          kqp[size_t(j)] = kq.data() + j * rb;
          vqp[size_t(j)] = vq.data() + j * rb;
        }
        std::vector<float> ks, vs;
        std::vector<const float *> kp, vp;
        scatterReversed(k, v, n, hd, ks, vs, kp, vp);
        const int64_t ldw = n + 2;
        std::vector<float> w1(size_t(G * ldw)), w2(w1), o1(size_t(G * hd)), o2(o1);
        rows(q.data(), kp.data(), vp.data(), n, w1.data(), ldw, o1.data());
        q8(q.data(), kqp.data(), vqp.data(), n, w2.data(), ldw, o2.data());
        ASSERT_EQ(w1, w2) << qs.symbol() << " n " << n;
        ASSERT_EQ(o1, o2) << qs.symbol() << " n " << n;
        ++tested;
      }
    }
  EXPECT_GT(tested, 0);
}

TEST_F(OpKernels, AttentionMatchesADoubleReference) {
  for (const auto &obj : objects())
    for (int64_t hd : kHeadDims) {
      auto fn = obj->fn<AttendFn>(attend(hd).symbol());
      ASSERT_NE(fn, nullptr) << attend(hd).symbol();
      for (int64_t n : {1, 3, 5, 17, 300}) {
        auto q = randoms(hd, 2.0f), k = randoms(n * hd), v = randoms(n * hd);
        if (n > 4) // one dominant key: scores far apart
          for (int64_t d = 0; d < hd; ++d)
            k[size_t(2 * hd + d)] = 8.0f * q[size_t(d)];
        std::vector<float> w(static_cast<size_t>(n), -1.0f), out(static_cast<size_t>(hd));
        fn(q.data(), k.data(), v.data(), n, w.data(), out.data());
        std::vector<double> p(static_cast<size_t>(n));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t d = 0; d < hd; ++d)
            s += double(q[size_t(d)]) * k[size_t(j * hd + d)];
          p[size_t(j)] = s / std::sqrt(double(hd));
          mx = std::max(mx, p[size_t(j)]);
        }
        for (double &x : p)
          sum += x = std::exp(x - mx);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_NEAR(w[size_t(j)], p[size_t(j)] / sum, 2e-6) << "hd " << hd << " n " << n << " w " << j;
        for (int64_t d = 0; d < hd; ++d) {
          double o = 0;
          for (int64_t j = 0; j < n; ++j)
            o += p[size_t(j)] / sum * v[size_t(j * hd + d)];
          ASSERT_NEAR(out[size_t(d)], o, 2e-5) << "hd " << hd << " n " << n << " d " << d;
        }
      }
    }
}

TEST_F(OpKernels, EmbeddingLookupsDecodeEveryGeneratedFormat) {
  for (const auto &obj : objects())
    for (auto [t, cols] : kEmbeds) {
      auto fn = obj->fn<EmbedFn>(embed(t, cols).symbol());
      ASSERT_NE(fn, nullptr) << embed(t, cols).symbol();
      const int64_t bytes = rowBytes(t, cols);
      auto x = randoms(cols);
      std::vector<uint8_t> row(static_cast<size_t>(bytes));
      quantizeRowRef(t, x.data(), row.data(), cols);
      std::vector<float> got(static_cast<size_t>(cols)), want(static_cast<size_t>(cols));
      fn(row.data(), got.data());
      dequantizeRow(t, row.data(), want.data(), cols);
      for (int64_t i = 0; i < cols; ++i)
        ASSERT_FLOAT_EQ(got[size_t(i)], want[size_t(i)]) << dtypeName(t) << " at " << i;
    }
  EXPECT_FALSE(canGenerateEmbed(DType::Q4_K, 256));
  EXPECT_THROW(opKernelSource({embed(DType::Q6_K, 256)}), std::invalid_argument);
}

TEST_F(OpKernels, AddAndSourceShape) {
  for (const auto &obj : objects()) {
    Spec s;
    s.kind = Spec::Kind::Add;
    auto fn = obj->fn<AddFn>(s.symbol());
    ASSERT_NE(fn, nullptr);
    auto a = randoms(37), b = randoms(37);
    std::vector<float> y(37);
    fn(a.data(), b.data(), y.data(), 37);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(y[i], a[i] + b[i]);
  }
  // Deterministic, each kernel once, manifest entries that name their symbol.
  std::vector<Spec> twice = allSpecs();
  for (const Spec &s : allSpecs())
    twice.push_back(s);
  const std::string src = opKernelSource(twice);
  EXPECT_EQ(src, opKernelSource(allSpecs()));
  EXPECT_EQ(src.find("void llmc_rms_norm_576("), src.rfind("void llmc_rms_norm_576("));
  const Spec r = rope(9, 3, 64, 100000.0, true);
  EXPECT_EQ(r.symbol(), "llmc_rope_9_3_64_pairs_100000");
  EXPECT_EQ(r.manifestEntry()["rope_style"], "interleaved");
  EXPECT_EQ(r.manifestEntry()["symbol"], r.symbol());
  EXPECT_THROW(opKernelSource({gate("relu")}), std::invalid_argument);
  EXPECT_THROW(opKernelSource({rope(2, 1, 7, 10000.0, false)}), std::invalid_argument);
}
