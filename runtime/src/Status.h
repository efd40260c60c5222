//===- Status.h - Errors inside the runtime and at its C boundary -*- C++ -*-===//
//
// Inside the runtime an error is a thrown StatusError (or any C++ exception);
// every C entry point runs its body through guard(), which turns whatever was
// thrown into a loadplan_status_t so that nothing crosses the C boundary.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_STATUS_H
#define LOADPLAN_RUNTIME_STATUS_H

#include "loadplan/runtime.h"

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

struct loadplan_status_handle_t {
  loadplan_status_code_t code;
  std::string message;
};

namespace loadplan {

/// An error on its way to the C boundary.
class StatusError {
public:
  StatusError(loadplan_status_code_t code, std::string message)
      : code(code), message(std::move(message)) {}
  loadplan_status_code_t code;
  std::string message;
};

/// Streams its arguments into one string; vectors print as [a, b].
template <typename... Args> std::string concat(const Args &...args);

namespace detail {
inline void put(std::ostringstream &os, std::string_view s) { os << s; }
inline void put(std::ostringstream &os, const char *s) { os << s; }
inline void put(std::ostringstream &os, const std::string &s) { os << s; }
template <typename T> void put(std::ostringstream &os, const std::vector<T> &v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << ']';
}
template <typename T> void put(std::ostringstream &os, const T &v) { os << v; }
} // namespace detail

template <typename... Args> std::string concat(const Args &...args) {
  std::ostringstream os;
  (detail::put(os, args), ...);
  return os.str();
}

/// Throws a StatusError whose message is the concatenation of `args`.
template <typename... Args>
[[noreturn]] void fail(loadplan_status_code_t code, const Args &...args) {
  throw StatusError(code, concat(args...));
}

/// Throws INVALID_ARGUMENT saying `what` unless `condition`: the C API's
/// checks of what it is handed (NULL pointers, mostly).
inline void require(bool condition, const char *what) {
  if (!condition)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, what);
}

/// A dtype a caller gave, for messages: torch's name, or the code where it
/// names none.
inline std::string dtypeText(uint32_t dtype) {
  if (loadplan_dtype_size(dtype) == 0)
    return "code " + std::to_string(dtype) + " (no such dtype)";
  return loadplan_dtype_name(dtype);
}

/// A status for `code` and `prefix` + `message`; never throws (out of memory gives the
/// preallocated out-of-memory status).
loadplan_status_t makeStatus(loadplan_status_code_t code,
                             std::string_view message,
                             std::string_view prefix = {}) noexcept;

/// Runs `body`, turning anything it throws into a status.
template <typename F> loadplan_status_t guard(F &&body) noexcept {
  try {
    body();
    return nullptr;
  } catch (StatusError &e) {
    return makeStatus(e.code, e.message);
  } catch (const std::bad_alloc &) {
    return makeStatus(LOADPLAN_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception &e) {
    return makeStatus(LOADPLAN_STATUS_INTERNAL, e.what(),
                      "unexpected exception: ");
  } catch (...) {
    return makeStatus(LOADPLAN_STATUS_INTERNAL, "unexpected exception");
  }
}

/// A quoted, printable form of a name from a plan or a caller, for messages.
std::string quote(std::string_view name);

} // namespace loadplan

#endif // LOADPLAN_RUNTIME_STATUS_H
