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
config.substitutions.append(("%python", config.llmc_python))
config.substitutions.append(("%src", config.llmc_src_root))
config.substitutions.append(("%shared", config.llmc_shared_dir))
smollm = os.path.join(config.llmc_src_root, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
config.substitutions.append(("%smollm2", smollm))
if os.path.exists(smollm):
    config.available_features.add("smollm2")
if os.path.exists(os.path.join(config.llmc_shared_dir, "models", "stories260K.bin")):
    config.available_features.add("stories260k")
