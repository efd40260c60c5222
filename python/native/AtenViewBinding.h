//===- AtenViewBinding.h - The aten view table in Python -------*- C++ -*-===//

#ifndef LOADPLAN_PYTHON_ATENVIEWBINDING_H
#define LOADPLAN_PYTHON_ATENVIEWBINDING_H

#include <nanobind/nanobind.h>

namespace loadplan_python {

/// Adds ATEN_VIEWS and lower_view, the capture's way to the aten view table
/// (loadplan/Records/AtenViews.h), to `m`.
void defineAtenViews(nanobind::module_ &m);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_ATENVIEWBINDING_H
