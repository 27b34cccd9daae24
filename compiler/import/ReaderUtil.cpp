//===- ReaderUtil.cpp - Helpers shared by the model readers ----------------===//
// See ReaderUtil.h.
//===----------------------------------------------------------------------===//
#include "compiler/import/ReaderUtil.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace llmc {

void importFail(const std::string &file, const std::string &problem) {
  throw ImportError(file + ": " + problem);
}

//===- MappedFile ----------------------------------------------------------===//

std::shared_ptr<MappedFile> MappedFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    importFail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    importFail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    importFail(path, "not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = uint64_t(st.st_size);
  if (f->size_ > 0) {
    void *p = ::mmap(nullptr, size_t(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      importFail(path, std::string("cannot mmap: ") + std::strerror(err));
    }
    f->map_ = p;
    f->data_ = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (map_)
    ::munmap(map_, size_t(size_));
}

//===- files ---------------------------------------------------------------===//

std::string readTextFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    importFail(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    importFail(path, "read error");
  return ss.str();
}

bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool isDirectory(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string joinPath(const std::string &dir, const std::string &name) {
  if (dir.empty())
    return name;
  if (dir.back() == '/')
    return dir + name;
  return dir + "/" + name;
}

std::string parentDir(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

//===- sizes ---------------------------------------------------------------===//

bool checkedMul(int64_t a, int64_t b, int64_t &out) {
  if (a < 0 || b < 0)
    return false;
  return !__builtin_mul_overflow(a, b, &out);
}

bool checkedNumElements(const std::vector<int64_t> &shape, int64_t &out) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (!checkedMul(n, d, n))
      return false;
  out = n;
  return true;
}

int64_t tensorBytes(const std::string &file, const std::string &tensor, DType t,
                    const std::vector<int64_t> &shape) {
  const DTypeInfo &info = dtypeInfo(t);
  int64_t n;
  if (!checkedNumElements(shape, n))
    importFail(file, "tensor " + tensor + " has an invalid shape " + shapeString(shape));
  int64_t cols = shape.empty() ? 1 : shape.back();
  if (cols % info.block_size != 0)
    importFail(file, "tensor " + tensor + " of type " + std::string(info.name) + " has rows of " +
                         std::to_string(cols) + " elements, not a multiple of the block size " +
                         std::to_string(info.block_size));
  int64_t bytes;
  if (!checkedMul(n / info.block_size, info.block_bytes, bytes))
    importFail(file, "tensor " + tensor + " is too large");
  return bytes;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

//===- validation ----------------------------------------------------------===//

namespace {

class Validator {
public:
  explicit Validator(const SourceModel &m) : m_(m) {}

  void run() {
    const ModelConfig &c = m_.config;
    positive("num_layers", c.num_layers);
    positive("hidden_size", c.hidden_size);
    positive("num_heads", c.num_heads);
    positive("num_kv_heads", c.num_kv_heads);
    positive("head_dim", c.head_dim);
    positive("vocab_size", c.vocab_size);
    positive("intermediate_size", c.intermediate_size);
    if (c.num_heads % c.num_kv_heads != 0)
      fail("num_heads " + std::to_string(c.num_heads) + " is not a multiple of num_kv_heads " +
           std::to_string(c.num_kv_heads));
    if (c.num_experts < 0 || c.num_experts_per_token < 0 ||
        (c.num_experts > 0 &&
         (c.num_experts_per_token <= 0 || c.num_experts_per_token > c.num_experts)))
      fail("bad expert counts: " + std::to_string(c.num_experts) + " experts, " +
           std::to_string(c.num_experts_per_token) + " per token");
    if (!(c.norm_eps > 0.0) || !(c.rope_theta > 0.0))
      fail("norm epsilon and rope theta must be positive");

    for (const SourceTensor &t : m_.tensors) {
      int64_t want = tensorBytes(m_.path, t.name, t.dtype, t.shape);
      if (t.nbytes != want)
        fail("tensor " + t.name + " has " + std::to_string(t.nbytes) + " bytes, expected " +
             std::to_string(want));
      if (!t.data && t.nbytes > 0)
        fail("tensor " + t.name + " has no data");
    }

    const int64_t D = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
    const int64_t Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
    expect("token_embd.weight", {V, D});
    expect("output_norm.weight", {D});
    if (!c.tied_embeddings)
      expect("output.weight", {V, D});
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      expect(p + "attn_norm.weight", {D});
      expect(p + "ffn_norm.weight", {D});
      expect(p + "attn_q.weight", {Q, D});
      expect(p + "attn_k.weight", {KV, D});
      expect(p + "attn_v.weight", {KV, D});
      expect(p + "attn_output.weight", {D, Q});
      if (c.attention_bias) {
        expect(p + "attn_q.bias", {Q});
        expect(p + "attn_k.bias", {KV});
        expect(p + "attn_v.bias", {KV});
      }
      if (c.num_experts > 0) {
        const int64_t E = c.num_experts;
        expect(p + "ffn_gate_inp.weight", {E, D});
        expect(p + "ffn_gate_exps.weight", {E, F, D});
        expect(p + "ffn_up_exps.weight", {E, F, D});
        expect(p + "ffn_down_exps.weight", {E, D, F});
      } else {
        expect(p + "ffn_gate.weight", {F, D});
        expect(p + "ffn_up.weight", {F, D});
        expect(p + "ffn_down.weight", {D, F});
      }
    }
  }

private:
  [[noreturn]] void fail(const std::string &problem) { importFail(m_.path, problem); }

  void positive(const char *what, int64_t v) {
    if (v <= 0)
      fail(std::string("model config: ") + what + " must be positive, got " + std::to_string(v));
  }

  void expect(const std::string &name, const std::vector<int64_t> &shape) {
    const SourceTensor *t = m_.find(name);
    if (!t)
      fail("missing tensor " + name);
    if (t->shape != shape)
      fail("tensor " + name + " has shape " + shapeString(t->shape) + ", expected " +
           shapeString(shape));
  }

  const SourceModel &m_;
};

} // namespace

void validateSourceModel(const SourceModel &m) { Validator(m).run(); }

void addUnitScale(SourceModel &m, const std::string &name, int64_t n) {
  auto buf = std::make_shared<OwnedBuffer>();
  buf->bytes.resize(size_t(n) * sizeof(float));
  const float one = 1.0f;
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(buf->bytes.data() + i * sizeof(float), &one, sizeof(float));
  m.buffers.push_back(buf);
  m.tensors.push_back({name, DType::F32, {n}, buf->bytes.data(), int64_t(buf->bytes.size())});
}

} // namespace llmc
