//===- UpdateCheck.h - An update batch checked against a plan --*- C++ -*-===//
//
// The rules an update of full tensors must keep before a byte is written,
// checked in one place: the module's UpdateCheck class, and the Binding's
// check_update, which holds what it checked for apply_checked.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_PYTHON_UPDATECHECK_H
#define LOADPLAN_PYTHON_UPDATECHECK_H

#include "Plan.h"

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loadplan_python {

/// An update of full tensors, checked against a plan: a list of (name,
/// torch.Tensor) pairs, names of the plan, each once, with the declared
/// dtype and shape, and dense. The one place these rules are written: a
/// batch that breaks one raises InvalidUpdate naming the first item that
/// is wrong and how. Holds the direct entries by index, with their bytes
/// where the executor reads them on the given device, and gives back the
/// fallback pairs. Writes nothing.
class UpdateCheck {
public:
  explicit UpdateCheck(Plan &plan) : plan(&plan) {}

  /// Checks `batch`. `deviceType` is the binding's (loadplan_device_type_t),
  /// or -1 for none: then no bytes are read and each direct tensor is
  /// checked dense as a fallback's is. `ready()` says afterwards whether
  /// every direct tensor's bytes were read.
  nanobind::list check(nanobind::handle batch, int32_t deviceType, int32_t deviceIndex);

  bool ready() const { return allRead && checked.is_valid(); }

  /// The direct pairs of the batch checked, in order.
  nanobind::list direct() const;

  /// The names held for an apply, in order.
  std::vector<std::string> pendingNames() const;

  /// Hands what `check` held to `apply(entries, data)`, the batch and any
  /// contiguous copies alive through it, then forgets it.
  template <typename Apply> void take(Apply apply) {
    if (!ready())
      throw nanobind::value_error("apply_checked without a check_update whose tensors were read");
    std::vector<uint32_t> e = std::move(pendingEntries);
    std::vector<const void *> d = std::move(pendingData);
    pendingEntries.clear();
    pendingData.clear();
    pendingItems.clear();
    nanobind::object hold = std::move(checked);
    std::vector<nanobind::object> held = std::move(keep);
    keep.clear();
    apply(e, d);
  }

private:
  /// The entry of `name`: trainers send in the checkpoint's order, the
  /// plan's, so the entry after the last one is tried before hashing.
  uint32_t find(PyObject *name, size_t next);

  /// What a check needs of each entry, by name (made on first use).
  struct EntryInfo {
    uint8_t kind;
    uint32_t dtype;
    std::vector<int64_t> shape;
  };

  void buildEntries();

  Plan *plan;
  bool entriesBuilt = false;
  std::vector<std::string> names;
  std::vector<EntryInfo> entries;
  std::unordered_map<std::string_view, uint32_t> byName;
  std::vector<uint32_t> seen;
  uint32_t generation = 0;
  bool allRead = false;
  /// What check holds: entry indices, their data (null where unread), the
  /// items' places in the batch.
  std::vector<uint32_t> pendingEntries;
  std::vector<const void *> pendingData;
  std::vector<Py_ssize_t> pendingItems;
  std::vector<nanobind::object> keep;
  nanobind::object checked;
};

} // namespace loadplan_python

#endif // LOADPLAN_PYTHON_UPDATECHECK_H
