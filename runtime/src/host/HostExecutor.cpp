//===- HostExecutor.cpp - The CPU executor -----------------------*- C++ -*-===//

#include "HostExecutor.h"
#include "../Status.h"
#include "loadplan/convert.h"
#include "loadplan/transform.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

using namespace loadplan;

void loadplan::cutPieces(const Copies &copies, int64_t maxPieceBytes,
                         std::vector<Piece> &pieces,
                         std::vector<uint32_t> &entryBegin) {
  pieces.clear();
  entryBegin.assign(copies.entryBegin.size(), 0);
  size_t entry = 0;
  for (uint32_t ci = 0; ci < copies.copies.size(); ++ci) {
    const Copy &c = copies.copies[ci];
    while (entry < copies.entryBegin.size() && copies.entryBegin[entry] <= ci)
      entryBegin[entry++] = static_cast<uint32_t>(pieces.size());
    // A converting copy is cut between elements, a transforming one
    // between atoms.
    int64_t granule = c.granule();
    int64_t pieceBytes =
        std::max<int64_t>(granule, maxPieceBytes / granule * granule);
    if (c.run >= pieceBytes) {
      for (int64_t row = 0; row < c.rows; ++row)
        for (int64_t at = 0; at < c.run; at += pieceBytes)
          pieces.push_back({ci, row * c.run + at,
                            row * c.run + std::min(at + pieceBytes, c.run)});
    } else {
      int64_t rowsPerPiece = pieceBytes / c.run;
      for (int64_t row = 0; row < c.rows; row += rowsPerPiece)
        pieces.push_back(
            {ci, row * c.run, std::min(row + rowsPerPiece, c.rows) * c.run});
    }
  }
  while (entry < entryBegin.size())
    entryBegin[entry++] = static_cast<uint32_t>(pieces.size());
}

/// `count` runs of R bytes, `dstStride` and `srcStride` apart. A constant R
/// lets the compiler turn each memcpy into one load and one store.
template <int64_t R>
static void copyRuns(uint8_t *dst, const uint8_t *src, int64_t count,
                     int64_t dstStride, int64_t srcStride) {
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(dst + i * dstStride, src + i * srcStride, R);
}

/// memcpy with non-temporal stores of whole cache lines (plain copies for
/// the unaligned head and the tail); the caller fences.
static void streamBytes(uint8_t *dst, const uint8_t *src, size_t n) {
#if defined(__SSE2__)
  size_t head = std::min(n, size_t(-reinterpret_cast<uintptr_t>(dst) & 63));
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i *>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i *>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i *>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i *>(dst + 48), d);
  }
#endif
  std::memcpy(dst, src, n);
}

/// Orders non-temporal stores before whatever follows (the pool's hand-off).
static void streamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

static void copyBytes(uint8_t *dst, const uint8_t *src, size_t n, bool stream) {
  if (stream)
    streamBytes(dst, src, n);
  else
    std::memcpy(dst, src, n);
}

static void copyRuns(int64_t run, uint8_t *dst, const uint8_t *src,
                     int64_t count, int64_t dstStride, int64_t srcStride,
                     bool stream) {
  if (stream) {
    for (int64_t i = 0; i < count; ++i)
      streamBytes(dst + i * dstStride, src + i * srcStride, run);
    return;
  }
  switch (run) {
  case 1:
    return copyRuns<1>(dst, src, count, dstStride, srcStride);
  case 2:
    return copyRuns<2>(dst, src, count, dstStride, srcStride);
  case 4:
    return copyRuns<4>(dst, src, count, dstStride, srcStride);
  case 8:
    return copyRuns<8>(dst, src, count, dstStride, srcStride);
  case 16:
    return copyRuns<16>(dst, src, count, dstStride, srcStride);
  default:
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(dst + i * dstStride, src + i * srcStride, run);
  }
}

/// copyPiece past the source offset, for a copy with dims.
static void copyRows(const Copy &c, const ByteDim *dims, const uint8_t *src,
                     int64_t begin, int64_t end, bool stream) {
  // Where row `row` starts: one division per dim, once per piece.
  int64_t row = begin / c.run;
  int64_t index[kMaxRank];
  int64_t srcAt = 0, dstAt = 0;
  for (uint32_t k = c.numDims; k-- > 0;) {
    index[k] = row % dims[k].size;
    row /= dims[k].size;
    srcAt += index[k] * dims[k].srcStride;
    dstAt += index[k] * dims[k].dstStride;
  }
  int64_t within = begin % c.run;
  if (within || end - begin < c.run) {
    copyBytes(c.dst + dstAt + within, src + srcAt + within, end - begin,
              stream);
    return;
  }
  // Whole rows: the innermost dim in a tight loop, the others as an
  // odometer that carries the offsets along.
  uint32_t last = c.numDims - 1;
  const ByteDim &inner = dims[last];
  for (int64_t rows = (end - begin) / c.run; rows > 0;) {
    int64_t n = std::min(inner.size - index[last], rows);
    copyRuns(c.run, c.dst + dstAt, src + srcAt, n, inner.dstStride,
             inner.srcStride, stream);
    rows -= n;
    index[last] += n;
    srcAt += n * inner.srcStride;
    dstAt += n * inner.dstStride;
    for (uint32_t k = last; index[k] == dims[k].size && k > 0; --k) {
      srcAt -= dims[k].size * dims[k].srcStride;
      dstAt -= dims[k].size * dims[k].dstStride;
      index[k] = 0;
      ++index[k - 1];
      srcAt += dims[k - 1].srcStride;
      dstAt += dims[k - 1].dstStride;
    }
  }
}

/// copyPiece of a converting copy: destination bytes [begin, end), whole
/// elements, converted one by one.
static void convertPiece(const Copy &c, const ByteDim *dims, const uint8_t *src,
                         int64_t begin, int64_t end) {
  int64_t item = c.itemSize, srcItem = c.srcItemSize;
  for (int64_t at = begin; at < end;) {
    int64_t row = at / c.run, within = at - row * c.run;
    int64_t stop = std::min(end, (row + 1) * c.run);
    int64_t srcAt = 0, dstAt = 0;
    for (uint32_t k = c.numDims; k-- > 0;) {
      int64_t i = row % dims[k].size;
      row /= dims[k].size;
      srcAt += i * dims[k].srcStride;
      dstAt += i * dims[k].dstStride;
    }
    loadplan_convert::convertRun(c.dst + dstAt + within, item, c.convertTo,
                                 src + srcAt + within / item * srcItem, srcItem,
                                 c.convertFrom, (stop - at) / item);
    at = stop;
  }
}

/// copyPiece of a transforming copy: destination bytes [begin, end), whole
/// atoms, a word at a time in the output's order.
static void transformPiece(const Copy &c, const ByteDim *dims,
                           const uint8_t *src, int64_t begin, int64_t end) {
  // Word `word` of the transform's output: where it goes by one division
  // per dim, once per piece, then an odometer; its atom's first source
  // byte by one division per atom.
  int64_t word = begin / c.itemSize, last = end / c.itemSize;
  int64_t index[kMaxRank];
  int64_t dstAt = 0, rest = word;
  for (uint32_t k = c.numDims; k-- > 0;) {
    index[k] = rest % dims[k].size;
    rest /= dims[k].size;
    dstAt += index[k] * dims[k].dstStride;
  }
  namespace lt = loadplan_transform;
  int64_t lanes = lt::atomWords(c.transform);
  uint32_t inner = c.numDims - 1;
  while (word < last) {
    int64_t atom = word / lanes;
    const uint8_t *at = lt::atomSource(c.transform, src, c.srcRowStride,
                                       c.srcColStride, c.atomRows, atom);
    for (int64_t stop = std::min(last, (atom + 1) * lanes); word < stop;
         ++word) {
      uint32_t value = lt::atomWord(c.transform, at, c.srcRowStride,
                                    c.srcColStride, unsigned(word % lanes));
      std::memcpy(c.dst + dstAt, &value, sizeof value);
      ++index[inner];
      dstAt += dims[inner].dstStride;
      for (uint32_t k = inner; index[k] == dims[k].size && k > 0; --k) {
        dstAt -= dims[k].size * dims[k].dstStride;
        index[k] = 0;
        ++index[k - 1];
        dstAt += dims[k - 1].dstStride;
      }
    }
  }
}

void loadplan::copyPiece(const Copy &c, const ByteDim *dims, const uint8_t *src,
                         int64_t begin, int64_t end, int64_t streamRun) {
  src += c.srcOffset;
  if (c.transforms())
    return transformPiece(c, dims, src, begin, end);
  if (c.converts())
    return convertPiece(c, dims, src, begin, end);
  bool stream = streamRun > 0 && c.run >= streamRun;
  if (c.numDims == 0)
    copyBytes(c.dst + begin, src + begin, end - begin, stream);
  else
    copyRows(c, dims, src, begin, end, stream);
  if (stream)
    streamFence();
}

namespace {

class HostExecutor final : public Executor {
public:
  HostExecutor(const Plan &plan, const std::vector<uint8_t *> &bases,
               unsigned numThreads)
      : pool(numThreads), streaming(streamingAllowed()) {
    size_t most = 0;
    for (SourceForm form : {SourceForm::Tensor, SourceForm::Box}) {
      Program &p = programs[int(form)];
      p.copies = buildCopies(plan, form, bases);
      cutPieces(p.copies, kPieceBytes, p.pieces, p.entryBegin);
      most = std::max(most, p.pieces.size());
    }
    active.reserve(most);
  }

  uint32_t numThreads() const override { return pool.size(); }

  // Host pointers are taken as given: there is no way to ask the OS whether
  // the caller's memory is readable.
  void checkSources(const Batch &) override {}

  void run(const Batch &batch, void *) override {
    const Program &p = programs[int(batch.form)];
    active.clear();
    for (size_t i = 0; i < batch.numEntries; ++i) {
      uint32_t e = batch.entries[i];
      for (uint32_t k = p.entryBegin[e]; k < p.entryBegin[e + 1]; ++k)
        active.push_back(k);
    }
    int64_t bytes = 0;
    for (uint32_t k : active)
      bytes += p.pieces[k].end - p.pieces[k].begin;
    int64_t streamRun =
        streaming && bytes >= kStreamBatchBytes ? kStreamRunBytes : 0;
    bool byBox = batch.form == SourceForm::Box;
    auto task = [&](size_t i) {
      const Piece &piece = p.pieces[active[i]];
      const Copy &c = p.copies.copies[piece.copy];
      const uint8_t *src =
          byBox ? batch.boxSource[c.box] : batch.entrySource[c.entry];
      copyPiece(c, p.copies.dimsOf(c), src, piece.begin, piece.end, streamRun);
    };
    pool.forEach(active.size(), task);
  }

private:
  struct Program {
    Copies copies;
    std::vector<Piece> pieces;
    std::vector<uint32_t> entryBegin;
  };
  /// LOADPLAN_RUNTIME_STREAMING=0 in the environment at bind time turns
  /// non-temporal stores off: for comparisons, or for a caller that reads
  /// the updated weights back at once and wants them in the cache.
  static bool streamingAllowed() {
    const char *value = std::getenv("LOADPLAN_RUNTIME_STREAMING");
    return !value || std::strcmp(value, "0") != 0;
  }

  Program programs[2];
  ThreadPool pool;
  bool streaming;
  std::vector<uint32_t> active;
};

} // namespace

std::unique_ptr<Executor>
loadplan::makeHostExecutor(const Plan &plan,
                           const std::vector<uint8_t *> &bases,
                           unsigned numThreads) {
  return std::make_unique<HostExecutor>(plan, bases, numThreads);
}
