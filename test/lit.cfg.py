# -*- Python -*-
# lit configuration for the loadplan compiler tests.

import os

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "LOADPLAN"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.loadplan_obj_root, "test")
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%loadplan_src", config.loadplan_src_root))

llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()
# not, count and FileCheck anywhere on a RUN line, not only after a pipe.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.loadplan_tools_dir, config.llvm_tools_dir]
tools = ["loadplan-opt"]
# test/Import: loadplan-translate is built where LibTorch is found.
if getattr(config, "loadplan_torch_import", 0):
    config.available_features.add("torch-import")
    tools.append("loadplan-translate")
    if getattr(config, "loadplan_python", ""):
        config.available_features.add("torch-python")
        config.substitutions.append(("%loadplan_python", config.loadplan_python))
llvm_config.add_tool_substitutions(tools, tool_dirs)
