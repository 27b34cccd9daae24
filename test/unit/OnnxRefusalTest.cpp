//===- OnnxRefusalTest.cpp - ONNX graphs the raiser must refuse by name ---===//
// Attributes whose meaning llmc does not raise, set on the committed
// fixtures' own nodes after reading (so no extra fixture files): a partial
// rotary (onnxruntime's RotaryEmbedding with rotary_embedding_dim below
// the head size), a RoPE scale other than 1, and a MoE router taking the
// k smallest (TopK largest=0). Each is refused with the node named; the
// accepted spellings of the same attributes (the whole head, scale 1,
// largest=1) import.
//===----------------------------------------------------------------------===//
#include "compiler/import/SourceModel.h"
#include "compiler/import/onnx/OnnxGraph.h"

#include "MissingInput.h"
#include <gtest/gtest.h>

#include <functional>
#include <sys/stat.h>

using namespace llmc;
using namespace llmc::onnx_import;

namespace {

std::string fixture(const std::string &name) {
  return std::string(LLMC_SOURCE_DIR) + "/test/fixtures/onnx/" + name + "/model.onnx";
}

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

/// The message raiseOnnxDecoder throws for `g` after `mutate` sets an
/// attribute on every node of op `op` ("" when it imports); `found` counts
/// those nodes.
std::string raiseWith(OnnxGraph g, const std::string &op,
                      const std::function<void(OnnxNode &)> &mutate, int &found) {
  found = 0;
  for (OnnxNode &n : g.nodes)
    if (n.op == op) {
      mutate(n);
      ++found;
    }
  try {
    raiseOnnxDecoder(g);
    return "";
  } catch (const ImportError &e) {
    return e.what();
  }
}

} // namespace

TEST(OnnxRefusals, PartialRotaryAndRopeScaleAreRefusedByNode) {
  const std::string path = fixture("llama-ortopt");
  if (!exists(path))
    LLMC_MISSING_INPUT(path);
  const OnnxGraph g = readOnnxGraph(path);
  int found = 0;
  // The whole head (head_dim 8 in this fixture: 2 x the caches' 4 columns),
  // spelled out, imports as the default does.
  EXPECT_EQ(raiseWith(g, "RotaryEmbedding", [](OnnxNode &n) { n.ints["rotary_embedding_dim"] = 0; },
                      found),
            "");
  ASSERT_GT(found, 0) << "no RotaryEmbedding node in " << path;
  std::string err =
      raiseWith(g, "RotaryEmbedding", [](OnnxNode &n) { n.ints["rotary_embedding_dim"] = 2; }, found);
  EXPECT_NE(err.find("partial rotary (rotary_embedding_dim) is not raised"), std::string::npos)
      << err;
  EXPECT_NE(err.find("RotaryEmbedding)"), std::string::npos) << err; // the op, with its domain
  EXPECT_EQ(raiseWith(g, "RotaryEmbedding", [](OnnxNode &n) { n.floats["scale"] = 1.0f; }, found),
            "");
  err = raiseWith(g, "RotaryEmbedding", [](OnnxNode &n) { n.floats["scale"] = 0.5f; }, found);
  EXPECT_NE(err.find("a RoPE scale is not raised"), std::string::npos) << err;
}

TEST(OnnxRefusals, RouterTakingTheSmallestIsRefused) {
  const std::string path = fixture("mixtral-moe");
  if (!exists(path))
    LLMC_MISSING_INPUT(path);
  const OnnxGraph g = readOnnxGraph(path);
  int found = 0;
  EXPECT_EQ(raiseWith(g, "TopK", [](OnnxNode &n) { n.ints["largest"] = 1; }, found), "");
  ASSERT_GT(found, 0) << "no TopK node in " << path;
  const std::string err = raiseWith(g, "TopK", [](OnnxNode &n) { n.ints["largest"] = 0; }, found);
  EXPECT_NE(err.find("k is not a constant (or the smallest are taken)"), std::string::npos) << err;
  EXPECT_NE(err.find("(TopK)"), std::string::npos) << err;
}

// Nodes with fewer inputs than their operator takes (found by fuzz_onnx: a
// one-input node of an unknown op among the gate's users was read at input
// 1, past the end). A known op is refused by name with its arity; an
// unknown one is read as having no such input, and the graph is refused
// for what it lacks, never read out of bounds.
TEST(OnnxRefusals, NodesMissingInputsAreRefusedNotReadPastTheEnd) {
  const std::string path = fixture("llama-tied");
  if (!exists(path))
    LLMC_MISSING_INPUT(path);
  const OnnxGraph g = readOnnxGraph(path);
  int found = 0;
  std::string err = raiseWith(g, "Mul", [](OnnxNode &n) { n.inputs.resize(1); }, found);
  ASSERT_GT(found, 0) << "no Mul node in " << path;
  EXPECT_NE(err.find("(Mul) has 1 input(s); Mul takes at least 2"), std::string::npos) << err;
  err = raiseWith(g, "Sigmoid", [](OnnxNode &n) { n.op = "Wigmoid"; }, found);
  ASSERT_GT(found, 0) << "no Sigmoid node in " << path;
  EXPECT_NE(err.find("neither goes through SiLU"), std::string::npos) << err;
  err = raiseWith(g, "Sqrt", [](OnnxNode &n) { n.outputs.clear(); }, found);
  ASSERT_GT(found, 0) << "no Sqrt node in " << path;
  EXPECT_NE(err.find("(Sqrt) has no output"), std::string::npos) << err;
  OnnxNode n;
  n.inputs = {"a"};
  EXPECT_EQ(n.input(0), "a");
  EXPECT_EQ(n.input(1), "");
}
