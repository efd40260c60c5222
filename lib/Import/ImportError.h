//===- ImportError.h - Errors of the torch.export reader --------*- C++ -*-===//
//
// The LibTorch side of the importer reports an archive or program it cannot
// read by throwing ImportError with the user's message, from wherever it
// finds the fault; readTorchExport catches it at the interface, which never
// throws.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_LIB_IMPORT_IMPORTERROR_H
#define LOADPLAN_LIB_IMPORT_IMPORTERROR_H

#include <cctype>
#include <stdexcept>
#include <string>

namespace mlir::loadplan::torch_export {

/// An archive or program this importer cannot read; the message is the
/// user's.
struct ImportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Stops the import with `message`.
[[noreturn]] inline void fail(const std::string &message) {
  throw ImportError(message);
}

/// `text` without trailing white space.
inline std::string trim(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.pop_back();
  return text;
}

/// The first line of a LibTorch error, without its C++ stack.
inline std::string firstLine(const std::string &text) {
  return trim(text.substr(0, text.find('\n')));
}

} // namespace mlir::loadplan::torch_export

#endif // LOADPLAN_LIB_IMPORT_IMPORTERROR_H
