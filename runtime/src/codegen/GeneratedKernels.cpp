//===- GeneratedKernels.cpp - Load the artifact's generated kernels -------===//
#include "GeneratedKernels.h"
#include "llmc/codegen.h"

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <fstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace llmc::codegen {

namespace {

void makeDirs(const std::string &path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/')
      ::mkdir(path.substr(0, i).c_str(), 0755);
}

std::string hex(uint64_t v) {
  char b[17];
  snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

/// `bytes` as a file in the cache (written once, atomically), for dlopen.
std::string cachedFile(const std::string &key, const std::string &bytes) {
  const std::string dir = jitCacheDir();
  makeDirs(dir);
  const std::string path = dir + "/" + key + ".so";
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && uint64_t(st.st_size) == bytes.size())
    return path;
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    if (!f)
      throw std::runtime_error("cannot write " + tmp + " (set LLMC_JIT_CACHE to a writable folder)");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot create " + path);
  return path;
}

std::string blob(const Artifact &art, const std::string &name, const std::string &ctx) {
  const TensorView *t = art.tensor(name);
  if (!t || t->dtype != DType::U8)
    throw std::runtime_error(ctx + ": tensor '" + name + "' is missing or not u8");
  return std::string(static_cast<const char *>(t->data), size_t(t->nbytes));
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
  if (kind == "attend_f32")
    return opKey(kind, {std::to_string(i64("head_dim"))});
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

std::string jitCacheDir() {
  if (const char *e = std::getenv("LLMC_JIT_CACHE"); e && *e)
    return e;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/llmc/jit";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/llmc/jit";
  return "/tmp/llmc-jit-" + std::to_string(::getuid());
}

std::unique_ptr<GeneratedKernels> GeneratedKernels::load(const Artifact &art, std::string &how) {
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
      !cg["kernels"].is_array() || !cg.contains("source") || !cg["source"].is_string())
    throw std::runtime_error(ctx + ": malformed section (expected abi " + std::to_string(kAbi) +
                             ", kernels, source)");
  const IsaLevel want = targetIsa();
  std::map<IsaLevel, std::string> objects; // level -> tensor name
  if (cg.contains("objects") && cg["objects"].is_object())
    for (auto it = cg["objects"].begin(); it != cg["objects"].end(); ++it)
      if (auto l = parseIsa(it.key()); l && it->is_string())
        objects[*l] = it->get<std::string>();

  std::string path;
  IsaLevel got = want;
  if (objects.count(want)) {
    const std::string bytes = blob(art, objects[want], ctx);
    path = cachedFile("obj-" + hex(checksum64(bytes.data(), bytes.size())), bytes);
    how = std::string("stored ") + isaName(want) + " object";
  } else {
    const std::string source = blob(art, cg["source"].get<std::string>(), ctx);
    const std::string key = "jit-" + hex(checksum64(source.data(), source.size())) + "-" +
                            isaName(want);
    const std::string cached = jitCacheDir() + "/" + key + ".so";
    struct stat st;
    if (::stat(cached.c_str(), &st) == 0) {
      path = cached;
      how = std::string("JIT ") + isaName(want) + " object from the cache " + cached;
    } else {
      try {
        SharedObject so = compileSharedObject(source, want);
        path = cachedFile(key, so.bytes);
        char buf[64];
        snprintf(buf, sizeof buf, " in %.2f s", so.seconds);
        how = std::string("JIT-compiled for ") + isaName(want) + buf + " (" + so.compiler + ")";
      } catch (const std::exception &e) {
        // No compiler here: the best stored object below `want` that this
        // CPU runs (v3-vnni is below v4 but not a subset of it).
        auto best = objects.end();
        for (auto it = objects.begin(); it != objects.end() && int(it->first) < int(want); ++it)
          if (hostRuns(it->first))
            best = it;
        if (best == objects.end()) {
          how = std::string("none: no ") + isaName(want) + " object and no JIT (" + e.what() + ")";
          return nullptr;
        }
        got = best->first;
        const std::string bytes = blob(art, best->second, ctx);
        path = cachedFile("obj-" + hex(checksum64(bytes.data(), bytes.size())), bytes);
        how = std::string("stored ") + isaName(got) + " object (no " + isaName(want) +
              " object, JIT unavailable: " + e.what() + ")";
      }
    }
  }
  void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h)
    throw std::runtime_error(ctx + ": cannot load " + path + ": " + ::dlerror());
  std::unique_ptr<GeneratedKernels> g(new GeneratedKernels());
  g->handle_ = h;
  g->isa_ = isaName(got);
  using AbiFn = int (*)();
  auto abi = reinterpret_cast<AbiFn>(::dlsym(h, "llmc_codegen_abi"));
  if (!abi || abi() != kAbi)
    throw std::runtime_error(ctx + ": " + path + " is not an llmc kernel object of abi " +
                             std::to_string(kAbi));
  for (const nlohmann::json &k : cg["kernels"]) {
    const std::string sym = k.value("symbol", ""), kind = k.value("kind", "matvec");
    if (sym.empty())
      throw std::runtime_error(ctx + ": kernel entry without a symbol: " + k.dump());
    const std::string op = opEntryKey(k, kind, ctx);
    if (op.empty() && kind != "matvec" && kind != "rows8_int8")
      throw std::runtime_error(ctx + ": unknown kernel kind '" + kind + "' in " + k.dump());
    void *fn = ::dlsym(h, sym.c_str());
    if (!fn)
      throw std::runtime_error(ctx + ": " + path + " has no symbol " + sym);
    if (!op.empty()) {
      g->ops_[op] = fn;
      continue;
    }
    const int64_t cols = k.value("cols", int64_t(0));
    auto dtype = dtypeFromName(k.value("dtype", ""));
    if (!dtype || cols <= 0)
      throw std::runtime_error(ctx + ": malformed kernel entry " + k.dump());
    if (kind == "matvec")
      g->fns_[{*dtype, cols}] = reinterpret_cast<MatvecFn>(fn);
    else
      g->rows8_[{*dtype, cols}] = reinterpret_cast<Rows8Fn>(fn);
  }
  return g;
}

GeneratedKernels::~GeneratedKernels() {
  if (handle_)
    ::dlclose(handle_);
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

EmbedFn GeneratedKernels::findEmbed(DType dtype, int64_t cols) const {
  return reinterpret_cast<EmbedFn>(
      findOp(opKey("embed", {std::string(dtypeName(dtype)), std::to_string(cols)})));
}

AddFn GeneratedKernels::findAdd() const { return reinterpret_cast<AddFn>(findOp(opKey("add", {}))); }

} // namespace llmc::codegen
