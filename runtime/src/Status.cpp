//===- Status.cpp - Status values of the C API -------------------*- C++ -*-===//

#include "Status.h"

#include <cstdio>

using namespace loadplan;

/// Handed out when even a status cannot be allocated; never freed.
static loadplan_status_handle_t outOfMemory{LOADPLAN_STATUS_OUT_OF_MEMORY,
                                            "out of memory"};

loadplan_status_t loadplan::makeStatus(loadplan_status_code_t code,
                                       std::string_view message,
                                       std::string_view prefix) noexcept {
  try {
    std::string text;
    text.reserve(prefix.size() + message.size());
    text.append(prefix).append(message);
    return new loadplan_status_handle_t{code, std::move(text)};
  } catch (...) {
    return &outOfMemory;
  }
}

std::string loadplan::quote(std::string_view name) {
  // Names come from files and callers: keep messages printable and short.
  constexpr size_t kMost = 200;
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMost; ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > kMost)
    out += "...";
  return out + "'";
}

extern "C" {

loadplan_status_code_t loadplan_status_code(loadplan_status_t status) {
  return status ? status->code : LOADPLAN_STATUS_OK;
}

const char *loadplan_status_message(loadplan_status_t status) {
  return status ? status->message.c_str() : "";
}

void loadplan_status_free(loadplan_status_t status) {
  if (status != &outOfMemory)
    delete status;
}

const char *loadplan_status_code_name(loadplan_status_code_t code) {
  switch (code) {
  case LOADPLAN_STATUS_OK:
    return "ok";
  case LOADPLAN_STATUS_INVALID_ARGUMENT:
    return "invalid_argument";
  case LOADPLAN_STATUS_NOT_FOUND:
    return "not_found";
  case LOADPLAN_STATUS_INVALID_PLAN:
    return "invalid_plan";
  case LOADPLAN_STATUS_FINGERPRINT_MISMATCH:
    return "fingerprint_mismatch";
  case LOADPLAN_STATUS_INVALID_UPDATE:
    return "invalid_update";
  case LOADPLAN_STATUS_IO_ERROR:
    return "io_error";
  case LOADPLAN_STATUS_UNAVAILABLE:
    return "unavailable";
  case LOADPLAN_STATUS_OUT_OF_MEMORY:
    return "out_of_memory";
  case LOADPLAN_STATUS_DEVICE_ERROR:
    return "device_error";
  case LOADPLAN_STATUS_INTERNAL:
    return "internal";
  }
  return "unknown";
}

} // extern "C"
