//===- OnnxGraph.h - An ONNX model as a plain graph ------------*- C++ -*-===//
// The generic form the ONNX reader produces: nodes (op, domain, inputs,
// outputs, the scalar and list attributes llmc looks at), constants (the
// initializers and the outputs of Constant nodes, bytes kept alive by
// `buffers`) and the graph's data inputs and outputs. No protobuf types
// here: the raising step (OnnxDecoderReader.cpp) works on this alone.
//===----------------------------------------------------------------------===//
#pragma once
#include "compiler/import/SourceModel.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llmc::onnx_import {

/// ONNX TensorProto element types llmc reads (the proto's numbering).
enum class OnnxType : int32_t {
  Float = 1,
  Uint8 = 2,
  Int8 = 3,
  Int32 = 6,
  Int64 = 7,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  BFloat16 = 16,
  Uint4 = 21, // two per byte, low nibble first (opset 21)
  Int4 = 22,
};
/// "float", "int64", ... or "type N" for the ones llmc does not read.
std::string onnxTypeName(int32_t t);
/// Bits per element, 0 for types llmc does not read.
int64_t onnxTypeBits(OnnxType t);
/// Bytes of `n` elements (sub-byte types packed), -1 on overflow or an
/// unread type.
int64_t onnxTypeBytesOf(OnnxType t, int64_t n);

struct OnnxConstant {
  std::string name;
  OnnxType type = OnnxType::Float;
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr; // little-endian elements, not necessarily aligned
  int64_t nbytes = 0;

  int64_t numElements() const;
  bool isFloat() const {
    return type == OnnxType::Float || type == OnnxType::Float16 || type == OnnxType::BFloat16 ||
           type == OnnxType::Double;
  }
  /// Element i as a double (any numeric type).
  double at(int64_t i) const;
};

struct OnnxNode {
  std::string name, op, domain;
  std::vector<std::string> inputs, outputs; // "" for an omitted optional input
  std::map<std::string, int64_t> ints;
  std::map<std::string, float> floats;
  std::map<std::string, std::vector<int64_t>> intLists;
  std::map<std::string, std::string> strings;
  /// "node 'NAME' (OP)" for diagnostics.
  std::string describe() const;
  /// Input `i`, or "" (an absent input) past the end: the raiser reads
  /// inputs by position on nodes of any op, before it knows their arity.
  const std::string &input(size_t i) const {
    static const std::string absent;
    return i < inputs.size() ? inputs[i] : absent;
  }
  /// Attribute `key`, or `otherwise` when the node does not set it.
  int64_t intAttr(const std::string &key, int64_t otherwise) const {
    auto it = ints.find(key);
    return it == ints.end() ? otherwise : it->second;
  }
  float floatAttr(const std::string &key, float otherwise) const {
    auto it = floats.find(key);
    return it == floats.end() ? otherwise : it->second;
  }
};

struct OnnxGraph {
  std::string path;
  int64_t opset = 0;            // of the default domain
  std::string producer;         // producer_name producer_version
  std::vector<OnnxNode> nodes;  // in the file's (topological) order
  std::map<std::string, OnnxConstant> constants;
  std::vector<std::string> inputs;  // graph inputs that are not initializers
  std::vector<std::string> outputs;
  std::vector<std::shared_ptr<SourceBuffer>> buffers;

  const OnnxConstant *constant(const std::string &value) const {
    auto it = constants.find(value);
    return it == constants.end() ? nullptr : &it->second;
  }
};

/// Parses an ONNX model file (and its external data files, which must sit
/// in the model's folder). Throws ImportError naming the file and the
/// problem: not an ONNX protobuf, an opset outside 14..17, a graph with
/// subgraphs or functions, a tensor whose bytes do not match its shape,
/// external data outside the folder or past the end of its file.
OnnxGraph readOnnxGraph(const std::string &path);

/// Fails (ImportError naming the node) when `n` has fewer inputs than its
/// operator takes (for the operators the raiser matches: e.g. Mul 2, Sqrt
/// 1, Slice 3, SkipLayerNormalization 3) or no output: the raiser reads
/// inputs and outputs by position after this check, never past the end.
void checkNodeArity(const OnnxGraph &g, const OnnxNode &n);

/// Raises a decoder-only LLM graph (as torch's exporter writes Llama and
/// Qwen2 models) into a SourceModel; see OnnxDecoderReader.cpp.
SourceModel raiseOnnxDecoder(const OnnxGraph &g);

} // namespace llmc::onnx_import
