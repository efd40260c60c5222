//===- DetectFallbacks.cpp - Give each fallback name its reason -*- C++ -*-===//
//
// Walks the loader's recorded events in arrival order and gives each name at
// most one loadplan.fallback: the first reason it met, or the reason that
// stopped its loader. Names declared twice and "lonely" fallbacks (whose
// loader writes nothing itself) are errors the user must fix in the model.
//
//===----------------------------------------------------------------------===//

#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Transforms/Groups.h"
#include "loadplan/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir {
namespace loadplan {
#define GEN_PASS_DEF_DETECTFALLBACKS
#include "loadplan/Transforms/Passes.h.inc"
} // namespace loadplan
} // namespace mlir

using namespace mlir;
using namespace mlir::loadplan;

namespace {

/// What the walk learnt about one name. Reasons rank as in the seeds: the
/// event that stopped its loader, else the first event recorded while
/// tracing (an op applied to it, a cast, a write without copy_, a read of a
/// destination), else the first copy --loadplan-to-boxes refused.
struct NameState {
  std::string reason;
  bool hasReason = false;
  bool stop = false;
  bool fromEvent = false;
  bool wrote = false;
};

struct DetectFallbacksPass
    : public loadplan::impl::DetectFallbacksBase<DetectFallbacksPass> {
  using DetectFallbacksBase::DetectFallbacksBase;
  void runOnOperation() override;
};

} // namespace

/// The reason a recorded event gives, if it is one.
static std::optional<std::string> eventReason(Operation *op, bool &stop) {
  stop = false;
  return llvm::TypeSwitch<Operation *, std::optional<std::string>>(op)
      .Case([&](ValueReadOp e) -> std::optional<std::string> {
        stop = true;
        return "its loader reads its values (" + e.getOp().str() + ")";
      })
      .Case([&](MetaFailureOp e) -> std::optional<std::string> {
        stop = true;
        return e.getOp().str() + " fails on meta";
      })
      .Case([&](ApplyOp e) -> std::optional<std::string> {
        if (e.getReason())
          return e.getReason()->str();
        return "applies " + e.getOp().str() + " to it";
      })
      .Case([&](ConvertOp e) -> std::optional<std::string> {
        // A conversion the executors do is no reason: what follows it (a
        // copy, an op that is not one) says whether the name is direct.
        auto elem = [](Value v) {
          return cast<RankedTensorType>(v.getType()).getElementType();
        };
        Type from = elem(e.getInput()), to = elem(e.getResult());
        if (isConvertible(from, to))
          return std::nullopt;
        return castReason(from, to, "");
      })
      .Case([&](InplaceWriteOp e) -> std::optional<std::string> {
        return "writes it without Tensor.copy_ (" + e.getOp().str() + ")";
      })
      .Case([&](WriteOtherOp) -> std::optional<std::string> {
        return std::string(
            "copies into a tensor that is not a checkpoint tensor");
      })
      .Case([&](FallbackOp e) -> std::optional<std::string> {
        stop = e.getStop();
        return e.getReason().str();
      })
      .Default([](Operation *) { return std::nullopt; });
}

void DetectFallbacksPass::runOnOperation() {
  ModuleOp module = getOperation();
  SymbolTable symbols(module);

  FailureOr<CheckpointNames> names = collectCheckpointNames(module);
  if (failed(names))
    return signalPassFailure();
  // Who last wrote a storage, and which names an apply blames, depend on
  // arrival order and on single names: a module with such events is walked
  // name by name. (A checkpoint with members holds none of them.)
  if (names->hasMembers) {
    bool byNames = false;
    for (CheckpointOp checkpoint : names->checkpoints) {
      if (checkpoint.hasMembers())
        continue;
      for (Operation &op : checkpoint.getBlock()) {
        auto apply = dyn_cast<ApplyOp>(op);
        byNames |= apply ? apply.getNamesAttr() != nullptr
                         : isa<ReadTargetOp>(op);
      }
    }
    if (byNames) {
      names = expandCheckpointGroups(module);
      if (failed(names))
        return signalPassFailure();
    }
  }

  // Checkpoints in module order, which `states` shares. Without members
  // that is arrival order; with them no event below depends on it. The
  // keys are the ops' own names, which outlive the map.
  SmallVector<CheckpointOp> &checkpoints = names->checkpoints;
  llvm::DenseMap<StringRef, size_t> byName;
  byName.reserve(names->names.size());
  bool failedNames = false;
  for (CheckpointNames::Name n : names->names) {
    StringRef name = names->name(n);
    auto [it, inserted] = byName.try_emplace(name, n.checkpoint);
    if (!inserted) {
      names->op(n).emitError() << "checkpoint '" << name
                               << "' is declared twice";
      checkpoints[it->second].emitRemark() << "first declared here";
      failedNames = true;
    }
  }
  if (failedNames)
    return signalPassFailure();

  std::vector<NameState> states(checkpoints.size());
  auto mark = [&](size_t name, StringRef reason, bool stop, bool fromEvent) {
    NameState &s = states[name];
    if (s.stop)
      return;
    if (stop || !s.hasReason || (fromEvent && !s.fromEvent)) {
      s.stop = stop;
      s.fromEvent = fromEvent;
      s.reason = reason.str();
      s.hasReason = true;
    }
  };
  // The name that last wrote each storage, in arrival order.
  llvm::DenseMap<StringAttr, size_t> lastWriter;
  auto storageOf = [&](FlatSymbolRefAttr target) -> StringAttr {
    auto t = symbols.lookup<TargetOp>(target.getAttr());
    return t ? t.getStorageAttr().getAttr() : StringAttr();
  };

  for (auto [index, checkpoint] : llvm::enumerate(checkpoints)) {
    for (Operation &op : checkpoint.getBlock()) {
      if (auto copy = dyn_cast<CopyOp>(op)) {
        states[index].wrote = true;
        lastWriter[storageOf(copy.getTargetAttr())] = index;
      } else if (auto write = dyn_cast<WriteOp>(op)) {
        states[index].wrote = true;
        lastWriter[storageOf(write.getTargetAttr())] = index;
      } else if (isa<InplaceWriteOp, WriteOtherOp>(op)) {
        states[index].wrote = true;
      }
      if (auto read = dyn_cast<ReadTargetOp>(op)) {
        auto it = lastWriter.find(storageOf(read.getTargetAttr()));
        size_t blamed = it != lastWriter.end() ? it->second : index;
        mark(blamed,
             ("its loader reads the destination (" + read.getOp() + ")").str(),
             /*stop=*/false, /*fromEvent=*/true);
        continue;
      }
      bool stop;
      std::optional<std::string> reason = eventReason(&op, stop);
      if (!reason)
        continue;
      // A fallback op that does not stop is a refused copy (or an earlier
      // run's reason, or an overlap): it ranks below tracing events.
      bool fromEvent = !isa<FallbackOp>(op);
      mark(index, *reason, stop, fromEvent);
      if (auto apply = dyn_cast<ApplyOp>(op))
        if (ArrayAttr names = apply.getNamesAttr())
          for (StringRef name : names.getAsValueRange<StringAttr>()) {
            auto other = byName.find(name);
            if (other == byName.end()) {
              apply.emitError() << "names checkpoint '" << name
                                << "', which is not declared";
              return signalPassFailure();
            }
            mark(other->second, *reason, /*stop=*/false, /*fromEvent=*/true);
          }
    }
  }

  bool lonely = false;
  for (auto [checkpoint, s] : llvm::zip_equal(checkpoints, states)) {
    if (s.hasReason && !s.stop && !s.wrote) {
      checkpoint.emitError()
          << "fallback name '" << checkpoint.getName()
          << "' writes nothing itself (" << s.reason
          << "): its loader combines several checkpoint tensors; move the "
             "combine into post-load processing "
             "(process_weights_after_loading)";
      lonely = true;
    }
  }
  if (lonely)
    return signalPassFailure();

  for (auto [checkpoint, s] : llvm::zip_equal(checkpoints, states)) {
    Block &block = checkpoint.getBlock();
    for (Operation &op : llvm::make_early_inc_range(block)) {
      // Events are now reasons; a stopped loader's writes never happen.
      // Other writes stay: they show that the name wrote, so this pass finds
      // the same names lonely when it runs on its own output.
      if (isa<FallbackOp, ValueReadOp, MetaFailureOp, ReadTargetOp>(op) ||
          (s.stop && isa<WriteOp, CopyOp, InplaceWriteOp, WriteOtherOp>(op)))
        op.erase();
      // A copy of no element counted as a write; a direct name drops it (a
      // fallback name keeps it, so that a rerun finds the same names
      // lonely).
      else if (auto copy = dyn_cast<CopyOp>(op);
               copy && !s.hasReason && copy.getDest().getNumElements() == 0)
        copy.erase();
    }
    // Views that fed only such copies are dead now.
    if (!s.hasReason)
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
        if (isa<AsStridedOp, ReshapeOp>(op) && op.use_empty())
          op.erase();
    if (!s.hasReason)
      continue;
    OpBuilder builder = OpBuilder::atBlockBegin(&block);
    FallbackOp::create(builder, checkpoint.getLoc(), StringRef(s.reason),
                       s.stop);
    ++numFallbacks;
  }
}
