//===- Plan.cpp - Parse and check a plan file -------------------*- C++ -*-===//
//
// Every byte of a plan file is hostile until checked: each read is bounds
// checked, each count is weighed against the bytes left before anything is
// allocated for it, each index is range checked and all arithmetic on sizes
// is overflow checked. A plan that passes can be executed without further
// checks: the executors rely on it. The payload is read as PlanFields.h
// describes it (the encoder writes it from the same description); the
// checks here come at its check points.
//
//===----------------------------------------------------------------------===//

#include "Plan.h"
#include "Status.h"
#include "loadplan/convert.h"
#include "loadplan/format/ByteIO.h"
#include "loadplan/format/PlanFields.h"
#include "loadplan/transform.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <queue>

using namespace loadplan;
using loadplan_format::ByteReader;
using loadplan_format::Field;
using loadplan_format::FileHeader;
using loadplan_format::hex64;
using loadplan_format::loadU32;
using loadplan_format::loadU64;

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// How many byte runs the overlap check may walk in one plan. Writes that
/// interleave more finely than this in one storage are refused rather than
/// letting a hostile plan stall the caller.
constexpr int64_t kMaxOverlapRuns = int64_t(1) << 26;

[[noreturn]] void invalid(const std::string &message) {
  throw StatusError(LOADPLAN_STATUS_INVALID_PLAN, message);
}

/// The payload's reads: running out of bytes is an INVALID_PLAN that says
/// which field ran out where.
class Reader : public ByteReader {
public:
  using ByteReader::ByteReader;

  /// A u32 count of items that each take at least `minBytes`, refused when
  /// the bytes left cannot hold that many (so no huge allocation follows).
  uint32_t count(const Field &what, size_t minBytes) {
    if (left() < 4)
      invalid("plan is truncated: " + shortfall("number of " + what.str(), 4));
    uint32_t n = u32(what);
    if (minBytes && n > left() / minBytes)
      invalid(concat("plan is truncated: ", n, " ", what.str(), " need at least ",
                     uint64_t(n) * minBytes, " bytes but ", left(),
                     " are left at byte ", offset()));
    return n;
  }

protected:
  [[noreturn]] void truncated(const Field &what, size_t n) override {
    invalid("plan is truncated: " + shortfall(what, n));
  }
};

/// Elements of `shape`; false on overflow.
bool numElements(const std::vector<int64_t> &shape, int64_t &out) {
  out = 1;
  for (int64_t n : shape)
    if (n < 0 || __builtin_mul_overflow(out, n, &out))
      return false;
  return true;
}

/// The bytes a strided layout spans from its first element: 0 when it has no
/// elements. False on overflow. Shapes and strides must be non-negative.
bool spanBytes(const std::vector<int64_t> &shape,
               const std::vector<int64_t> &stride, int64_t itemSize,
               int64_t &out) {
  int64_t last = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0) {
      out = 0;
      return true;
    }
    int64_t step;
    if (__builtin_mul_overflow(shape[k] - 1, stride[k], &step) ||
        __builtin_add_overflow(last, step, &last))
      return false;
  }
  return !__builtin_add_overflow(last, 1, &last) &&
         !__builtin_mul_overflow(last, itemSize, &out);
}

std::string targetLabel(const Plan &plan, uint32_t index) {
  const Target &t = plan.targets[index];
  return concat("target ", index, " (", quote(t.module + "." + t.tensor), ")");
}

std::string writeLabel(const Entry &e, uint32_t write) {
  return concat("write ", write, " of ", quote(e.name));
}

std::string boxString(const Entry &e, uint32_t box) {
  const Box &b = e.boxes[box];
  std::ostringstream os;
  os << '[';
  for (uint32_t k = 0; k < b.rank(); ++k)
    os << (k ? ", " : "") << '(' << b.lo[k] << ", " << b.hi[k] << ')';
  os << ']';
  return os.str();
}

/// Whether `region` is `extents` with dims split: each box dim the product
/// of consecutive region dims, row-major; dims of size 1 on either side are
/// ignored. Then a box's elements in row-major order are the region's.
bool isSplitOf(const std::vector<int64_t> &extents,
               const std::vector<int64_t> &region) {
  size_t j = 0;
  for (int64_t extent : extents) {
    if (extent == 1)
      continue;
    int64_t acc = 1;
    while (acc < extent) {
      while (j < region.size() && region[j] == 1)
        ++j;
      if (j == region.size() || region[j] > extent / acc)
        return false;
      acc *= region[j++];
      if (extent % acc)
        return false;
    }
  }
  for (; j < region.size(); ++j)
    if (region[j] != 1)
      return false;
  return true;
}

/// (size, byte stride) of the dims of size > 1, innermost (smallest stride)
/// first.
std::vector<std::pair<int64_t, int64_t>>
sortedByteDims(const std::vector<int64_t> &shape,
               const std::vector<int64_t> &stride, int64_t itemSize) {
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (size_t k = 0; k < shape.size(); ++k)
    if (shape[k] > 1)
      dims.push_back({shape[k], stride[k] * itemSize});
  std::sort(dims.begin(), dims.end(),
            [](auto a, auto b) { return a.second < b.second; });
  return dims;
}

void checkTarget(const Plan &plan, uint32_t index) {
  const Target &t = plan.targets[index];
  auto label = [&] { return targetLabel(plan, index); };
  if (t.storage >= plan.storageSizes.size())
    invalid(concat(label(), ": storage index ", t.storage,
                   " is out of range (the plan has ", plan.storageSizes.size(),
                   " storages)"));
  size_t itemSize = loadplan_dtype_size(t.dtype);
  if (!itemSize)
    invalid(concat(label(), ": unknown dtype code ", t.dtype));
  for (size_t k = 0; k < t.shape.size(); ++k)
    if (t.shape[k] < 0 || t.stride[k] < 0)
      invalid(concat(label(), ": negative size or stride (shape ", t.shape,
                     ", stride ", t.stride, ")"));
  int64_t span;
  if (t.byteOffset > uint64_t(kInt64Max) ||
      !spanBytes(t.shape, t.stride, itemSize, span) ||
      uint64_t(span) > plan.storageSizes[t.storage] ||
      t.byteOffset > plan.storageSizes[t.storage] - span)
    invalid(concat(label(), ": its bytes (byte offset ", t.byteOffset,
                   ", shape ", t.shape, ", stride ", t.stride,
                   ") do not fit in storage ", t.storage, " of ",
                   plan.storageSizes[t.storage], " bytes"));
}

void checkWrite(const Plan &plan, const Entry &e, uint32_t index) {
  const Write &w = e.writes[index];
  auto label = [&] { return writeLabel(e, index); };
  if (w.target >= plan.targets.size())
    invalid(concat(label(), ": target index ", w.target,
                   " is out of range (the plan has ", plan.targets.size(),
                   " targets)"));
  if (w.box >= e.boxes.size())
    invalid(concat(label(), ": box index ", w.box, " is out of range (",
                   quote(e.name), " has ", e.boxes.size(), " boxes)"));
  for (size_t k = 0; k < w.shape.size(); ++k)
    if (w.shape[k] < 0 || w.stride[k] < 0)
      invalid(concat(label(), ": negative size or stride in its region (shape ",
                     w.shape, ", stride ", w.stride, ")"));
  const Box &box = e.boxes[w.box];
  std::vector<int64_t> extents = box.extents();
  if (w.transform) {
    auto [known, dtype, rows, cols, words] =
        loadplan_transform::atomOf(w.transform);
    if (!known)
      invalid(concat(label(), ": unknown transform code ", w.transform,
                     " (0, or one of LOADPLAN_TRANSFORMS)"));
    const char *name = loadplan_transform_name(w.transform);
    if (w.convertTo)
      invalid(concat(label(), ": transform ", name, " and convert_to ",
                     dtypeText(w.convertTo),
                     " together (a transforming write does not convert)"));
    if (e.dtype != dtype || e.rank() != 2)
      invalid(concat(label(), ": transform ", name, " reads a 2-d ",
                     loadplan_dtype_name(dtype), " entry, not a ", e.rank(),
                     "-d ", dtypeText(e.dtype), " one"));
    if (extents[0] % rows || extents[1] % cols)
      invalid(concat(label(), ": box ", boxString(e, w.box),
                     " is not whole atoms of transform ", name, " (", rows,
                     " rows by ", cols, " columns)"));
    // The output: atoms in row-major order over (columns, rows) of atoms,
    // then each atom's words.
    extents = {extents[1] / cols, extents[0] / rows, words};
  }
  if (w.convertTo && !loadplan_convert::isConvertible(e.dtype, w.convertTo))
    invalid(concat(label(), ": converts ", loadplan_dtype_name(e.dtype), " to ",
                   dtypeText(w.convertTo),
                   ", which no executor does (convert_to must be 0, or one "
                   "of bfloat16, float16, float32, float8_e4m3fn and "
                   "float8_e5m2 other than the entry's dtype)"));
  int64_t regionElements;
  if (!numElements(w.shape, regionElements) || regionElements != box.volume())
    invalid(concat(label(), ": region shape ", w.shape, " does not hold the ",
                   box.volume(), " elements of box ", boxString(e, w.box)));
  if (regionElements == 0)
    return;
  if (!isSplitOf(extents, w.shape))
    invalid(concat(label(), ": region shape ", w.shape, " is not the ",
                   w.transform ? "transform's output shape " : "box shape ",
                   extents, " with dims split"));

  const Target &t = plan.targets[w.target];
  int64_t itemSize = loadplan_dtype_size(writtenDtype(e, w));
  uint64_t storageSize = plan.storageSizes[t.storage];
  int64_t offsetBytes, first, span, end;
  if (__builtin_mul_overflow(w.offset, itemSize, &offsetBytes) ||
      __builtin_add_overflow(int64_t(t.byteOffset), offsetBytes, &first) ||
      !spanBytes(w.shape, w.stride, itemSize, span) ||
      __builtin_add_overflow(first, span, &end) || first < 0 ||
      uint64_t(end) > storageSize)
    invalid(concat(label(), ": region (offset ", w.offset, ", shape ", w.shape,
                   ", stride ", w.stride, ") lies outside storage ", t.storage,
                   " of ", storageSize, " bytes (", targetLabel(plan, w.target),
                   " starts at byte ", t.byteOffset, ")"));

  // Each dim must step over everything inside it: then no two elements
  // share a byte and the byte runs come in address order (the overlap check
  // and the executors rely on both).
  int64_t inner = itemSize;
  for (auto [size, stride] : sortedByteDims(w.shape, w.stride, itemSize)) {
    if (stride < inner)
      invalid(concat(label(), ": region dims overlap or interleave (shape ",
                     w.shape, ", stride ", w.stride,
                     "), so it would write some bytes twice or out of order"));
    inner += stride * (size - 1);
  }
}

/// Yields the contiguous byte runs of one write in increasing address order.
class RunCursor {
public:
  RunCursor(int64_t first, std::vector<std::pair<int64_t, int64_t>> innerFirst,
            int64_t itemSize, uint32_t owner)
      : owner(owner), start(first), run(itemSize) {
    size_t k = 0;
    while (k < innerFirst.size() && innerFirst[k].second == run)
      run *= innerFirst[k++].first;
    dims.assign(innerFirst.begin() + k, innerFirst.end());
    index.assign(dims.size(), 0);
  }
  /// Moves to the next run; false after the last.
  bool next() {
    for (size_t k = 0; k < dims.size(); ++k) {
      if (++index[k] < dims[k].first) {
        start += dims[k].second;
        return true;
      }
      start -= dims[k].second * (dims[k].first - 1);
      index[k] = 0;
    }
    return false;
  }
  uint32_t owner;
  int64_t start;
  int64_t run;

private:
  std::vector<std::pair<int64_t, int64_t>> dims; // innermost first
  std::vector<int64_t> index;
};

/// One write with bytes, placed in its storage.
struct Placed {
  uint32_t storage;
  int64_t first, end; // bounding byte range
  uint32_t entry, write;
};

/// Refuses two writes that share a destination byte. Writes whose bounding
/// ranges are disjoint cannot; where bounding ranges overlap (fused or
/// interleaved targets), the runs of the group are merged in address order.
void checkOverlaps(const Plan &plan) {
  std::vector<Placed> placed;
  placed.reserve(plan.numWrites);
  for (uint32_t ei = 0; ei < plan.entries.size(); ++ei) {
    const Entry &e = plan.entries[ei];
    for (uint32_t wi = 0; wi < e.writes.size(); ++wi) {
      const Write &w = e.writes[wi];
      int64_t itemSize = loadplan_dtype_size(writtenDtype(e, w));
      int64_t span = 0;
      spanBytes(w.shape, w.stride, itemSize, span);
      if (span == 0)
        continue;
      const Target &t = plan.targets[w.target];
      int64_t first = int64_t(t.byteOffset) + w.offset * itemSize;
      placed.push_back({t.storage, first, first + span, ei, wi});
    }
  }
  std::sort(placed.begin(), placed.end(), [](const Placed &a, const Placed &b) {
    return std::tie(a.storage, a.first) < std::tie(b.storage, b.first);
  });

  int64_t budget = kMaxOverlapRuns;
  auto describe = [&](const Placed &p) {
    return writeLabel(plan.entries[p.entry], p.write);
  };
  for (size_t i = 0; i < placed.size();) {
    size_t j = i + 1;
    int64_t groupEnd = placed[i].end;
    while (j < placed.size() && placed[j].storage == placed[i].storage &&
           placed[j].first < groupEnd)
      groupEnd = std::max(groupEnd, placed[j++].end);
    if (j - i > 1) {
      std::vector<RunCursor> cursors;
      for (size_t k = i; k < j; ++k) {
        const Entry &e = plan.entries[placed[k].entry];
        const Write &w = e.writes[placed[k].write];
        int64_t itemSize = loadplan_dtype_size(writtenDtype(e, w));
        cursors.emplace_back(placed[k].first,
                             sortedByteDims(w.shape, w.stride, itemSize),
                             itemSize, uint32_t(k));
      }
      auto later = [&](uint32_t a, uint32_t b) {
        return cursors[a].start > cursors[b].start;
      };
      std::priority_queue<uint32_t, std::vector<uint32_t>, decltype(later)>
          heap(later);
      for (uint32_t c = 0; c < cursors.size(); ++c)
        heap.push(c);
      int64_t reach = std::numeric_limits<int64_t>::min();
      uint32_t reachOwner = 0;
      while (!heap.empty()) {
        uint32_t c = heap.top();
        heap.pop();
        RunCursor &cur = cursors[c];
        // A write's own runs are disjoint and ascending, so a run starting
        // below the reach overlaps another write's run.
        if (cur.start < reach)
          invalid(concat("destinations overlap: ", describe(placed[cur.owner]),
                         " and ", describe(placed[reachOwner]),
                         " both write byte ", cur.start, " of storage ",
                         placed[i].storage));
        if (cur.start + cur.run > reach) {
          reach = cur.start + cur.run;
          reachOwner = cur.owner;
        }
        if (--budget < 0)
          invalid(concat("writes ", describe(placed[i]), " and ",
                         describe(placed[i + 1]), " interleave in storage ",
                         placed[i].storage, " over more than ",
                         kMaxOverlapRuns,
                         " byte runs; the runtime does not check overlaps "
                         "that fine-grained"));
        if (cur.next())
          heap.push(c);
      }
    }
    i = j;
  }
}

/// Refuses an entry that lists one box twice: box updates name a box by its
/// coordinates, so each must be unique.
void checkDistinctBoxes(const Entry &e) {
  std::vector<uint32_t> order(e.boxes.size());
  std::iota(order.begin(), order.end(), 0);
  // By (start, stop) of dim 0, then of dim 1, ...: the file's order.
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const Box &x = e.boxes[a], &y = e.boxes[b];
    for (uint32_t k = 0; k < x.rank(); ++k) {
      if (x.lo[k] != y.lo[k])
        return x.lo[k] < y.lo[k];
      if (x.hi[k] != y.hi[k])
        return x.hi[k] < y.hi[k];
    }
    return false;
  });
  for (size_t i = 1; i < order.size(); ++i)
    if (e.boxes[order[i - 1]] == e.boxes[order[i]])
      invalid(concat("entry ", quote(e.name), " lists box ",
                     boxString(e, order[i]), " twice (boxes ",
                     std::min(order[i - 1], order[i]), " and ",
                     std::max(order[i - 1], order[i]), ")"));
}

void checkEntry(const Plan &plan, const Entry &e) {
  auto label = [&] { return concat("entry ", quote(e.name)); };
  for (uint32_t wi = 0; wi < e.writes.size(); ++wi)
    checkWrite(plan, e, wi);
  checkDistinctBoxes(e);
  switch (e.kind) {
  case LOADPLAN_KIND_DIRECT: {
    if (e.writes.empty())
      invalid(concat(label(), " is direct but has no writes"));
    std::vector<bool> used(e.boxes.size(), false);
    for (const Write &w : e.writes)
      used[w.box] = true;
    for (uint32_t b = 0; b < e.boxes.size(); ++b)
      if (!used[b])
        invalid(concat(label(), ": box ", b, " ", boxString(e, b),
                       " is written nowhere"));
    break;
  }
  case LOADPLAN_KIND_FALLBACK:
  case LOADPLAN_KIND_UNNEEDED:
    if (!e.writes.empty())
      invalid(concat(label(), " is ",
                     e.kind == LOADPLAN_KIND_FALLBACK ? "a fallback"
                                                      : "unneeded",
                     " but has ", e.writes.size(), " writes"));
    break;
  }
}

/// Reads the payload into `plan` as PlanFields.h describes it, checking
/// each part at the description's check points, before the reads that
/// depend on it.
class PlanReader : public loadplan_format::PlanReading<PlanReader, Reader> {
public:
  PlanReader(Plan &plan, const uint8_t *payload, size_t size)
      : PlanReading(payload, size, LOADPLAN_PLAN_HEADER_SIZE), plan(plan) {}

  /// Boxes of the entries read so far.
  uint64_t numBoxes = 0;

  template <typename Items>
  uint32_t count(const Items &, const Field &what, size_t leastBytes) {
    return r.count(what, leastBytes);
  }

  void checkStorageSize(uint32_t i) {
    uint64_t bytes = plan.storageSizes[i];
    if (bytes > uint64_t(kInt64Max))
      invalid(concat("storage ", i, " has ", bytes, " bytes, more than 2^63"));
  }
  void checkTargetRank(uint32_t i, uint32_t rank) {
    if (rank > kMaxRank)
      invalid(concat(targetLabel(plan, i), ": rank ", rank, " is more than ",
                     kMaxRank));
  }
  void checkTarget(uint32_t i) { ::checkTarget(plan, i); }
  void checkName(uint32_t i) {
    if (plan.entries[i].name.find('\0') != std::string::npos)
      invalid(concat(label(i), ": the name holds a NUL byte"));
  }
  void checkKind(uint32_t i) {
    unsigned kind = plan.entries[i].kind;
    if (kind >= LOADPLAN_KIND_COUNT_)
      invalid(concat(label(i), ": unknown kind ", kind));
  }
  void checkDtype(uint32_t i) {
    uint32_t dtype = plan.entries[i].dtype;
    if (!loadplan_dtype_size(dtype))
      invalid(concat(label(i), ": unknown dtype code ", dtype));
  }
  void checkRank(uint32_t i, uint32_t rank) {
    if (rank > kMaxRank)
      invalid(concat(label(i), ": rank ", rank, " is more than ", kMaxRank));
  }
  void checkShape(uint32_t i) {
    const Entry &e = plan.entries[i];
    int64_t elements, bytes;
    if (!numElements(e.shape, elements) ||
        __builtin_mul_overflow(elements, int64_t(loadplan_dtype_size(e.dtype)),
                               &bytes))
      invalid(concat(label(i), ": shape ", e.shape,
                     " is negative or has more than 2^63 bytes"));
  }
  void checkHasReason(uint32_t i, uint8_t hasReason) {
    if (hasReason > 1)
      invalid(concat(label(i), ": has_reason is ", unsigned(hasReason),
                     ", not 0 or 1"));
  }
  void checkNumBoxes(uint32_t i, uint32_t rank, uint32_t n) {
    // A box takes 16 bytes per dim (count weighed them); a 0-d tensor has
    // one box at most.
    if (!rank && n > 1)
      invalid(concat(label(i), ": a 0-d tensor cannot have ", n, " boxes"));
  }
  void checkBoxes(uint32_t i) {
    const Entry &e = plan.entries[i];
    for (uint32_t b = 0; b < e.boxes.size(); ++b) {
      const Box &box = e.boxes[b];
      for (uint32_t k = 0; k < box.rank(); ++k)
        if (box.lo[k] < 0 || box.lo[k] > box.hi[k] || box.hi[k] > e.shape[k])
          invalid(concat(label(i), ": box ", b, " dim ", k, " is [", box.lo[k],
                         ", ", box.hi[k], "), not inside [0, ", e.shape[k],
                         ")"));
    }
    plan.firstBox.push_back(static_cast<uint32_t>(numBoxes));
    numBoxes += e.boxes.size();
    if (numBoxes > std::numeric_limits<uint32_t>::max())
      invalid("the plan has more than 2^32 boxes");
  }
  void checkRegionRank(uint32_t i, uint32_t write, uint32_t rank) {
    if (rank > kMaxRank)
      invalid(concat(label(i), " write ", write, ": region rank ", rank,
                     " is more than ", kMaxRank));
  }
  void checkEntry(uint32_t i) {
    const Entry &e = plan.entries[i];
    plan.numWrites += e.writes.size();
    ::checkEntry(plan, e);
  }

private:
  Plan &plan;

  /// Messages only: made when one is needed.
  std::string label(uint32_t i) const {
    return concat("entry ", i, " (", quote(plan.entries[i].name), ")");
  }
};

} // namespace

std::vector<int64_t> loadplan::contiguousStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;)
    strides[k - 1] = strides[k] * shape[k];
  return strides;
}

std::unique_ptr<Plan> loadplan::parsePlan(const uint8_t *data, size_t size) {
  if (size < LOADPLAN_PLAN_HEADER_SIZE)
    invalid(concat("plan is truncated: ", size, " bytes, but the header alone"
                   " takes ", LOADPLAN_PLAN_HEADER_SIZE));
  if (std::memcmp(data, LOADPLAN_PLAN_MAGIC, LOADPLAN_PLAN_MAGIC_SIZE) != 0)
    invalid("not a plan file: the magic is not \"LOADPLAN\"");
  uint32_t version = loadU32(data + FileHeader::kVersionAt);
  if (version != LOADPLAN_PLAN_VERSION)
    invalid(concat("plan format version ", version,
                   " is not supported (this runtime reads version ",
                   LOADPLAN_PLAN_VERSION, ")",
                   version < LOADPLAN_PLAN_VERSION
                       ? "; the plan was written by an older compiler: "
                         "compile it again"
                       : ""));
  uint32_t headerSize = loadU32(data + FileHeader::kHeaderSizeAt);
  if (headerSize != LOADPLAN_PLAN_HEADER_SIZE)
    invalid(concat("header size is ", headerSize, ", not ",
                   LOADPLAN_PLAN_HEADER_SIZE));
  auto plan = std::make_unique<Plan>();
  plan->fingerprint = loadU64(data + FileHeader::kFingerprintAt);
  uint64_t payloadSize = loadU64(data + FileHeader::kPayloadSizeAt);
  uint64_t checksum = loadU64(data + FileHeader::kChecksumAt);
  size_t available = size - LOADPLAN_PLAN_HEADER_SIZE;
  if (payloadSize > available)
    invalid(concat("plan is truncated: the header announces a payload of ",
                   payloadSize, " bytes but ", available, " follow"));
  if (payloadSize < available)
    invalid(concat(available - payloadSize,
                   " bytes follow the payload the header announces"));
  const uint8_t *payload = data + LOADPLAN_PLAN_HEADER_SIZE;
  uint64_t actual = loadplan_checksum64(payload, available);
  if (actual != checksum)
    invalid(concat("checksum mismatch: the header says ", hex64(checksum),
                   " but the payload hashes to ", hex64(actual),
                   " (the file is damaged)"));

  PlanReader reader(*plan, payload, available);
  loadplan_format::visitPlan(reader, *plan);
  if (reader.r.left())
    invalid(concat(reader.r.left(), " bytes after the last entry at byte ",
                   reader.r.offset(), " are not part of the format"));
  plan->numBoxes = static_cast<uint32_t>(reader.numBoxes);

  uint64_t fingerprint = loadplan_format::layoutFingerprint(plan->targets);
  if (fingerprint != plan->fingerprint)
    invalid(concat("the header's fingerprint ", hex64(plan->fingerprint),
                   " is not that of the plan's own targets (",
                   hex64(fingerprint), ")"));

  checkOverlaps(*plan);

  uint32_t numEntries = static_cast<uint32_t>(plan->entries.size());
  plan->byName.reserve(numEntries);
  for (uint32_t i = 0; i < numEntries; ++i) {
    const Entry &e = plan->entries[i];
    auto [it, inserted] = plan->byName.emplace(e.name, i);
    if (!inserted)
      invalid(concat("entry ", quote(e.name), " appears twice (entries ",
                     it->second, " and ", i, ")"));
    plan->byKind[e.kind].push_back(i);
    uint64_t bytes = 0;
    for (const Box &b : e.boxes)
      bytes += uint64_t(b.volume()) * loadplan_dtype_size(e.dtype);
    if (e.kind == LOADPLAN_KIND_DIRECT)
      plan->directBytes += bytes;
    else if (e.kind == LOADPLAN_KIND_FALLBACK)
      plan->fallbackBytes += bytes;
  }
  return plan;
}

void loadplan::checkLayout(const Plan &plan,
                           const loadplan_target_layout_t *layouts,
                           size_t numLayouts) {
  if (numLayouts != plan.targets.size())
    fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, "the plan has ",
         plan.targets.size(), " targets but ", numLayouts,
         " layouts were given");
  if (numLayouts && !layouts)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "layouts is NULL");
  uint64_t fingerprint = LOADPLAN_FNV1A64_INIT;
  for (size_t i = 0; i < numLayouts; ++i) {
    const loadplan_target_layout_t &l = layouts[i];
    if (l.rank > kMaxRank)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "layout ", i, ": rank ", l.rank,
           " is more than ", kMaxRank);
    if (l.rank && (!l.shape || !l.stride))
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "layout ", i,
           ": shape or stride is NULL");
    const Target &t = plan.targets[i];
    fingerprint = loadplan_fingerprint_target(
        fingerprint, t.module.data(), t.module.size(), t.tensor.data(),
        t.tensor.size(), t.storage, l.byte_offset, l.dtype, l.rank, l.shape,
        l.stride);
  }
  if (fingerprint == plan.fingerprint)
    return;
  // Say what differs: the plan's own targets hash to its fingerprint (the
  // parser checked), so some field does.
  std::string tail = concat("; the plan was made for another layout (its "
                            "fingerprint is ",
                            hex64(plan.fingerprint), ", this layout's ",
                            hex64(fingerprint), ")");
  for (size_t i = 0; i < numLayouts; ++i) {
    const loadplan_target_layout_t &l = layouts[i];
    const Target &t = plan.targets[i];
    std::string label = targetLabel(plan, uint32_t(i));
    std::vector<int64_t> shape(l.shape, l.shape + l.rank);
    std::vector<int64_t> stride(l.stride, l.stride + l.rank);
    if (l.dtype != t.dtype)
      fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, label, " has dtype ",
           dtypeText(l.dtype), " but the plan expects ",
           loadplan_dtype_name(t.dtype), tail);
    if (shape != t.shape)
      fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, label, " has shape ", shape,
           " but the plan expects ", t.shape, tail);
    if (stride != t.stride)
      fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, label, " has stride ", stride,
           " but the plan expects ", t.stride, tail);
    if (l.byte_offset != t.byteOffset)
      fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, label, " has byte offset ",
           l.byte_offset, " but the plan expects ", t.byteOffset, tail);
  }
  fail(LOADPLAN_STATUS_FINGERPRINT_MISMATCH, "fingerprint mismatch", tail);
}
