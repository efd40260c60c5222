//===- Binding.h - A plan bound to live memory ------------------*- C++ -*-===//
//
// Binding checks the caller's view of the live tensors against the plan
// (fingerprint, storage structure, options), sets up the executor of its
// device and sizes, once, the scratch an apply needs, so that applying
// allocates nothing. An apply checks its whole batch (names, kinds, dtypes,
// shapes, boxes, repeats) before the executor writes a byte.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_BINDING_H
#define LOADPLAN_RUNTIME_BINDING_H

#include "Executor.h"
#include "Plan.h"

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace loadplan {

class Binding {
public:
  /// Throws INVALID_ARGUMENT, FINGERPRINT_MISMATCH or UNAVAILABLE saying
  /// what is wrong with `layouts` or `options`. `plan` must outlive it.
  Binding(const Plan &plan, const loadplan_target_layout_t *layouts,
          size_t numLayouts, const loadplan_bind_options_t &options);

  /// Full checkpoint tensors; throws INVALID_UPDATE (or INVALID_ARGUMENT)
  /// naming the first bad input, and then writes nothing.
  void applyTensors(const loadplan_tensor_t *tensors, size_t count,
                    void *stream);
  /// Packed boxes, every box of each named entry; as applyTensors.
  void applyBoxes(const loadplan_box_t *boxes, size_t count, void *stream);
  /// Full tensors of direct entries given by index, their dtypes and shapes
  /// checked by the caller; as applyTensors.
  void applyEntries(const uint32_t *entries, const void *const *data,
                    size_t count, void *stream);

  uint32_t numThreads() const { return executor->numThreads(); }
  /// What the applies so far have done (loadplan_binding_stats).
  loadplan_binding_stats_t stats();

private:
  /// Checks a batch whole, then copies it: `checkInput` checks one input
  /// past its name and dtype and records its source.
  template <typename Input, typename CheckInput>
  void applyBatch(const Input *inputs, size_t count, void *stream,
                  SourceForm form, CheckInput checkInput);
  void nextStamp();
  std::string label(size_t input, std::string_view name) const;
  /// The direct entry `name` names, or an INVALID_UPDATE saying why not.
  uint32_t lookup(const char *name, size_t size, size_t input) const;
  /// INVALID_UPDATE unless entry `index`, named by input `input`, is direct.
  void requireDirect(uint32_t index, size_t input) const;
  /// Marks entry `ei` sent by input `input`, from `data`; INVALID_UPDATE if
  /// it was sent already.
  void takeTensor(uint32_t ei, size_t input, const void *data);
  bool sameBox(const Entry &e, uint32_t box, const int64_t *starts,
               const int64_t *stops) const;
  /// Refuses a box batch that names an entry without sending all its boxes.
  void requireAllBoxes() const;
  Batch batch(SourceForm form);
  void run(SourceForm form, void *stream);

  const Plan &plan;
  loadplan_device_t device{};
  std::unique_ptr<Executor> executor;
  /// One apply at a time: the scratch below is shared.
  std::mutex mutex;

  std::vector<const uint8_t *> entrySource, boxSource;
  /// An entry or box was seen in the current batch when its stamp is
  /// `stamp`; bumping `stamp` clears all marks at once.
  std::vector<uint32_t> entryStamp, boxStamp;
  uint32_t stamp = 0;
  /// Applies that passed their checks and ran.
  uint64_t applies = 0;
  /// Which input of the batch named each entry or box.
  std::vector<uint32_t> entryInput, boxInput, entryBoxCount;
  std::vector<uint32_t> active;
  const char *inputKind = "tensor";
};

} // namespace loadplan

/// The C handle: a binding, which retains its plan.
struct loadplan_binding_t {
  loadplan_plan_t *handle = nullptr;
  std::unique_ptr<loadplan::Binding> binding;

  ~loadplan_binding_t() {
    binding.reset(); // before the plan it points into
    loadplan_plan_release(handle);
  }
};

#endif // LOADPLAN_RUNTIME_BINDING_H
