//===- OnnxGraphReader.cpp - ONNX protobuf -> OnnxGraph --------------------===//
// Parses ModelProto with the ONNX project's generated protobuf classes
// (Debian libonnx-dev) and copies what raising needs into OnnxGraph. The
// file is untrusted: sizes are checked before any byte is read, external
// data must name a plain file in the model's folder (no absolute paths, no
// "..") and lie inside it, and every tensor's bytes must match its shape.
//===----------------------------------------------------------------------===//
#include "compiler/import/ReaderUtil.h"
#include "compiler/import/onnx/OnnxGraph.h"

#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <set>

namespace llmc::onnx_import {

namespace {

constexpr int64_t kMinOpset = 14, kMaxOpset = 21;

/// Keeps the parsed proto (whose raw_data strings constants point into).
struct ProtoBuffer : SourceBuffer {
  onnx::ModelProto model;
};

bool knownType(int32_t t) { return onnxTypeBits(OnnxType(t)) > 0; }

/// The external file `location` of `model` (a plain name in its folder).
std::shared_ptr<MappedFile> externalFile(OnnxGraph &g, const std::string &tensor,
                                         const std::string &location,
                                         std::map<std::string, std::shared_ptr<MappedFile>> &open) {
  if (location.empty() || location[0] == '/' || location.find("..") != std::string::npos ||
      location.find('\\') != std::string::npos)
    importFail(g.path, "tensor '" + tensor + "': external data location '" + location +
                           "' is not a file name inside the model's folder");
  auto it = open.find(location);
  if (it != open.end())
    return it->second;
  const std::string full = joinPath(parentDir(g.path), location);
  if (!fileExists(full))
    importFail(g.path, "tensor '" + tensor + "': external data file " + full + " not found");
  auto f = MappedFile::open(full);
  g.buffers.push_back(f);
  open[location] = f;
  return f;
}

/// Bytes of a typed repeated field copied into an owned buffer.
template <typename Src, typename Dst>
const uint8_t *ownTyped(OnnxGraph &g, const Src &field, int64_t &nbytes) {
  auto buf = std::make_shared<OwnedBuffer>();
  buf->bytes.resize(size_t(field.size()) * sizeof(Dst));
  for (int i = 0; i < field.size(); ++i) {
    Dst v = Dst(field.Get(i));
    std::memcpy(buf->bytes.data() + size_t(i) * sizeof(Dst), &v, sizeof(Dst));
  }
  g.buffers.push_back(buf);
  nbytes = int64_t(buf->bytes.size());
  return buf->bytes.data();
}

OnnxConstant readTensor(OnnxGraph &g, const onnx::TensorProto &t, const std::string &name,
                        std::map<std::string, std::shared_ptr<MappedFile>> &files) {
  OnnxConstant c;
  c.name = name;
  if (!knownType(t.data_type()))
    importFail(g.path, "tensor '" + name + "' has element type " + onnxTypeName(t.data_type()) +
                           ", which llmc does not read");
  c.type = OnnxType(t.data_type());
  for (int64_t d : t.dims())
    c.shape.push_back(d);
  int64_t n = 0;
  if (!checkedNumElements(c.shape, n) || onnxTypeBytesOf(c.type, n) < 0)
    importFail(g.path, "tensor '" + name + "' has an invalid shape " + shapeString(c.shape));
  const int64_t want = onnxTypeBytesOf(c.type, n);
  if (t.has_data_location() && t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto &kv : t.external_data()) {
      char *end = nullptr;
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset" || kv.key() == "length") {
        const long long v = std::strtoll(kv.value().c_str(), &end, 10);
        if (end == kv.value().c_str() || *end || v < 0)
          importFail(g.path, "tensor '" + name + "': bad external " + kv.key() + " '" +
                                 kv.value() + "'");
        (kv.key() == "offset" ? offset : length) = v;
      }
    }
    auto f = externalFile(g, name, location, files);
    if (length < 0)
      length = want;
    if (length != want || uint64_t(offset) > f->size() || uint64_t(length) > f->size() - offset)
      importFail(g.path, "tensor '" + name + "': external data (offset " + std::to_string(offset) +
                             ", length " + std::to_string(length) + ") does not hold its " +
                             std::to_string(want) + " bytes inside " + location);
    c.data = f->data() + offset;
    c.nbytes = length;
    return c;
  }
  if (t.has_raw_data()) {
    c.data = reinterpret_cast<const uint8_t *>(t.raw_data().data());
    c.nbytes = int64_t(t.raw_data().size());
  } else if (c.type == OnnxType::Float) {
    c.data = ownTyped<decltype(t.float_data()), float>(g, t.float_data(), c.nbytes);
  } else if (c.type == OnnxType::Double) {
    c.data = ownTyped<decltype(t.double_data()), double>(g, t.double_data(), c.nbytes);
  } else if (c.type == OnnxType::Int64) {
    c.data = ownTyped<decltype(t.int64_data()), int64_t>(g, t.int64_data(), c.nbytes);
  } else if (c.type == OnnxType::Int32) {
    c.data = ownTyped<decltype(t.int32_data()), int32_t>(g, t.int32_data(), c.nbytes);
  } else if (c.type == OnnxType::Float16 || c.type == OnnxType::BFloat16) {
    c.data = ownTyped<decltype(t.int32_data()), uint16_t>(g, t.int32_data(), c.nbytes);
  } else if (c.type == OnnxType::Int4 || c.type == OnnxType::Uint4) {
    c.data = ownTyped<decltype(t.int32_data()), uint8_t>(g, t.int32_data(), c.nbytes);
  } else { // bool, int8, uint8 in int32_data
    c.data = ownTyped<decltype(t.int32_data()), uint8_t>(g, t.int32_data(), c.nbytes);
  }
  if (c.nbytes != want)
    importFail(g.path, "tensor '" + name + "' holds " + std::to_string(c.nbytes) +
                           " bytes; its shape " + shapeString(c.shape) + " of " +
                           onnxTypeName(int32_t(c.type)) + " needs " + std::to_string(want));
  return c;
}

OnnxNode readNode(OnnxGraph &g, const onnx::NodeProto &n, size_t index,
                  std::map<std::string, std::shared_ptr<MappedFile>> &files) {
  OnnxNode node;
  node.name = n.name().empty() ? "#" + std::to_string(index) : n.name();
  node.op = n.op_type();
  node.domain = n.domain();
  node.inputs.assign(n.input().begin(), n.input().end());
  node.outputs.assign(n.output().begin(), n.output().end());
  for (const auto &a : n.attribute()) {
    switch (a.type()) {
    case onnx::AttributeProto::INT:
      node.ints[a.name()] = a.i();
      break;
    case onnx::AttributeProto::FLOAT:
      node.floats[a.name()] = a.f();
      break;
    case onnx::AttributeProto::STRING:
      node.strings[a.name()] = a.s();
      break;
    case onnx::AttributeProto::INTS:
      node.intLists[a.name()].assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto::GRAPH:
    case onnx::AttributeProto::GRAPHS:
      importFail(g.path, node.describe() + " has a subgraph (control flow); llmc raises only "
                                           "straight-line decoder graphs");
    default:
      break;
    }
  }
  if (node.op == "Constant" && node.domain.empty()) {
    if (node.outputs.size() != 1)
      importFail(g.path, node.describe() + " must have one output");
    const std::string &out = node.outputs[0];
    for (const auto &a : n.attribute()) {
      if (a.name() == "value" && a.has_t()) {
        g.constants[out] = readTensor(g, a.t(), out, files);
      } else if (a.name() == "value_float" || a.name() == "value_int" ||
                 a.name() == "value_ints" || a.name() == "value_floats") {
        onnx::TensorProto t;
        const bool ints = a.name() == "value_int" || a.name() == "value_ints";
        t.set_data_type(ints ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
        if (a.name() == "value_float")
          t.add_float_data(a.f());
        else if (a.name() == "value_int")
          t.add_int64_data(a.i());
        else if (ints) {
          t.add_dims(a.ints_size());
          for (int64_t v : a.ints())
            t.add_int64_data(v);
        } else {
          t.add_dims(a.floats_size());
          for (float v : a.floats())
            t.add_float_data(v);
        }
        g.constants[out] = readTensor(g, t, out, files);
      }
    }
    if (!g.constants.count(out))
      importFail(g.path, node.describe() + " has no value llmc reads");
  }
  return node;
}

} // namespace

std::string onnxTypeName(int32_t t) {
  switch (OnnxType(t)) {
  case OnnxType::Float: return "float";
  case OnnxType::Uint8: return "uint8";
  case OnnxType::Int8: return "int8";
  case OnnxType::Int32: return "int32";
  case OnnxType::Int64: return "int64";
  case OnnxType::Bool: return "bool";
  case OnnxType::Float16: return "float16";
  case OnnxType::Double: return "double";
  case OnnxType::BFloat16: return "bfloat16";
  case OnnxType::Uint4: return "uint4";
  case OnnxType::Int4: return "int4";
  }
  return "type " + std::to_string(t);
}

int64_t onnxTypeBits(OnnxType t) {
  switch (t) {
  case OnnxType::Float: case OnnxType::Int32: return 32;
  case OnnxType::Int64: case OnnxType::Double: return 64;
  case OnnxType::Float16: case OnnxType::BFloat16: return 16;
  case OnnxType::Uint8: case OnnxType::Int8: case OnnxType::Bool: return 8;
  case OnnxType::Uint4: case OnnxType::Int4: return 4;
  }
  return 0;
}

int64_t onnxTypeBytesOf(OnnxType t, int64_t n) {
  int64_t bits = 0;
  if (onnxTypeBits(t) == 0 || n < 0 || !checkedMul(n, onnxTypeBits(t), bits))
    return -1;
  return (bits + 7) / 8;
}

int64_t OnnxConstant::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d; // checked when the constant was read
  return n;
}

double OnnxConstant::at(int64_t i) const {
  if (type == OnnxType::Uint4 || type == OnnxType::Int4) {
    const int v = (data[i / 2] >> (4 * (i % 2))) & 15;
    return type == OnnxType::Int4 && v >= 8 ? double(v - 16) : double(v);
  }
  const uint8_t *p = data + i * (onnxTypeBits(type) / 8);
  switch (type) {
  case OnnxType::Float: { float v; std::memcpy(&v, p, 4); return v; }
  case OnnxType::Double: { double v; std::memcpy(&v, p, 8); return v; }
  case OnnxType::Int64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
  case OnnxType::Int32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case OnnxType::Float16: { uint16_t v; std::memcpy(&v, p, 2); return halfToFloat(v); }
  case OnnxType::BFloat16: { uint16_t v; std::memcpy(&v, p, 2); return bf16ToFloat(v); }
  case OnnxType::Int8: return double(int8_t(*p));
  case OnnxType::Uint8: case OnnxType::Bool: return double(*p);
  default: return 0;
  }
}

void checkNodeArity(const OnnxGraph &g, const OnnxNode &n) {
  // Required inputs (ONNX opset 14+, onnxruntime's contrib ops), the
  // operators the raiser matches; optional inputs may be absent or "".
  static const std::map<std::string, size_t> kMinInputs = {
      {"Add", 2}, {"Sub", 2}, {"Mul", 2}, {"Div", 2}, {"Pow", 2}, {"MatMul", 2},
      {"Gather", 2}, {"Reshape", 2}, {"TopK", 2}, {"Expand", 2}, {"Where", 3},
      {"Sqrt", 1}, {"Erf", 1}, {"Sigmoid", 1}, {"Softmax", 1}, {"Reciprocal", 1},
      {"Cast", 1}, {"Sin", 1}, {"Cos", 1}, {"Identity", 1}, {"Shape", 1},
      {"Transpose", 1}, {"Flatten", 1}, {"Neg", 1}, {"Gelu", 1}, {"ReduceMean", 1},
      {"ReduceSum", 1}, {"Squeeze", 1}, {"Unsqueeze", 1}, {"Concat", 1}, {"Slice", 3},
      {"DequantizeLinear", 2}, {"LayerNormalization", 2},
      {"SimplifiedLayerNormalization", 2}, {"SkipLayerNormalization", 3},
      {"SkipSimplifiedLayerNormalization", 3}, {"RotaryEmbedding", 4}, {"MatMulNBits", 3},
      {"GroupQueryAttention", 1}};
  auto it = kMinInputs.find(n.op);
  if (it != kMinInputs.end() && n.inputs.size() < it->second)
    importFail(g.path, n.describe() + " has " + std::to_string(n.inputs.size()) + " input(s); " +
                           n.op + " takes at least " + std::to_string(it->second));
  if (n.outputs.empty() || n.outputs[0].empty())
    importFail(g.path, n.describe() + " has no output");
}

std::string OnnxNode::describe() const {
  return "node '" + name + "' (" + (domain.empty() ? "" : domain + ".") + op + ")";
}

OnnxGraph readOnnxGraph(const std::string &path) {
  OnnxGraph g;
  g.path = path;
  auto file = MappedFile::open(path);
  if (file->size() > uint64_t(INT_MAX))
    importFail(path, "an ONNX protobuf over 2 GiB: export the weights as external data");
  auto proto = std::make_shared<ProtoBuffer>();
  {
    google::protobuf::io::ArrayInputStream raw(file->data(), int(file->size()));
    google::protobuf::io::CodedInputStream in(&raw);
    in.SetTotalBytesLimit(INT_MAX);
    if (!proto->model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
      importFail(path, "not a valid ONNX model (the protobuf does not parse)");
  }
  g.buffers.push_back(proto);
  const onnx::ModelProto &m = proto->model;
  if (!m.has_graph() || m.graph().node_size() == 0)
    importFail(path, "not an ONNX model with a graph (no nodes)");
  for (const auto &o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx")
      g.opset = o.version();
  if (g.opset < kMinOpset || g.opset > kMaxOpset)
    importFail(path, "opset " + std::to_string(g.opset) + " of the default domain; llmc reads " +
                         std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset));
  if (m.functions_size() > 0)
    importFail(path, "the model defines local functions; llmc raises only plain graphs");
  g.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  std::map<std::string, std::shared_ptr<MappedFile>> files;
  const onnx::GraphProto &graph = m.graph();
  for (const auto &t : graph.initializer()) {
    if (t.name().empty())
      importFail(path, "an initializer without a name");
    g.constants[t.name()] = readTensor(g, t, t.name(), files);
  }
  if (graph.sparse_initializer_size() > 0)
    importFail(path, "sparse initializers are not supported");
  for (const auto &i : graph.input())
    if (!g.constants.count(i.name()))
      g.inputs.push_back(i.name());
  for (const auto &o : graph.output())
    g.outputs.push_back(o.name());
  for (int i = 0; i < graph.node_size(); ++i)
    g.nodes.push_back(readNode(g, graph.node(i), size_t(i), files));
  // ONNX lists nodes in topological order: each input is a graph input, a
  // constant or an earlier node's output (this also rules out cycles).
  std::set<std::string> known(g.inputs.begin(), g.inputs.end());
  for (const auto &[name, c] : g.constants)
    known.insert(name);
  for (const OnnxNode &n : g.nodes) {
    for (const auto &in : n.inputs)
      if (!in.empty() && !known.count(in))
        importFail(path, n.describe() + " reads '" + in + "' before any node produces it (the "
                                        "graph has a cycle or is not in topological order)");
    for (const auto &out : n.outputs)
      known.insert(out);
  }
  for (const auto &out : g.outputs)
    if (!known.count(out))
      importFail(path, "graph output '" + out + "' is produced by no node");
  return g;
}

} // namespace llmc::onnx_import
