//===- OnnxGenericForm.cpp - ONNX graphs as generic MLIR and back ---------===//
#include "passes/import/OnnxGenericForm.h"
#include "compiler/import/ReaderUtil.h"
#include "compiler/weights/IrAttributes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace llmc::import {

using namespace mlir;
using onnx_import::OnnxConstant;
using onnx_import::OnnxGraph;
using onnx_import::OnnxNode;
using onnx_import::OnnxType;

namespace {
constexpr const char *kSource = "llm.onnx_source";

ArrayAttr names(Builder &b, const std::vector<std::string> &v) {
  SmallVector<Attribute> a;
  for (const auto &s : v)
    a.push_back(b.getStringAttr(s));
  return b.getArrayAttr(a);
}

std::vector<std::string> namesOf(Operation *op, StringRef key) {
  std::vector<std::string> out;
  if (auto a = op->getAttrOfType<ArrayAttr>(key))
    for (Attribute x : a)
      if (auto s = dyn_cast<StringAttr>(x))
        out.push_back(s.str());
  return out;
}

[[noreturn]] void bad(const OnnxGraph &g, Operation *op, const std::string &what) {
  importFail(g.path, "generic ONNX IR: '" + op->getName().getStringRef().str() + "' " + what);
}
} // namespace

bool isOnnxGeneric(ModuleOp module) { return module->hasAttr(kSource); }

OwningOpRef<ModuleOp> onnxGenericModule(MLIRContext &ctx, const OnnxGraph &g) {
  ctx.allowUnregisteredDialects(true);
  OpBuilder b(&ctx);
  Location loc = FileLineColLoc::get(&ctx, g.path, 0, 0);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  (*module)->setAttr(kSource, b.getDictionaryAttr(
                                  {b.getNamedAttr("path", b.getStringAttr(g.path)),
                                   b.getNamedAttr("opset", b.getI64IntegerAttr(g.opset)),
                                   b.getNamedAttr("producer", b.getStringAttr(g.producer)),
                                   b.getNamedAttr("inputs", names(b, g.inputs)),
                                   b.getNamedAttr("outputs", names(b, g.outputs))}));
  b.setInsertionPointToEnd(module->getBody());
  std::map<std::string, Value> values;
  auto emit = [&](StringRef name, ValueRange operands, size_t results,
                  SmallVector<NamedAttribute> attrs) {
    OperationState st(loc, name);
    st.addOperands(operands);
    st.addTypes(SmallVector<Type>(results, b.getNoneType()));
    st.addAttributes(attrs);
    return b.create(st);
  };
  for (const auto &in : g.inputs)
    values[in] = emit("onnx.Input", {}, 1, {b.getNamedAttr("onnx.outputs", names(b, {in}))})
                     ->getResult(0);
  for (const auto &[name, c] : g.constants) {
    std::vector<uint8_t> bytes(c.data, c.data + c.nbytes);
    SmallVector<NamedAttribute> attrs{
        b.getNamedAttr("onnx.outputs", names(b, {name})),
        b.getNamedAttr("onnx.type", b.getI32IntegerAttr(int32_t(c.type))),
        b.getNamedAttr("onnx.shape", b.getDenseI64ArrayAttr(c.shape)),
        b.getNamedAttr("value", ownedBytesAttr(&ctx, "onnx." + name, std::move(bytes)))};
    values[name] = emit("onnx.Constant", {}, 1, attrs)->getResult(0);
  }
  for (const OnnxNode &n : g.nodes) {
    if (n.op == "Constant" && n.domain.empty())
      continue; // its value is among the constants
    SmallVector<Value> operands;
    for (const auto &in : n.inputs)
      if (auto it = values.find(in); it != values.end())
        operands.push_back(it->second);
    SmallVector<NamedAttribute> attrs{b.getNamedAttr("onnx.name", b.getStringAttr(n.name)),
                                      b.getNamedAttr("onnx.inputs", names(b, n.inputs)),
                                      b.getNamedAttr("onnx.outputs", names(b, n.outputs))};
    if (!n.domain.empty())
      attrs.push_back(b.getNamedAttr("onnx.domain", b.getStringAttr(n.domain)));
    for (const auto &[k, v] : n.ints)
      attrs.push_back(b.getNamedAttr("a." + k, b.getI64IntegerAttr(v)));
    for (const auto &[k, v] : n.floats)
      attrs.push_back(b.getNamedAttr("a." + k, b.getF32FloatAttr(v)));
    for (const auto &[k, v] : n.intLists)
      attrs.push_back(b.getNamedAttr("a." + k, b.getDenseI64ArrayAttr(v)));
    for (const auto &[k, v] : n.strings)
      attrs.push_back(b.getNamedAttr("a." + k, b.getStringAttr(v)));
    Operation *op = emit("onnx." + n.op, operands, n.outputs.size(), attrs);
    for (size_t i = 0; i < n.outputs.size(); ++i)
      values[n.outputs[i]] = op->getResult(unsigned(i));
  }
  return module;
}

OnnxGraph onnxGraphOf(ModuleOp module) {
  OnnxGraph g;
  auto src = module->getAttrOfType<DictionaryAttr>(kSource);
  if (!src)
    importFail("<module>", "not an ONNX graph in generic form (no " + std::string(kSource) +
                               "; llmc import model.onnx --onnx-generic writes one)");
  if (auto p = src.getAs<StringAttr>("path"))
    g.path = p.str();
  if (auto o = src.getAs<IntegerAttr>("opset"))
    g.opset = o.getInt();
  if (auto p = src.getAs<StringAttr>("producer"))
    g.producer = p.str();
  for (auto [key, into] : {std::pair{"inputs", &g.inputs}, std::pair{"outputs", &g.outputs}})
    if (auto a = src.getAs<ArrayAttr>(key))
      for (Attribute x : a)
        into->push_back(cast<StringAttr>(x).str());
  auto scratch = std::make_shared<std::vector<std::vector<uint8_t>>>();
  for (Operation &op : module.getBody()->getOperations()) {
    const StringRef name = op.getName().getStringRef();
    if (!name.starts_with("onnx."))
      bad(g, &op, "is not an onnx.* operation");
    const std::vector<std::string> outs = namesOf(&op, "onnx.outputs");
    if (outs.size() != op.getNumResults())
      bad(g, &op, "needs onnx.outputs naming each of its results");
    if (name == "onnx.Input")
      continue; // listed in the module's inputs
    if (name == "onnx.Constant") {
      OnnxConstant c;
      c.name = outs[0];
      auto type = op.getAttrOfType<IntegerAttr>("onnx.type");
      auto shape = op.getAttrOfType<DenseI64ArrayAttr>("onnx.shape");
      auto value = op.getAttrOfType<ElementsAttr>("value");
      if (!type || !shape || !value || onnx_import::onnxTypeBits(OnnxType(type.getInt())) == 0)
        bad(g, &op, "'" + c.name + "' needs onnx.type, onnx.shape and value");
      c.type = OnnxType(type.getInt());
      c.shape.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
      scratch->emplace_back();
      auto bytes = storedBytesOf(value, scratch->back());
      int64_t n = 0;
      if (!bytes || !checkedNumElements(c.shape, n) ||
          onnx_import::onnxTypeBytesOf(c.type, n) != int64_t(bytes->size()))
        bad(g, &op, "'" + c.name + "' holds bytes that do not match its shape and type");
      c.data = bytes->data();
      c.nbytes = int64_t(bytes->size());
      g.constants[c.name] = c;
      continue;
    }
    OnnxNode n;
    n.op = name.drop_front(5).str();
    if (auto a = op.getAttrOfType<StringAttr>("onnx.name"))
      n.name = a.str();
    if (auto a = op.getAttrOfType<StringAttr>("onnx.domain"))
      n.domain = a.str();
    n.inputs = namesOf(&op, "onnx.inputs");
    n.outputs = outs;
    for (const NamedAttribute &a : op.getAttrs()) {
      const StringRef key = a.getName().getValue();
      if (!key.starts_with("a."))
        continue;
      const std::string k = key.drop_front(2).str();
      if (auto i = dyn_cast<IntegerAttr>(a.getValue()))
        n.ints[k] = i.getInt();
      else if (auto f = dyn_cast<FloatAttr>(a.getValue()))
        n.floats[k] = float(f.getValueAsDouble());
      else if (auto l = dyn_cast<DenseI64ArrayAttr>(a.getValue()))
        n.intLists[k].assign(l.asArrayRef().begin(), l.asArrayRef().end());
      else if (auto s = dyn_cast<StringAttr>(a.getValue()))
        n.strings[k] = s.str();
    }
    g.nodes.push_back(std::move(n));
  }
  struct Scratch : SourceBuffer {
    std::shared_ptr<std::vector<std::vector<uint8_t>>> bytes;
  };
  auto keep = std::make_shared<Scratch>();
  keep->bytes = scratch;
  g.buffers.push_back(keep);
  return g;
}

} // namespace llmc::import
