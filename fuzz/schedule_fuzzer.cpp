//===- schedule_fuzzer.cpp - Fuzz the runtime from schedule bytes ---------===//
//
// libFuzzer target (c): arbitrary bytes as a transfer schedule, through
// loadplan_schedule_open_bytes, its summary, its listing at each detail and
// a reopening of the bytes it gives back. Bad bytes must end in a status with
// a message; a crash, a leak or a sanitizer report is a bug, and so is a
// schedule that does not reopen from its own bytes.
//
// Mutations rarely keep the header right, so the target sets the payload
// size and checksum before opening and, when the reader names the
// fingerprint of the inputs it read (the last check), reopens with it.
//
//===----------------------------------------------------------------------===//

#include "loadplan/format/ByteIO.h"
#include "loadplan/transfer.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

using loadplan_format::FileHeader;
using loadplan_format::resealHeader;
using loadplan_format::storeU64;

namespace {

/// Frees `status`, keeping its message in `message`; true when it was
/// success. An error must say what was wrong.
bool ok(loadplan_status_t status, std::string *message = nullptr) {
  if (!status)
    return true;
  const char *text = loadplan_status_message(status);
  if (!text || !*text)
    __builtin_trap();
  if (message)
    *message = text;
  loadplan_status_free(status);
  return false;
}

loadplan_schedule_t *open(const std::string &bytes, std::string *message) {
  loadplan_schedule_t *schedule = nullptr;
  if (!ok(loadplan_schedule_open_bytes(bytes.data(), bytes.size(), &schedule),
          message))
    return nullptr;
  return schedule;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  auto *file = reinterpret_cast<uint8_t *>(bytes.data());
  if (bytes.size() >= FileHeader::kSize)
    resealHeader(file, bytes.size());
  std::string message;
  loadplan_schedule_t *schedule = open(bytes, &message);
  // "fingerprint 0x... is not that of its inputs, 0x...": only the header
  // was wrong.
  const char *marker = "is not that of its inputs, 0x";
  size_t at = message.find(marker);
  if (!schedule && at != std::string::npos) {
    uint64_t fingerprint =
        std::strtoull(message.c_str() + at + std::strlen(marker), nullptr, 16);
    storeU64(file + FileHeader::kFingerprintAt, fingerprint);
    schedule = open(bytes, nullptr);
    if (!schedule)
      __builtin_trap(); // only the fingerprint changed
  }
  if (!schedule)
    return 0;

  loadplan_schedule_summary_t summary;
  if (!ok(loadplan_schedule_summary(schedule, &summary)) ||
      !loadplan_engine_name(summary.engine))
    __builtin_trap();
  for (uint32_t detail = 0; detail <= 2; ++detail) {
    const char *text;
    size_t textSize;
    ok(loadplan_schedule_text(schedule, detail, &text, &textSize));
  }
  const void *own;
  size_t ownSize;
  if (!ok(loadplan_schedule_bytes(schedule, &own, &ownSize)))
    __builtin_trap();
  loadplan_schedule_t *again =
      open(std::string(static_cast<const char *>(own), ownSize), nullptr);
  loadplan_schedule_summary_t summaryAgain;
  if (!again || !ok(loadplan_schedule_summary(again, &summaryAgain)) ||
      summaryAgain.fingerprint != summary.fingerprint ||
      summaryAgain.num_pieces != summary.num_pieces)
    __builtin_trap();
  loadplan_schedule_release(again);
  loadplan_schedule_release(schedule);
  return 0;
}
