//===- GeneratedKernels.cpp - Load the artifact's generated kernels -------===//
#include "GeneratedKernels.h"
#include "llmc/codegen.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace llmc::codegen {

namespace {

/// The bytes of the object stored as tensor `name`, in a sealed memory
/// file: nothing on disk, nothing another process can swap or rewrite, and
/// what is checked against the signed digest is what dlopen maps.
int sealedObject(const Artifact &art, const std::string &name, const std::string &ctx) {
  const TensorView *t = art.tensor(name);
  if (!t || t->dtype != DType::U8 || t->nbytes <= 0)
    throw std::runtime_error(ctx + ": object '" + name + "' is missing or not u8");
  int fd = ::memfd_create("llmc-kernels", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    throw std::runtime_error(ctx + ": memfd_create failed: " + std::strerror(errno));
  const uint8_t *p = static_cast<const uint8_t *>(t->data);
  for (int64_t done = 0; done < t->nbytes;) {
    const ssize_t w = ::write(fd, p + done, size_t(t->nbytes - done));
    if (w <= 0) {
      ::close(fd);
      throw std::runtime_error(ctx + ": cannot copy the kernel object");
    }
    done += w;
  }
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    ::close(fd);
    throw std::runtime_error(ctx + ": cannot seal the kernel object");
  }
  if (const signing::Digest *want = art.tensorDigest(name)) {
    void *m = ::mmap(nullptr, size_t(t->nbytes), PROT_READ, MAP_SHARED, fd, 0);
    const bool ok = m != MAP_FAILED && signing::sha256(m, size_t(t->nbytes)) == *want;
    if (m != MAP_FAILED)
      ::munmap(m, size_t(t->nbytes));
    if (!ok) {
      ::close(fd);
      throw std::runtime_error(ctx + ": object '" + name +
                               "' does not match its signed SHA-256 (tampered)");
    }
  } else if (!art.builtInThisProcess()) {
    ::close(fd);
    throw std::runtime_error(ctx + ": object '" + name + "' has no signed digest");
  }
  return fd;
}

/// Whether the artifact's native code may run here; `how` says why not.
bool codeMayRun(const Artifact &art, const signing::CodeTrust &trust, std::string &how) {
  if (art.builtInThisProcess())
    return true;
  const SignatureCheck c = art.checkSignature(trust.keys);
  if (c.status == SignatureStatus::Trusted)
    return true;
  const std::string why = art.path() + " is " + c.describe();
  if (trust.require_signed)
    throw std::runtime_error(why + ": its generated kernels are not run (--require-signed); "
                                   "sign it with `llmc compile --sign KEY` and trust the key "
                                   "with --trusted-key or the trust store " +
                             signing::defaultTrustDir());
  how = "not run: " + why + "; the runtime's built-in kernels run instead";
  return false;
}

/// The lookup key of an op kernel from its manifest fields (what a plan
/// step is matched on).
std::string opKey(const std::string &kind, const std::vector<std::string> &fields) {
  std::string k = kind;
  for (const std::string &f : fields)
    k += ":" + f;
  return k;
}

std::string exactDouble(double v) {
  char b[40];
  snprintf(b, sizeof b, "%.17g", v);
  return b;
}

std::string ropeKey(int64_t heads, int64_t kvHeads, int64_t headDim, double theta, bool interleaved) {
  return opKey("rope", {std::to_string(heads), std::to_string(kvHeads), std::to_string(headDim),
                        exactDouble(theta), interleaved ? "interleaved" : "half"});
}

/// The key of a manifest op entry; "" when `kind` is not an op kernel.
std::string opEntryKey(const nlohmann::json &k, const std::string &kind, const std::string &ctx) {
  auto i64 = [&](const char *f) {
    if (!k.contains(f) || !k[f].is_number_integer() || k[f].get<int64_t>() <= 0)
      throw std::runtime_error(ctx + ": kernel entry without a positive '" + f + "': " + k.dump());
    return k[f].get<int64_t>();
  };
  auto str = [&](const char *f) {
    if (!k.contains(f) || !k[f].is_string())
      throw std::runtime_error(ctx + ": kernel entry without '" + f + "': " + k.dump());
    return k[f].get<std::string>();
  };
  if (kind == "rms_norm")
    return opKey(kind, {std::to_string(i64("cols"))});
  if (kind == "gate")
    return opKey(kind, {str("activation")});
  if (kind == "rope") {
    if (!k.contains("rope_theta") || !k["rope_theta"].is_number())
      throw std::runtime_error(ctx + ": rope kernel entry without 'rope_theta': " + k.dump());
    return ropeKey(i64("num_heads"), i64("num_kv_heads"), i64("head_dim"),
                   k["rope_theta"].get<double>(), str("rope_style") == "interleaved");
  }
  if (kind == "attend_f32" || kind == "attend_f32_rows")
    return opKey(kind, {std::to_string(i64("head_dim"))});
  if (kind == "attend_f32_group" || kind == "attend_f32_rows_group" ||
      kind == "attend_f16_rows_group" || kind == "attend_q8_0_rows_group")
    return opKey(kind, {std::to_string(i64("head_dim")), std::to_string(i64("group"))});
  if (kind == "embed") {
    auto dtype = dtypeFromName(str("dtype"));
    if (!dtype)
      throw std::runtime_error(ctx + ": embed kernel entry of an unknown format: " + k.dump());
    return opKey(kind, {std::string(dtypeName(*dtype)), std::to_string(i64("cols"))});
  }
  if (kind == "add")
    return opKey(kind, {});
  return "";
}

} // namespace

std::unique_ptr<GeneratedKernels> GeneratedKernels::load(const Artifact &art,
                                                         const signing::CodeTrust &trust,
                                                         std::string &how) {
  const nlohmann::json &m = art.manifest();
  if (!m.contains("codegen")) {
    how = "no generated kernels in the artifact";
    return nullptr;
  }
  const std::string ctx = art.path() + ": codegen";
  const nlohmann::json &cg = m["codegen"];
  if (cg.is_object() && cg.contains("abi") && cg["abi"].is_number_integer() &&
      cg["abi"].get<int>() != kAbi) {
    how = "generated kernels of abi " + std::to_string(cg["abi"].get<int>()) +
          " (this runtime runs abi " + std::to_string(kAbi) + "; recompile the artifact)";
    return nullptr;
  }
  if (!cg.is_object() || cg.value("abi", 0) != kAbi || !cg.contains("kernels") ||
      !cg["kernels"].is_array() || !cg.contains("objects") || !cg["objects"].is_object())
    throw std::runtime_error(ctx + ": malformed section (expected abi " + std::to_string(kAbi) +
                             ", kernels, objects)");
  if (!codeMayRun(art, trust, how))
    return nullptr;
  std::map<IsaLevel, std::string> objects; // level -> tensor name
  for (auto it = cg["objects"].begin(); it != cg["objects"].end(); ++it)
    if (auto l = parseIsa(it.key()); l && it->is_string())
      objects[*l] = it->get<std::string>();
  // The object of the level asked for (the CPU's, or LLMC_ISA), else the
  // best stored level below it that this CPU runs (v3-vnni is below v4 but
  // not a subset of it).
  const IsaLevel want = targetIsa();
  auto pick = objects.find(want);
  if (pick == objects.end())
    for (auto it = objects.begin(); it != objects.end() && int(it->first) < int(want); ++it)
      if (hostRuns(it->first))
        pick = it;
  if (pick == objects.end()) {
    how = std::string("none: the artifact has no object this CPU runs (it runs ") +
          isaName(want) + ")";
    return nullptr;
  }
  const IsaLevel got = pick->first;
  how = std::string("stored ") + isaName(got) + " object" +
        (got == want ? "" : std::string(" (the artifact has no ") + isaName(want) + " object)");
  const int fd = sealedObject(art, pick->second, ctx);
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  // The descriptor stays open while the object is loaded: dlopen knows a
  // library by its path, and a reused descriptor number would name the
  // object of an earlier artifact still loaded in this process.
  std::unique_ptr<GeneratedKernels> g(new GeneratedKernels());
  g->fd_ = fd;
  void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h)
    throw std::runtime_error(ctx + ": cannot load the " + isaName(got) + " object: " + ::dlerror());
  g->handle_ = h;
  g->isa_ = isaName(got);
  using AbiFn = int (*)();
  auto abi = reinterpret_cast<AbiFn>(::dlsym(h, "llmc_codegen_abi"));
  if (!abi || abi() != kAbi)
    throw std::runtime_error(ctx + ": the " + std::string(isaName(got)) +
                             " object is not an llmc kernel object of abi " + std::to_string(kAbi));
  g->bindSymbols(cg["kernels"], ctx);
  return g;
}

void GeneratedKernels::bindSymbols(const nlohmann::json &kernels, const std::string &ctx) {
  for (const nlohmann::json &k : kernels) {
    const std::string sym = k.value("symbol", ""), kind = k.value("kind", "matvec");
    if (sym.empty())
      throw std::runtime_error(ctx + ": kernel entry without a symbol: " + k.dump());
    const std::string op = opEntryKey(k, kind, ctx);
    if (op.empty() && kind != "matvec" && kind != "rows8_int8")
      throw std::runtime_error(ctx + ": unknown kernel kind '" + kind + "' in " + k.dump());
    void *fn = ::dlsym(handle_, sym.c_str());
    if (!fn)
      throw std::runtime_error(ctx + ": the " + isa_ + " object has no symbol " + sym);
    if (!op.empty()) {
      ops_[op] = fn;
      continue;
    }
    const int64_t cols = k.value("cols", int64_t(0));
    auto dtype = dtypeFromName(k.value("dtype", ""));
    if (!dtype || cols <= 0)
      throw std::runtime_error(ctx + ": malformed kernel entry " + k.dump());
    if (kind == "matvec")
      fns_[{*dtype, cols}] = reinterpret_cast<MatvecFn>(fn);
    else
      rows8_[{*dtype, cols}] = reinterpret_cast<Rows8Fn>(fn);
  }
}

GeneratedKernels::~GeneratedKernels() {
  if (handle_)
    ::dlclose(handle_);
  if (fd_ >= 0)
    ::close(fd_);
}

MatvecFn GeneratedKernels::find(DType dtype, int64_t cols) const {
  auto it = fns_.find({dtype, cols});
  return it == fns_.end() ? nullptr : it->second;
}

Rows8Fn GeneratedKernels::findRows8(DType dtype, int64_t cols) const {
  auto it = rows8_.find({dtype, cols});
  return it == rows8_.end() ? nullptr : it->second;
}

void *GeneratedKernels::findOp(const std::string &key) const {
  auto it = ops_.find(key);
  return it == ops_.end() ? nullptr : it->second;
}

RmsNormFn GeneratedKernels::findRmsNorm(int64_t cols) const {
  return reinterpret_cast<RmsNormFn>(findOp(opKey("rms_norm", {std::to_string(cols)})));
}

GateFn GeneratedKernels::findGate(const std::string &activation) const {
  return reinterpret_cast<GateFn>(findOp(opKey("gate", {activation})));
}

RopeFn GeneratedKernels::findRope(int64_t heads, int64_t kvHeads, int64_t headDim, double theta,
                                  bool interleaved) const {
  return reinterpret_cast<RopeFn>(findOp(ropeKey(heads, kvHeads, headDim, theta, interleaved)));
}

AttendFn GeneratedKernels::findAttendF32(int64_t headDim) const {
  return reinterpret_cast<AttendFn>(findOp(opKey("attend_f32", {std::to_string(headDim)})));
}

AttendRowsFn GeneratedKernels::findAttendF32Rows(int64_t headDim) const {
  return reinterpret_cast<AttendRowsFn>(
      findOp(opKey("attend_f32_rows", {std::to_string(headDim)})));
}

AttendGroupFn GeneratedKernels::findAttendF32Group(int64_t headDim, int64_t group) const {
  return reinterpret_cast<AttendGroupFn>(
      findOp(opKey("attend_f32_group", {std::to_string(headDim), std::to_string(group)})));
}

AttendRowsGroupFn GeneratedKernels::findAttendF32RowsGroup(int64_t headDim, int64_t group) const {
  return reinterpret_cast<AttendRowsGroupFn>(
      findOp(opKey("attend_f32_rows_group", {std::to_string(headDim), std::to_string(group)})));
}

AttendRowsGroupF16Fn GeneratedKernels::findAttendF16RowsGroup(int64_t headDim,
                                                              int64_t group) const {
  return reinterpret_cast<AttendRowsGroupF16Fn>(
      findOp(opKey("attend_f16_rows_group", {std::to_string(headDim), std::to_string(group)})));
}

AttendRowsGroupQ8Fn GeneratedKernels::findAttendQ8RowsGroup(int64_t headDim,
                                                            int64_t group) const {
  return reinterpret_cast<AttendRowsGroupQ8Fn>(
      findOp(opKey("attend_q8_0_rows_group", {std::to_string(headDim), std::to_string(group)})));
}

EmbedFn GeneratedKernels::findEmbed(DType dtype, int64_t cols) const {
  return reinterpret_cast<EmbedFn>(
      findOp(opKey("embed", {std::string(dtypeName(dtype)), std::to_string(cols)})));
}

AddFn GeneratedKernels::findAdd() const { return reinterpret_cast<AddFn>(findOp(opKey("add", {}))); }

} // namespace llmc::codegen
