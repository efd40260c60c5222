//===- DeviceCopy.h - Copies as the CUDA kernel runs them --------*- C++ -*-===//
//
// The CUDA executor's copy descriptors and the work of one thread block,
// written once for both nvcc (the kernel) and the host compiler (the tests
// run the same code on the CPU, block by block and thread by thread, so the
// kernel's index arithmetic is checked on machines without a GPU).
//
// A batch is one array of DeviceActive records, one per copy in the batch,
// each with the copy's source pointer and the number of the first chunk it
// owns; block b runs chunk b of the whole batch and finds its copy by binary
// search. Chunks are kDeviceChunkBytes of a copy's rows laid end to end.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_CUDA_DEVICECOPY_H
#define LOADPLAN_RUNTIME_CUDA_DEVICECOPY_H

#include "loadplan/convert.h"
#include "loadplan/transform.h"

#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__CUDACC__)
#define LOADPLAN_HD __host__ __device__
#else
#define LOADPLAN_HD
#endif

namespace loadplan {

struct Copies;

/// Dims a device copy may keep after merging; copies with more are refused
/// at bind time (no real loader produces them).
constexpr int kDeviceMaxDims = 6;
/// Bytes per thread block; a multiple of 16 so every chunk boundary suits
/// the widest access.
constexpr int64_t kDeviceChunkBytes = 64 * 1024;
/// Rows at least this long are copied row by row with all threads on one
/// row; shorter ones element by element.
constexpr int64_t kDeviceRowModeMinRun = 512;
constexpr unsigned kDeviceBlockThreads = 256;

struct DeviceCopy {
  uint64_t dst; // first destination byte
  int64_t srcOffset;
  int64_t run;
  int64_t bytes;
  int64_t size[kDeviceMaxDims];
  int64_t srcStride[kDeviceMaxDims];
  int64_t dstStride[kDeviceMaxDims];
  int32_t numDims;
  /// The widest access in bytes (16, 8, 4, 2 or 1) that the destination,
  /// the source offset, the run and every stride allow; the kernel narrows
  /// it further to the alignment of the source pointer it is given.
  int32_t unit;
  /// A converting copy (convertTo set) goes element by element: `run` and
  /// `bytes` count destination bytes, itemSize of them per element, read
  /// srcItemSize bytes apart in the source.
  uint32_t convertFrom;
  uint32_t convertTo;
  int32_t itemSize;
  int32_t srcItemSize;
  /// A transforming copy (transform set) writes one 4-byte word per row,
  /// computed from its box (Copy::transform says how).
  uint32_t transform;
  int64_t srcRowStride;
  int64_t srcColStride;
  int64_t atomRows;
};

/// One copy of a batch.
struct DeviceActive {
  uint64_t firstChunk; // of the batch
  uint64_t src;        // the source's first byte, as the device addresses it
  uint32_t copy;
  uint32_t unused;
};

/// Copies::copies for the device, one for one, and the chunks of each.
struct DeviceProgram {
  std::vector<DeviceCopy> copies;
  std::vector<uint64_t> chunks;
};

/// Converts host copies; throws UNAVAILABLE for a copy with more than
/// kDeviceMaxDims dims.
DeviceProgram buildDeviceProgram(const Copies &copies);

#if !defined(__CUDA_ARCH__)
/// Accesses the CPU run of the device code made that the GPU would fault
/// on (misaligned for their width); the tests require none.
inline uint64_t misalignedDeviceAccesses = 0;
#endif

LOADPLAN_HD inline void copyUnit(uint8_t *dst, const uint8_t *src, int unit) {
#if defined(__CUDA_ARCH__)
  switch (unit) {
  case 16:
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
    break;
  case 8:
    *reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<const uint2 *>(src);
    break;
  case 4:
    *reinterpret_cast<uint32_t *>(dst) =
        *reinterpret_cast<const uint32_t *>(src);
    break;
  case 2:
    *reinterpret_cast<uint16_t *>(dst) =
        *reinterpret_cast<const uint16_t *>(src);
    break;
  default:
    *dst = *src;
  }
#else
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) &
      uintptr_t(unit - 1))
    ++misalignedDeviceAccesses;
  std::memcpy(dst, src, unit);
#endif
}

/// Byte offsets of row `row` in source and destination.
LOADPLAN_HD inline void rowOffsets(const DeviceCopy &c, int64_t row,
                                   int64_t &srcAt, int64_t &dstAt) {
  srcAt = 0;
  dstAt = 0;
  for (int k = c.numDims - 1; k >= 0; --k) {
    int64_t i = row % c.size[k];
    row /= c.size[k];
    srcAt += i * c.srcStride[k];
    dstAt += i * c.dstStride[k];
  }
}

/// copyChunk of a converting copy: one destination element per step,
/// converted (loadplan/convert.h); consecutive threads write consecutive
/// elements.
LOADPLAN_HD inline void convertChunk(const DeviceCopy &c, const uint8_t *src,
                                     uint8_t *dst, int64_t begin, int64_t end,
                                     unsigned thread, unsigned numThreads) {
  int64_t item = c.itemSize;
  int64_t step = int64_t(numThreads) * item;
  for (int64_t at = begin + int64_t(thread) * item; at < end; at += step) {
    int64_t row = at / c.run;
    int64_t within = at - row * c.run;
    int64_t srcAt, dstAt;
    rowOffsets(c, row, srcAt, dstAt);
    loadplan_convert::convertElement(dst + dstAt + within, c.convertTo,
                                     src + srcAt + within / item * c.srcItemSize,
                                     c.convertFrom);
  }
}

/// copyChunk of a transforming copy: one destination word per step;
/// consecutive threads write consecutive words of the output.
LOADPLAN_HD inline void transformChunk(const DeviceCopy &c, const uint8_t *src,
                                       uint8_t *dst, int64_t begin, int64_t end,
                                       unsigned thread, unsigned numThreads) {
  for (int64_t word = begin / 4 + thread; word < end / 4; word += numThreads) {
    int64_t srcAt, dstAt;
    rowOffsets(c, word, srcAt, dstAt);
    uint32_t value = loadplan_transform::transformWord(
        c.transform, src, c.srcRowStride, c.srcColStride, c.atomRows, word);
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<uint32_t *>(dst + dstAt) = value;
#else
    if (reinterpret_cast<uintptr_t>(dst + dstAt) & 3u)
      ++misalignedDeviceAccesses;
    std::memcpy(dst + dstAt, &value, 4);
#endif
  }
}

/// Thread `thread` of `numThreads`' share of bytes [begin, end) of copy `c`
/// from the source whose first byte is at `srcBase`.
LOADPLAN_HD inline void copyChunk(const DeviceCopy &c, uint64_t srcBase,
                                  int64_t begin, int64_t end, unsigned thread,
                                  unsigned numThreads) {
  const uint8_t *src = reinterpret_cast<const uint8_t *>(srcBase + c.srcOffset);
  uint8_t *dst = reinterpret_cast<uint8_t *>(c.dst);
  if (c.transform)
    return transformChunk(c, src, dst, begin, end, thread, numThreads);
  if (c.convertTo)
    return convertChunk(c, src, dst, begin, end, thread, numThreads);
  int unit = c.unit;
  while (reinterpret_cast<uintptr_t>(src) & uintptr_t(unit - 1))
    unit >>= 1;
  int64_t step = int64_t(numThreads) * unit;
  if (c.numDims == 0) {
    for (int64_t at = begin + int64_t(thread) * unit; at < end; at += step)
      copyUnit(dst + at, src + at, unit);
    return;
  }
  if (c.run >= kDeviceRowModeMinRun) {
    for (int64_t at = begin; at < end;) {
      int64_t row = at / c.run;
      int64_t within = at - row * c.run;
      int64_t stop = (row + 1) * c.run < end ? (row + 1) * c.run : end;
      int64_t srcAt, dstAt;
      rowOffsets(c, row, srcAt, dstAt);
      for (int64_t k = within + int64_t(thread) * unit; k < within + (stop - at);
           k += step)
        copyUnit(dst + dstAt + k, src + srcAt + k, unit);
      at = stop;
    }
    return;
  }
  for (int64_t at = begin + int64_t(thread) * unit; at < end; at += step) {
    int64_t row = at / c.run;
    int64_t within = at - row * c.run;
    int64_t srcAt, dstAt;
    rowOffsets(c, row, srcAt, dstAt);
    copyUnit(dst + dstAt + within, src + srcAt + within, unit);
  }
}

/// The work of thread `thread` in the block that runs chunk `chunk` of a
/// batch.
LOADPLAN_HD inline void runBlock(const DeviceCopy *copies,
                                 const DeviceActive *active, uint32_t numActive,
                                 uint64_t chunk, unsigned thread,
                                 unsigned numThreads) {
  uint32_t lo = 0, hi = numActive;
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (active[mid].firstChunk <= chunk)
      lo = mid;
    else
      hi = mid;
  }
  const DeviceActive &a = active[lo];
  const DeviceCopy &c = copies[a.copy];
  int64_t begin = int64_t(chunk - a.firstChunk) * kDeviceChunkBytes;
  int64_t end = begin + kDeviceChunkBytes < c.bytes ? begin + kDeviceChunkBytes
                                                    : c.bytes;
  copyChunk(c, a.src, begin, end, thread, numThreads);
}

} // namespace loadplan

#endif // LOADPLAN_RUNTIME_CUDA_DEVICECOPY_H
