//===- Errors.h - The runtime's errors in loadplan._native -----*- C++ -*-===//
//
// How a failed runtime call reaches Python: its status becomes StatusError
// or a subclass, carrying the runtime's code and message. The classes are
// made once, by defineErrors; every binding of the C API raises through
// here.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_ERRORS_H
#define LOADPLAN_PYTHON_ERRORS_H

#include "loadplan/runtime.h"

#include <string>

namespace loadplan_python {

/// Raises the Python error of a non-NULL status, and frees it: StatusError
/// or, by its code, InvalidPlan, FingerprintMismatch or InvalidUpdate. With
/// `transfer`, always TransferError (a StatusError too).
void check(loadplan_status_t status, bool transfer = false);

/// Raises InvalidUpdate with `message`: an update batch refused before a
/// byte was written.
[[noreturn]] void refuseUpdate(const std::string &message);

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_ERRORS_H
