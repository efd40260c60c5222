//===- SharedLibraryTest.cpp - The library Python loads ---------*- C++ -*-===//
//
// Python reaches the runtime with ctypes (dlopen + dlsym): the shared
// library must load on its own and export the C API by name.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <dlfcn.h>

using namespace loadplan::testing;

namespace {

TEST(SharedLibrary, LoadsAndOpensAPlanByName) {
  void *library = dlopen(LOADPLAN_RUNTIME_SHARED, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  using Open = loadplan_status_t (*)(const void *, size_t, loadplan_plan_t **);
  using Release = void (*)(loadplan_plan_t *);
  using Message = const char *(*)(loadplan_status_t);
  using Free = void (*)(loadplan_status_t);
  auto open = reinterpret_cast<Open>(dlsym(library, "loadplan_plan_open_bytes"));
  auto release = reinterpret_cast<Release>(dlsym(library, "loadplan_plan_release"));
  auto message = reinterpret_cast<Message>(dlsym(library, "loadplan_status_message"));
  auto free = reinterpret_cast<Free>(dlsym(library, "loadplan_status_free"));
  ASSERT_TRUE(open && release && message && free);
  for (const char *name :
       {"loadplan_bind", "loadplan_apply_tensors", "loadplan_apply_boxes",
        "loadplan_apply_entries",
        "loadplan_plan_entry", "loadplan_plan_box", "loadplan_plan_report",
        "loadplan_plan_json", "loadplan_text_free",
        "loadplan_cuda_device_count", "loadplan_nccl_library"})
    EXPECT_NE(dlsym(library, name), nullptr) << name;
  // C++ internals stay hidden.
  EXPECT_EQ(dlsym(library, "_ZN8loadplan9parsePlanEPKhm"), nullptr);

  std::vector<uint8_t> bytes = samplePlan().bytes();
  loadplan_plan_t *plan = nullptr;
  loadplan_status_t status = open(bytes.data(), bytes.size(), &plan);
  EXPECT_EQ(status, nullptr) << message(status);
  release(plan);
  bytes[0] = 'x';
  status = open(bytes.data(), bytes.size(), &plan);
  ASSERT_NE(status, nullptr);
  EXPECT_NE(std::string(message(status)).find("not a plan file"),
            std::string::npos);
  free(status);
  dlclose(library);
}

} // namespace
