// _dlrr_native.module_tree_version: a fingerprint of an nn.Module tree's structure, so that the
// hook can keep a root's named parameters across steps on torch 1.x, which has no registration
// hooks to say when a tree changed (dlrr_hook/modules.py, ModulePaths.parameters).
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace dlrr::pyext {

// Adds module_tree_version(root, module_type) to the module; 0, or -1 with an exception set.
int addModuleTreeVersion(PyObject* module);

}  // namespace dlrr::pyext
