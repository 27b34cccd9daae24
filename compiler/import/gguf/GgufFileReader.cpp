//===- GgufFileReader.cpp - Low-level GGUF v2/v3 container parser ----------===//
// Implements gguf::File (see GgufFile.h): a bounds-checked cursor over the
// mapping, metadata values of every type, tensor infos, alignment and data
// bounds. Mapping to a SourceModel is GgufReader.cpp's job.
//===----------------------------------------------------------------------===//
#include "compiler/import/gguf/GgufFile.h"

#include <cstring>

namespace llmc::gguf {

namespace {

struct GgmlTypeEntry {
  uint32_t id;
  const char *name;
  std::optional<DType> dtype;
};

// ggml's type ids (ggml.h `enum ggml_type`). Only some are llmc DTypes.
const GgmlTypeEntry kGgmlTypes[] = {
    {0, "f32", DType::F32},       {1, "f16", DType::F16},         {2, "q4_0", DType::Q4_0},
    {3, "q4_1", DType::Q4_1},     {6, "q5_0", DType::Q5_0},       {7, "q5_1", DType::Q5_1},
    {8, "q8_0", DType::Q8_0},     {9, "q8_1", std::nullopt},      {10, "q2_k", DType::Q2_K},
    {11, "q3_k", DType::Q3_K},    {12, "q4_k", DType::Q4_K},      {13, "q5_k", DType::Q5_K},
    {14, "q6_k", DType::Q6_K},    {15, "q8_k", std::nullopt},     {16, "iq2_xxs", std::nullopt},
    {17, "iq2_xs", std::nullopt}, {18, "iq3_xxs", std::nullopt},  {19, "iq1_s", std::nullopt},
    {20, "iq4_nl", DType::IQ4_NL}, {21, "iq3_s", std::nullopt},    {22, "iq2_s", std::nullopt},
    {23, "iq4_xs", std::nullopt}, {24, "i8", std::nullopt},       {25, "i16", std::nullopt},
    {26, "i32", std::nullopt},    {27, "i64", std::nullopt},      {28, "f64", std::nullopt},
    {29, "iq1_m", std::nullopt},  {30, "bf16", DType::BF16},      {34, "tq1_0", std::nullopt},
    {35, "tq2_0", std::nullopt},  {39, "mxfp4", std::nullopt},
};

constexpr int kMaxArrayNesting = 4;
constexpr uint32_t kMaxDims = 4; // GGML_MAX_DIMS

} // namespace

std::optional<DType> dtypeFromGgmlType(uint32_t id) {
  for (const auto &e : kGgmlTypes)
    if (e.id == id)
      return e.dtype;
  return std::nullopt;
}

/// The ggml types llmc reads, from kGgmlTypes ("f32, f16, ..."), for errors.
static std::string supportedGgmlTypeNames() {
  std::string out;
  for (const auto &e : kGgmlTypes)
    if (e.dtype)
      out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

std::string ggmlTypeName(uint32_t id) {
  for (const auto &e : kGgmlTypes)
    if (e.id == id)
      return e.name;
  return "type " + std::to_string(id);
}

const char *valueTypeName(ValueType t) {
  switch (t) {
  case ValueType::U8: return "uint8";
  case ValueType::I8: return "int8";
  case ValueType::U16: return "uint16";
  case ValueType::I16: return "int16";
  case ValueType::U32: return "uint32";
  case ValueType::I32: return "int32";
  case ValueType::F32: return "float32";
  case ValueType::Bool: return "bool";
  case ValueType::String: return "string";
  case ValueType::Array: return "array";
  case ValueType::U64: return "uint64";
  case ValueType::I64: return "int64";
  case ValueType::F64: return "float64";
  }
  return "unknown";
}

bool Value::isInteger() const {
  switch (type) {
  case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
  case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
    return true;
  default:
    return false;
  }
}

//===- Parser --------------------------------------------------------------===//

class Parser {
public:
  Parser(File &f) : f_(f), p_(f.map_->data()), size_(f.map_->size()) {}

  void parse() {
    parseHeader();
    uint64_t tensor_count = u64("tensor count");
    uint64_t kv_count = u64("metadata count");
    // Each entry takes at least 12 bytes: cheap guard against absurd counts.
    if (kv_count > remaining() / 12)
      fail("metadata count " + std::to_string(kv_count) + " does not fit in the file (truncated?)");
    if (tensor_count > remaining() / 24)
      fail("tensor count " + std::to_string(tensor_count) + " does not fit in the file (truncated?)");
    f_.kv_.reserve(size_t(kv_count));
    for (uint64_t k = 0; k < kv_count; ++k)
      parseKeyValue();
    readAlignment();
    f_.tensors_.reserve(size_t(tensor_count));
    for (uint64_t t = 0; t < tensor_count; ++t)
      parseTensorInfo();
    placeData();
  }

private:
  [[noreturn]] void fail(const std::string &problem) { f_.fail(problem); }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char *what) {
    if (n > remaining())
      fail(std::string("truncated file: ") + what + " at offset " + std::to_string(pos_) +
           " needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
  }
  template <typename T> T raw(const char *what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32(const char *what) { return raw<uint32_t>(what); }
  uint64_t u64(const char *what) { return raw<uint64_t>(what); }

  std::string_view str(const char *what) {
    uint64_t len = u64(what);
    need(len, what);
    std::string_view s(reinterpret_cast<const char *>(p_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }

  void parseHeader() {
    if (size_ < 4)
      fail("not a GGUF file: too small (" + std::to_string(size_) + " bytes)");
    if (std::memcmp(p_, "GGUF", 4) != 0)
      fail("not a GGUF file: bad magic");
    pos_ = 4;
    uint32_t v = u32("version");
    if (v == 1)
      fail("GGUF version 1 is not supported (only versions 2 and 3)");
    if (v == 0x02000000u || v == 0x03000000u)
      fail("big-endian GGUF files are not supported");
    if (v != 2 && v != 3)
      fail("unsupported GGUF version " + std::to_string(v) + " (only versions 2 and 3)");
    f_.version_ = v;
  }

  ValueType valueType(uint32_t raw_type, const std::string &key) {
    if (raw_type > uint32_t(ValueType::F64))
      fail("metadata " + key + " has unknown value type " + std::to_string(raw_type));
    return ValueType(raw_type);
  }

  static uint64_t scalarSize(ValueType t) {
    switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    default: return 0; // strings and arrays are variable-sized
    }
  }

  // Reads one value of type t at the cursor.
  Value readValue(ValueType t, const std::string &key, int depth) {
    Value v;
    v.type = t;
    switch (t) {
    case ValueType::U8: v.u = raw<uint8_t>(key.c_str()); v.i = int64_t(v.u); break;
    case ValueType::I8: v.i = raw<int8_t>(key.c_str()); break;
    case ValueType::U16: v.u = raw<uint16_t>(key.c_str()); v.i = int64_t(v.u); break;
    case ValueType::I16: v.i = raw<int16_t>(key.c_str()); break;
    case ValueType::U32: v.u = raw<uint32_t>(key.c_str()); v.i = int64_t(v.u); break;
    case ValueType::I32: v.i = raw<int32_t>(key.c_str()); break;
    case ValueType::U64: v.u = raw<uint64_t>(key.c_str()); v.i = int64_t(v.u); break;
    case ValueType::I64: v.i = raw<int64_t>(key.c_str()); break;
    case ValueType::F32: v.f = raw<float>(key.c_str()); break;
    case ValueType::F64: v.f = raw<double>(key.c_str()); break;
    case ValueType::Bool: {
      uint8_t b = raw<uint8_t>(key.c_str());
      if (b > 1)
        fail("metadata " + key + " has an invalid bool value " + std::to_string(b));
      v.u = b;
      break;
    }
    case ValueType::String: v.s = str(key.c_str()); break;
    case ValueType::Array: {
      if (depth >= kMaxArrayNesting)
        fail("metadata " + key + ": arrays nested too deeply");
      v.elem_type = valueType(u32(key.c_str()), key);
      v.count = u64(key.c_str());
      v.elems = p_ + pos_;
      if (uint64_t es = scalarSize(v.elem_type)) {
        if (v.count > remaining() / es)
          fail("truncated file: array " + key + " of " + std::to_string(v.count) + " " +
               valueTypeName(v.elem_type) + " values runs past the end");
        pos_ += v.count * es;
      } else {
        // Strings/arrays: each takes at least 8 bytes; walk them to check bounds.
        if (v.count > remaining() / 8)
          fail("truncated file: array " + key + " of " + std::to_string(v.count) +
               " values runs past the end");
        for (uint64_t e = 0; e < v.count; ++e)
          readValue(v.elem_type, key, depth + 1);
      }
      break;
    }
    }
    return v;
  }

  void parseKeyValue() {
    std::string key(str("metadata key"));
    if (key.empty())
      fail("empty metadata key");
    ValueType t = valueType(u32(key.c_str()), key);
    Value v = readValue(t, key, 0);
    if (f_.kv_index_.count(key))
      fail("duplicate metadata key " + key);
    f_.kv_index_.emplace(key, f_.kv_.size());
    f_.kv_.emplace_back(std::move(key), v);
  }

  void readAlignment() {
    const Value *a = f_.find("general.alignment");
    if (!a)
      return;
    if (!a->isInteger() || a->i <= 0 || (a->i & (a->i - 1)) != 0 || a->i > (1 << 20))
      fail("general.alignment must be a positive power of two, got " +
           (a->isInteger() ? std::to_string(a->i) : std::string(valueTypeName(a->type))));
    f_.alignment_ = uint64_t(a->i);
  }

  void parseTensorInfo() {
    TensorInfo t;
    t.name = std::string(str("tensor name"));
    if (t.name.empty())
      fail("tensor with an empty name");
    uint32_t n_dims = u32("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      fail("tensor " + t.name + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = u64("tensor dimension");
      if (ne == 0 || ne > (uint64_t(1) << 40))
        fail("tensor " + t.name + " has an invalid dimension " + std::to_string(ne));
      t.ne.push_back(int64_t(ne));
    }
    t.ggml_type = u32("tensor type");
    t.offset = u64("tensor offset");
    auto dt = dtypeFromGgmlType(t.ggml_type);
    if (!dt)
      fail("tensor " + t.name + " has unsupported type " + ggmlTypeName(t.ggml_type) +
           " (supported: " + supportedGgmlTypeNames() + ")");
    t.dtype = *dt;
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    t.nbytes = tensorBytes(f_.path_, t.name, t.dtype, shape);
    for (const TensorInfo &o : f_.tensors_)
      if (o.name == t.name)
        fail("duplicate tensor " + t.name);
    f_.tensors_.push_back(std::move(t));
  }

  void placeData() {
    const uint64_t align = f_.alignment_;
    uint64_t data = (pos_ + align - 1) / align * align;
    f_.data_offset_ = data;
    const uint64_t avail = data <= size_ ? size_ - data : 0;
    for (const TensorInfo &t : f_.tensors_) {
      if (t.offset % align != 0)
        fail("tensor " + t.name + " data offset " + std::to_string(t.offset) +
             " is not a multiple of the alignment " + std::to_string(align));
      if (t.offset > avail || uint64_t(t.nbytes) > avail - t.offset)
        fail("tensor " + t.name + " data (offset " + std::to_string(t.offset) + ", " +
             std::to_string(t.nbytes) + " bytes) is out of bounds: the data section has " +
             std::to_string(avail) + " bytes (truncated file?)");
    }
  }

  File &f_;
  const uint8_t *p_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

//===- File ----------------------------------------------------------------===//

File File::open(const std::string &path) {
  File f;
  f.path_ = path;
  f.map_ = MappedFile::open(path);
  Parser(f).parse();
  return f;
}

const Value *File::find(const std::string &key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::optional<int64_t> File::getInt(const std::string &key) const {
  const Value *v = find(key);
  if (!v)
    return std::nullopt;
  if (v->type == ValueType::Array)
    fail("metadata " + key + " is an array (per-layer values are not supported)");
  if (!v->isInteger())
    fail("metadata " + key + " should be an integer, found " + valueTypeName(v->type));
  if (v->type == ValueType::U64 && v->u > uint64_t(INT64_MAX))
    fail("metadata " + key + " is out of range");
  return v->i;
}

std::optional<double> File::getFloat(const std::string &key) const {
  const Value *v = find(key);
  if (!v)
    return std::nullopt;
  if (v->isFloat())
    return v->f;
  if (v->isInteger())
    return double(v->i);
  fail("metadata " + key + " should be a number, found " + valueTypeName(v->type));
}

std::optional<bool> File::getBool(const std::string &key) const {
  const Value *v = find(key);
  if (!v)
    return std::nullopt;
  if (v->type == ValueType::Bool)
    return v->u != 0;
  if (v->isInteger())
    return v->i != 0;
  fail("metadata " + key + " should be a bool, found " + valueTypeName(v->type));
}

std::optional<std::string> File::getString(const std::string &key) const {
  const Value *v = find(key);
  if (!v)
    return std::nullopt;
  if (v->type != ValueType::String)
    fail("metadata " + key + " should be a string, found " + valueTypeName(v->type));
  return std::string(v->s);
}

const Value &File::expectArray(const std::string &key, const Value &v) const {
  if (v.type != ValueType::Array)
    fail("metadata " + key + " should be an array, found " + valueTypeName(v.type));
  return v;
}

std::optional<std::vector<std::string>> File::getStringArray(const std::string &key) const {
  const Value *v = find(key);
  if (!v)
    return std::nullopt;
  expectArray(key, *v);
  if (v->elem_type != ValueType::String)
    fail("metadata " + key + " should be an array of strings, found " + valueTypeName(v->elem_type));
  std::vector<std::string> out;
  out.reserve(size_t(v->count));
  const uint8_t *p = v->elems; // bounds were checked while parsing
  for (uint64_t e = 0; e < v->count; ++e) {
    uint64_t len;
    std::memcpy(&len, p, 8);
    out.emplace_back(reinterpret_cast<const char *>(p + 8), size_t(len));
    p += 8 + len;
  }
  return out;
}

std::optional<std::vector<float>> File::getFloatArray(const std::string &key) const {
  const Value *v = find(key);
  if (!v)
    return std::nullopt;
  expectArray(key, *v);
  std::vector<float> out(size_t(v->count));
  if (v->elem_type == ValueType::F32) {
    std::memcpy(out.data(), v->elems, out.size() * 4);
  } else if (v->elem_type == ValueType::F64) {
    for (size_t e = 0; e < out.size(); ++e) {
      double d;
      std::memcpy(&d, v->elems + 8 * e, 8);
      out[e] = float(d);
    }
  } else {
    fail("metadata " + key + " should be an array of floats, found " + valueTypeName(v->elem_type));
  }
  return out;
}

std::optional<std::vector<int32_t>> File::getIntArray(const std::string &key) const {
  const Value *v = find(key);
  if (!v)
    return std::nullopt;
  expectArray(key, *v);
  std::vector<int32_t> out(size_t(v->count));
  for (size_t e = 0; e < out.size(); ++e) {
    const uint8_t *p = v->elems;
    switch (v->elem_type) {
    case ValueType::I32: case ValueType::U32: std::memcpy(&out[e], p + 4 * e, 4); break;
    case ValueType::I8: out[e] = int8_t(p[e]); break;
    case ValueType::U8: out[e] = p[e]; break;
    case ValueType::I16: { int16_t x; std::memcpy(&x, p + 2 * e, 2); out[e] = x; break; }
    case ValueType::U16: { uint16_t x; std::memcpy(&x, p + 2 * e, 2); out[e] = x; break; }
    default:
      fail("metadata " + key + " should be an array of integers, found " +
           valueTypeName(v->elem_type));
    }
  }
  return out;
}

} // namespace llmc::gguf
