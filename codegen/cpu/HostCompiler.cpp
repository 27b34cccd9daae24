//===- HostCompiler.cpp - Build generated C++ into a shared object --------===//
// In process, with no compiler subprocess: clang's driver (libclang-cpp)
// turns the flags into one cc1 invocation, the CompilerInstance emits the
// object, and lld's ELF driver links it into a shared object. Only the
// generated source's own file and the object pass through a private (0700)
// temporary folder that is removed before returning.
//===----------------------------------------------------------------------===//
#include "codegen/cpu/HostCompiler.h"
#include "codegen/KernelCache.h"

#include "clang/Basic/Diagnostic.h"
#include "clang/Basic/DiagnosticIDs.h"
#include "clang/Basic/DiagnosticOptions.h"
#include "clang/Basic/Version.h"
#include "clang/CodeGen/CodeGenAction.h"
#include "clang/Driver/Compilation.h"
#include "clang/Driver/Driver.h"
#include "clang/Driver/Job.h"
#include "clang/Driver/Tool.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "lld/Common/Driver.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/VirtualFileSystem.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unistd.h>
#include <vector>

LLD_HAS_DRIVER(elf)

namespace llmc::codegen {

namespace {

// Where clang's driver looks for its resource headers (immintrin.h) and the
// GCC installation (the C++ standard headers): next to the clang of the
// LLVM this binary links.
constexpr const char *kClangDriverPath = LLMC_CLANG_DRIVER_PATH;

std::vector<std::string> flagList(IsaLevel level) {
  // The -vnni levels are their base level's -march plus the VNNI extension.
  const IsaLevel base = level == IsaLevel::V3Vnni   ? IsaLevel::V3
                        : level == IsaLevel::V4Vnni ? IsaLevel::V4
                                                    : level;
  std::vector<std::string> f = {"-O3", std::string("-march=") + isaName(base), "-mtune=generic"};
  if (level == IsaLevel::V3Vnni)
    f.push_back("-mavxvnni");
  if (level == IsaLevel::V4Vnni)
    f.push_back("-mavx512vnni");
  for (const char *o : {"-std=c++17", "-fPIC", "-fopenmp-simd", "-fno-math-errno", "-fno-plt", "-w"})
    f.push_back(o);
  return f;
}

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

/// A private temporary folder (mode 0700) and the files written in it,
/// removed on destruction.
class PrivateDir {
public:
  PrivateDir() {
    const char *tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/llmc-cg-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
      throw std::runtime_error("cannot create a temporary folder for the generated kernels");
    dir_ = buf.data();
  }
  ~PrivateDir() {
    for (const std::string &f : files_)
      ::unlink(f.c_str());
    ::rmdir(dir_.c_str());
  }
  PrivateDir(const PrivateDir &) = delete;
  PrivateDir &operator=(const PrivateDir &) = delete;
  std::string file(const std::string &name) {
    files_.push_back(dir_ + "/" + name);
    return files_.back();
  }

private:
  std::string dir_;
  std::vector<std::string> files_;
};

/// Compile the C++ file `src` into the object `obj` in this process.
/// False with clang's diagnostics in `log` on failure.
bool compileObject(const std::string &src, const std::string &obj, IsaLevel level,
                   std::string &log) {
  initializeNativeTarget();
  llvm::raw_string_ostream os(log);
  clang::DiagnosticOptions diagOpts;
  clang::TextDiagnosticPrinter printer(os, diagOpts);
  clang::DiagnosticsEngine diags(clang::DiagnosticIDs::create(), diagOpts, &printer,
                                 /*ShouldOwnClient=*/false);
  clang::driver::Driver driver(kClangDriverPath, llvm::sys::getDefaultTargetTriple(), diags,
                               "llmc kernel codegen");
  std::vector<std::string> args = {kClangDriverPath};
  for (const std::string &f : flagList(level))
    args.push_back(f);
  args.insert(args.end(), {"-c", "-x", "c++", src, "-o", obj});
  std::vector<const char *> argv;
  for (const std::string &a : args)
    argv.push_back(a.c_str());
  std::unique_ptr<clang::driver::Compilation> comp(driver.BuildCompilation(argv));
  if (!comp || diags.hasErrorOccurred())
    return false;
  const clang::driver::JobList &jobs = comp->getJobs();
  if (jobs.size() != 1 || std::string(jobs.begin()->getCreator().getName()) != "clang") {
    os << "clang's driver planned " << jobs.size() << " jobs instead of one compile";
    return false;
  }
  auto invocation = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(*invocation, jobs.begin()->getArguments(), diags))
    return false;
  clang::CompilerInstance ci(std::move(invocation));
  ci.createVirtualFileSystem(llvm::vfs::getRealFileSystem(), &printer);
  ci.createDiagnostics(&printer, /*ShouldOwnClient=*/false);
  clang::EmitObjAction action;
  return ci.ExecuteAction(action) && !ci.getDiagnostics().hasErrorOccurred();
}

/// Link the object into a shared object with lld's ELF driver. lld keeps
/// global state, so links run one at a time. No libraries are named: the
/// kernels call only memcpy and libm (sincos), which the runtime process
/// has loaded; dlopen resolves them there.
bool linkSharedObject(const std::string &obj, const std::string &so, std::string &log) {
  static std::mutex lldMutex;
  std::lock_guard<std::mutex> lock(lldMutex);
  llvm::raw_string_ostream os(log);
  const char *argv[] = {"ld.lld", "-shared", "--hash-style=gnu", "-z", "relro", "-z", "now",
                        "-o",     so.c_str(), obj.c_str()};
  const lld::Result r = lld::lldMain(argv, os, os, {{lld::Gnu, &lld::elf::link}});
  if (!r.canRunAgain)
    os << " (the linker cannot run again in this process)";
  return r.retCode == 0;
}

std::string readFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

} // namespace

std::string compilerDescription() {
  return std::string("clang ") + CLANG_VERSION_STRING + " and lld " + CLANG_VERSION_STRING +
         ", in process";
}

std::string compileFlags(IsaLevel level) {
  std::string s;
  for (const std::string &f : flagList(level))
    s += (s.empty() ? "" : " ") + f;
  return s;
}

namespace {
/// The shared object's bytes, built by clang and lld (no cache).
std::string buildSharedObject(const std::string &source, IsaLevel level) {
  PrivateDir dir;
  const std::string src = dir.file("kernels.cpp"), obj = dir.file("kernels.o"),
                    so = dir.file("kernels.so");
  {
    std::ofstream f(src, std::ios::binary);
    f << source;
    if (!f)
      throw std::runtime_error("cannot write " + src);
  }
  std::string log;
  if (!compileObject(src, obj, level, log))
    throw std::runtime_error(std::string("clang failed building the ") + isaName(level) +
                             " kernels: " + log.substr(0, 2000));
  if (!linkSharedObject(obj, so, log))
    throw std::runtime_error(std::string("lld failed linking the ") + isaName(level) +
                             " kernels: " + log.substr(0, 2000));
  std::string bytes = readFile(so);
  if (bytes.empty())
    throw std::runtime_error(std::string("no object was produced for the ") + isaName(level) +
                             " kernels");
  return bytes;
}
} // namespace

SharedObject compileSharedObject(const std::string &source, IsaLevel level) {
  auto t0 = std::chrono::steady_clock::now();
  const std::string key =
      KernelCache::key({"cpu shared object", compilerDescription(), compileFlags(level), source});
  SharedObject out;
  out.bytes = KernelCache::process().getOrBuild(
      key, [&] { return buildSharedObject(source, level); }, &out.cached);
  out.compiler = compilerDescription();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

} // namespace llmc::codegen
