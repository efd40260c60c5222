//===- Plan.cpp - The load plan of a compiled module ------------*- C++ -*-===//

#include "loadplan/Transforms/Plan.h"
#include "loadplan/Transforms/Groups.h"
#include "loadplan/Dialect/LoadPlan/IR/Geometry.h"
#include "loadplan/Dialect/LoadPlan/IR/LoadPlanOps.h"
#include "loadplan/format/ByteIO.h"
#include "loadplan/format/Report.h"

#include "mlir/AsmParser/AsmParser.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Format.h"

#include <chrono>

using namespace mlir;
using namespace mlir::loadplan;
using ::loadplan_format::planReport;

DtypeCodes::DtypeCodes(MLIRContext *context) {
#define LOADPLAN_DTYPE_CODE_(e, code, name, bytes, mlir)                       \
  if (Type type = parseType(mlir, context)) {                                  \
    codes.try_emplace(type, code);                                             \
    if (types.size() <= code)                                                  \
      types.resize(code + 1);                                                  \
    types[code] = type;                                                        \
  }
  LOADPLAN_DTYPES(LOADPLAN_DTYPE_CODE_)
#undef LOADPLAN_DTYPE_CODE_
}

uint32_t DtypeCodes::lookup(Type type) const {
  return codes.lookup_or(type, LOADPLAN_DTYPE_INVALID);
}

Type DtypeCodes::type(uint32_t code) const {
  return code < types.size() ? types[code] : Type();
}

FailureOr<Plan> loadplan::buildPlan(ModuleOp module) {
  Plan plan;
  DtypeCodes dtypeCodes(module.getContext());
  llvm::DenseMap<StringAttr, uint32_t> storageIndex, targetIndex;
  for (auto storage : module.getOps<StorageOp>()) {
    storageIndex[storage.getSymNameAttr()] = plan.storageSizes.size();
    plan.storageSizes.push_back(storage.getSize());
  }
  for (auto target : module.getOps<TargetOp>()) {
    PlanTarget t;
    t.module = target.getModule().str();
    t.tensor = target.getTensor().str();
    auto storage = storageIndex.find(target.getStorageAttr().getAttr());
    if (storage == storageIndex.end())
      return target.emitError("names no storage"), failure();
    t.storage = storage->second;
    t.byteOffset = target.getByteOffset();
    t.dtype = dtypeCodes.lookup(target.getTensorType().getElementType());
    if (t.dtype == LOADPLAN_DTYPE_INVALID)
      return target.emitError("dtype has no plan code"), failure();
    t.shape = target.getTensorType().getShape().vec();
    t.stride = target.getStride().vec();
    targetIndex[target.getSymNameAttr()] = plan.targets.size();
    plan.targets.push_back(std::move(t));
  }

  FailureOr<CheckpointNames> names = collectCheckpointNames(module);
  if (failed(names))
    return failure();
  // Each checkpoint's entry, in module order: its members share it
  // (PlanMember), and the entries take the positions the members leave, as
  // the checkpoints' own names do.
  plan.entries.reserve(names->checkpoints.size());
  for (CheckpointOp checkpoint : names->checkpoints) {
    PlanEntry &e = plan.entries.emplace_back();
    e.name = checkpoint.getName().str();
    RankedTensorType type = checkpoint.getTensorType();
    e.dtype = dtypeCodes.lookup(type.getElementType());
    if (e.dtype == LOADPLAN_DTYPE_INVALID)
      return checkpoint.emitError("dtype has no plan code"), failure();
    // The runtime counts a tensor's bytes in int64_t, as torch does.
    int64_t itemSize = loadplan_dtype_size(e.dtype), bytes;
    if (llvm::MulOverflow(type.getNumElements(), itemSize, bytes))
      return checkpoint.emitError("has 2^63 bytes or more, more than a plan "
                                  "file holds"),
             failure();
    e.shape = type.getShape().vec();
    Block &block = checkpoint.getBlock();
    auto fallbacks = block.getOps<FallbackOp>();
    if (!fallbacks.empty()) {
      e.kind = LOADPLAN_KIND_FALLBACK;
      e.reason = (*fallbacks.begin()).getReason().str();
      e.boxes.push_back(
          PlanBox{::loadplan_format::Dims(e.shape.size(), 0), e.shape});
      continue;
    }
    for (Operation &op : block) {
      if (auto copy = dyn_cast<CopyOp>(op))
        return copy.emitError("copy was not reduced to a write; run "
                              "--loadplan-to-boxes first"),
               failure();
      auto write = dyn_cast<WriteOp>(op);
      if (!write)
        continue;
      ArrayRef<int64_t> starts = write.getBox().getStarts(),
                        stops = write.getBox().getStops();
      PlanBox box{::loadplan_format::Dims(starts.begin(), starts.end()),
                  ::loadplan_format::Dims(stops.begin(), stops.end())};
      auto it = llvm::find(e.boxes, box);
      uint32_t boxIndex = it - e.boxes.begin();
      if (it == e.boxes.end())
        e.boxes.push_back(std::move(box));
      RegionAttr r = write.getRegion();
      uint32_t convertTo = LOADPLAN_DTYPE_INVALID;
      if (std::optional<Type> dtype = write.getDtype())
        convertTo = dtypeCodes.lookup(*dtype);
      e.writes.push_back(PlanWrite{
          targetIndex.lookup(write.getTargetAttr().getAttr()), boxIndex,
          r.getOffset(), r.getShape().vec(), r.getStride().vec(), convertTo,
          write.getTransformCode()});
    }
    e.kind = e.writes.empty() ? LOADPLAN_KIND_UNNEEDED : LOADPLAN_KIND_DIRECT;
  }

  if (!names->hasMembers)
    return plan;
  plan.members.reserve(names->names.size() - names->checkpoints.size());
  for (auto [c, checkpoint] : llvm::enumerate(names->checkpoints))
    for (size_t i = 1; i < checkpoint.getNumNames(); ++i)
      plan.members.push_back(PlanMember{
          checkpoint.getNameAt(i).str(), static_cast<uint32_t>(c),
          static_cast<uint32_t>(checkpoint.getMemberPositions()[i - 1]),
          checkpoint.getShiftAt(i)});
  return plan;
}

std::string loadplan::serializePlan(const Plan &plan) {
  return ::loadplan_format::encodePlan(plan);
}

//===----------------------------------------------------------------------===//
// The report
//===----------------------------------------------------------------------===//

void loadplan::printPlanReport(const Plan &plan, raw_ostream &os,
                               double seconds) {
  std::string how;
  llvm::raw_string_ostream(how) << "compiled in " << llvm::format("%.3f", seconds)
                                << " s";
  os << planReport(plan, how);
}

static std::chrono::steady_clock::time_point &compileStart() {
  static std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();
  return start;
}

void loadplan::markCompileStart() {
  compileStart() = std::chrono::steady_clock::now();
}

double loadplan::secondsSinceCompileStart() {
  // Read the start first: its first read sets it, which must not come after
  // now() (clang evaluates the operands of `-` left to right).
  std::chrono::steady_clock::time_point start = compileStart();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}
