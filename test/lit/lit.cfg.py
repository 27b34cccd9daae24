# lit configuration for llmc: IR round trips, verifier errors, importers, CLI.
import os
import lit.formats

config.name = "llmc"
config.test_format = lit.formats.ShTest(not lit.llvm_config if hasattr(lit, "llvm_config") else True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.llmc_obj_root, "test", "lit")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]

path = os.path.pathsep.join([config.llmc_tools_dir, config.llvm_tools_dir,
                             config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path
# The tests' kernel cache (codegen/KernelCache.h) lives in the build tree, as
# the end-to-end tests' does: a fresh build starts it empty.
config.environment["LLMC_CACHE_DIR"] = os.path.join(config.llmc_obj_root, "kernel-cache")
# Kernel objects for this CPU's level only (llmc compile --cpu-levels): the
# tests run them here, and a fresh build's empty cache made building all six
# levels of every test model most of a CI run's compile time.
config.environment["LLMC_CPU_LEVELS"] = "host"
config.substitutions.append(("%python", config.llmc_python))
config.substitutions.append(("%src", config.llmc_src_root))
config.substitutions.append(("%shared", config.llmc_shared_dir))
smollm = os.path.join(config.llmc_src_root, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
config.substitutions.append(("%smollm2", smollm))
# Tests that REQUIRE a model report UNSUPPORTED without it; under CI
# (CI=true) a missing model is an error instead, so nothing passes untested.
stories = os.path.join(config.llmc_shared_dir, "models", "stories260K.bin")
for feature, path in (("smollm2", smollm), ("stories260k", stories)):
    if os.path.exists(path):
        config.available_features.add(feature)
    elif os.environ.get("CI") == "true":
        lit_config.fatal(f"{path} not found (feature '{feature}'); CI=true: a missing model fails the run")
    else:
        lit_config.note(f"{path} not found: tests that REQUIRE '{feature}' are UNSUPPORTED")

# A private XDG_CONFIG_HOME with a default signing key that is trusted there
# (llmc keygen), as on a developer's machine: artifacts the tests compile are
# signed and run their generated kernels, and no test touches ~/.config.
signing_home = os.path.join(config.test_exec_root, "signing-config")
config.environment["XDG_CONFIG_HOME"] = signing_home
if not os.path.exists(os.path.join(signing_home, "llmc", "signing.key")):
    import subprocess
    keygen = subprocess.run([os.path.join(config.llmc_tools_dir, "llmc"), "keygen",
                             "--comment", "lit test key"], capture_output=True, text=True,
                            env=dict(os.environ, XDG_CONFIG_HOME=signing_home))
    if keygen.returncode != 0:
        lit_config.fatal(f"llmc keygen for the lit tests' signing key failed: {keygen.stderr}")
