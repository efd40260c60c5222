//===- transfer.cpp - The transfer C API ---------------------------*- C++ -*-===//
//
// Entry points of transfer.h: each runs its body through guard(), so that
// nothing thrown inside crosses the C boundary.
//
//===----------------------------------------------------------------------===//

#include "Engine.h"
#include "SharedMemory.h"
#include "../Status.h"

#include <cstring>

using namespace loadplan;
using namespace loadplan::transfer;

namespace {

loadplan_comm_t *adoptTransport(std::unique_ptr<Transport> transport) {
  auto comm = std::make_unique<loadplan_comm_t>();
  comm->transport = std::move(transport);
  return comm.release();
}

void checkRanks(int32_t rank, int32_t size) {
  if (size < 1 || rank < 0 || rank >= size)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "rank ", rank, " of ", size,
         " is not a rank of a communicator");
}

const Schedule &scheduleOf(const loadplan_schedule_t *schedule) {
  require(schedule && schedule->schedule, "schedule is NULL");
  return *schedule->schedule;
}

loadplan_schedule_t *adoptSchedule(std::unique_ptr<Schedule> schedule) {
  auto handle = std::make_unique<loadplan_schedule_t>();
  handle->schedule = std::move(schedule);
  return handle.release();
}

} // namespace

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

loadplan_status_t loadplan_backend_available(uint32_t backend,
                                              int32_t *out_available) {
  return guard([&] {
    require(out_available, "out_available is NULL");
    *out_available = 0;
    if (backend == LOADPLAN_BACKEND_GLOO) {
      *out_available = LOADPLAN_HAVE_GLOO;
    } else if (backend == LOADPLAN_BACKEND_NCCL) {
#if LOADPLAN_HAVE_NCCL
      std::string why;
      *out_available = ncclAvailable(why);
#endif
    } else {
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown backend ", backend);
    }
  });
}

loadplan_status_t loadplan_nccl_library(const char **out_path) {
  return guard([&] {
    require(out_path, "out_path is NULL");
    *out_path = nullptr;
#if LOADPLAN_HAVE_NCCL
    *out_path = ncclLibrary();
#else
    fail(LOADPLAN_STATUS_UNAVAILABLE, "this runtime was built without NCCL");
#endif
  });
}

void loadplan_gloo_options_init(loadplan_gloo_options_t *options) {
  if (options)
    *options = loadplan_gloo_options_t{nullptr, nullptr, nullptr, nullptr, 0};
}

loadplan_status_t loadplan_comm_create_gloo(int32_t rank, int32_t size,
                                            const loadplan_gloo_options_t *options,
                                            loadplan_comm_t **out_comm) {
  return guard([&] {
    require(out_comm, "out_comm is NULL");
    *out_comm = nullptr;
    require(options, "options is NULL: give a store_path or a store");
    checkRanks(rank, size);
    require(options->store_path ||
                (options->store && options->store->set && options->store->get),
            "gloo rendezvous needs a store_path or a store with set and get");
#if LOADPLAN_HAVE_GLOO
    *out_comm = adoptTransport(makeGlooTransport(rank, size, *options));
#else
    fail(LOADPLAN_STATUS_UNAVAILABLE,
         "this runtime was built without Gloo (install libgloo-dev and "
         "rebuild)");
#endif
  });
}

loadplan_status_t loadplan_nccl_unique_id(uint8_t out_id[128]) {
  return guard([&] {
    require(out_id, "out_id is NULL");
#if LOADPLAN_HAVE_NCCL
    makeNcclUniqueId(out_id);
#else
    fail(LOADPLAN_STATUS_UNAVAILABLE,
         "this runtime was built without NCCL (it needs the CUDA toolkit and "
         "nccl.h)");
#endif
  });
}

loadplan_status_t loadplan_comm_create_nccl(int32_t rank, int32_t size,
                                            const uint8_t id[128], int32_t device,
                                            int64_t timeout_ms,
                                            loadplan_comm_t **out_comm) {
  return guard([&] {
    require(out_comm, "out_comm is NULL");
    *out_comm = nullptr;
    require(id, "id is NULL");
    checkRanks(rank, size);
#if LOADPLAN_HAVE_NCCL
    *out_comm =
        adoptTransport(makeNcclTransport(rank, size, id, device, timeout_ms));
#else
    (void)device;
    (void)timeout_ms;
    fail(LOADPLAN_STATUS_UNAVAILABLE,
         "this runtime was built without NCCL (it needs the CUDA toolkit and "
         "nccl.h)");
#endif
  });
}

loadplan_status_t loadplan_comm_info(const loadplan_comm_t *comm,
                                     loadplan_comm_info_t *out_info) {
  return guard([&] {
    require(comm && comm->transport, "comm is NULL");
    require(out_info, "out_info is NULL");
    const Transport &t = *comm->transport;
    *out_info = {t.rank, t.size, t.backend(), t.device(), int32_t(t.failed())};
  });
}

void loadplan_comm_release(loadplan_comm_t *comm) {
  if (comm && --comm->refs == 0)
    delete comm;
}

//===----------------------------------------------------------------------===//
// Schedules
//===----------------------------------------------------------------------===//

loadplan_status_t loadplan_schedule_build(const loadplan_schedule_spec_t *spec,
                                          loadplan_schedule_t **out_schedule) {
  return guard([&] {
    require(out_schedule, "out_schedule is NULL");
    *out_schedule = nullptr;
    require(spec, "spec is NULL");
    *out_schedule = adoptSchedule(buildSchedule(*spec));
  });
}

void loadplan_agree_options_init(loadplan_agree_options_t *options) {
  if (options)
    *options = loadplan_agree_options_t{LOADPLAN_ENGINE_M_TO_N, 0, 0, 0,
                                        nullptr, nullptr, 0};
}

loadplan_status_t loadplan_schedule_agree(const loadplan_agree_options_t *options,
                                          const loadplan_schedule_offer_t *offer,
                                          loadplan_schedule_t **out_schedule) {
  return guard([&] {
    require(out_schedule, "out_schedule is NULL");
    *out_schedule = nullptr;
    require(options, "options is NULL");
    require(offer, "offer is NULL");
    *out_schedule = adoptSchedule(agreeOnSchedule(*options, *offer));
  });
}

loadplan_status_t loadplan_schedule_open_bytes(const void *data, size_t size,
                                               loadplan_schedule_t **out_schedule) {
  return guard([&] {
    require(out_schedule, "out_schedule is NULL");
    *out_schedule = nullptr;
    *out_schedule = adoptSchedule(
        parseSchedule(static_cast<const uint8_t *>(data), size));
  });
}

void loadplan_schedule_retain(loadplan_schedule_t *schedule) {
  if (schedule)
    ++schedule->refs;
}

void loadplan_schedule_release(loadplan_schedule_t *schedule) {
  if (schedule && --schedule->refs == 0)
    delete schedule;
}

loadplan_status_t loadplan_schedule_bytes(const loadplan_schedule_t *schedule,
                                          const void **out_data,
                                          size_t *out_size) {
  return guard([&] {
    const Schedule &s = scheduleOf(schedule);
    require(out_data && out_size, "out_data or out_size is NULL");
    *out_data = s.bytes.data();
    *out_size = s.bytes.size();
  });
}

loadplan_status_t loadplan_schedule_summary(const loadplan_schedule_t *schedule,
                                            loadplan_schedule_summary_t *out_summary) {
  return guard([&] {
    const Schedule &s = scheduleOf(schedule);
    require(out_summary, "out_summary is NULL");
    *out_summary = s.summary();
  });
}

loadplan_status_t loadplan_schedule_text(loadplan_schedule_t *schedule,
                                         uint32_t detail, const char **out_text,
                                         size_t *out_size) {
  return guard([&] {
    const Schedule &s = scheduleOf(schedule);
    require(out_text, "out_text is NULL");
    schedule->text = s.text(detail);
    *out_text = schedule->text.c_str();
    if (out_size)
      *out_size = schedule->text.size();
  });
}

const char *loadplan_engine_name(uint32_t engine) {
  switch (engine) {
  case LOADPLAN_ENGINE_FULL:
    return "full";
  case LOADPLAN_ENGINE_SLICED:
    return "sliced";
  case LOADPLAN_ENGINE_M_TO_N:
    return "m_to_n";
  default:
    return nullptr;
  }
}

const char *loadplan_backend_name(uint32_t backend) {
  switch (backend) {
  case LOADPLAN_BACKEND_GLOO:
    return "gloo";
  case LOADPLAN_BACKEND_NCCL:
    return "nccl";
  default:
    return nullptr;
  }
}

//===----------------------------------------------------------------------===//
// Transfer engines
//===----------------------------------------------------------------------===//

void loadplan_transfer_options_init(loadplan_transfer_options_t *options) {
  if (options) {
    *options = loadplan_transfer_options_t{};
    options->debug_fail_round = -1;
    options->colocated_device = -1;
  }
}

loadplan_status_t loadplan_transfer_create(loadplan_comm_t *comm,
                                           loadplan_schedule_t *schedule,
                                           const loadplan_receiver_args_t *receiver,
                                           const loadplan_transfer_options_t *options,
                                           loadplan_transfer_t **out_transfer) {
  return guard([&] {
    require(out_transfer, "out_transfer is NULL");
    *out_transfer = nullptr;
    require(comm && comm->transport, "comm is NULL");
    const Schedule &s = scheduleOf(schedule);
    loadplan_transfer_options_t opts;
    loadplan_transfer_options_init(&opts);
    if (options)
      opts = *options;
    auto transfer = std::make_unique<loadplan_transfer_t>();
    {
      std::lock_guard<std::mutex> lock(comm->mutex);
      transfer->engine = std::make_unique<Engine>(*comm, s, receiver, opts);
    }
    ++comm->refs;
    transfer->comm = comm;
    loadplan_schedule_retain(schedule);
    transfer->schedule = schedule;
    *out_transfer = transfer.release();
  });
}

void loadplan_transfer_release(loadplan_transfer_t *transfer) {
  if (!transfer)
    return;
  // Destructors free staging and executors; nothing worth throwing from a
  // void C function.
  try {
    transfer->engine.reset();
  } catch (...) {
  }
  loadplan_schedule_release(transfer->schedule);
  loadplan_comm_release(transfer->comm);
  delete transfer;
}

loadplan_status_t loadplan_transfer_update(loadplan_transfer_t *transfer,
                                           const loadplan_held_tensor_t *held,
                                           size_t num_held, void *stream) {
  return guard([&] {
    require(transfer && transfer->engine, "transfer is NULL");
    if (transfer->engine->dataDevice().type == LOADPLAN_DEVICE_CPU)
      require(!stream, "stream must be NULL for a transfer of CPU memory");
    std::lock_guard<std::mutex> lock(transfer->mutex);
    std::lock_guard<std::mutex> commLock(transfer->comm->mutex);
    transfer->engine->update(held, num_held, stream);
  });
}

loadplan_status_t loadplan_transfer_fail(loadplan_transfer_t *transfer,
                                         uint32_t code, const char *message,
                                         size_t message_size) {
  return guard([&] {
    require(transfer && transfer->engine, "transfer is NULL");
    require(message || !message_size, "message is NULL");
    if (code == LOADPLAN_STATUS_OK || code > LOADPLAN_STATUS_INTERNAL)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "code ", code,
           " is not an error code");
    std::lock_guard<std::mutex> lock(transfer->mutex);
    std::lock_guard<std::mutex> commLock(transfer->comm->mutex);
    transfer->engine->failUpdate(
        StatusError(static_cast<loadplan_status_code_t>(code),
                    std::string(message ? message : "", message_size)));
  });
}

loadplan_status_t loadplan_transfer_stats(const loadplan_transfer_t *transfer,
                                          loadplan_transfer_stats_t *out_stats) {
  return guard([&] {
    require(transfer && transfer->engine, "transfer is NULL");
    require(out_stats, "out_stats is NULL");
    *out_stats = transfer->engine->stats;
  });
}

loadplan_status_t loadplan_transfer_release_mappings(loadplan_transfer_t *transfer) {
  return guard([&] {
    require(transfer && transfer->engine, "transfer is NULL");
    std::lock_guard<std::mutex> lock(transfer->mutex);
    transfer->engine->releaseMappings();
  });
}

loadplan_status_t loadplan_shared_memory_check(const void *const *data, const uint64_t *bytes,
                                               size_t count, uint8_t *out_shared) {
  return guard([&] {
    require(count == 0 || (data && bytes && out_shared),
            "data, bytes or out_shared is NULL");
    std::vector<const uint8_t *> at(count);
    for (size_t i = 0; i < count; ++i)
      at[i] = static_cast<const uint8_t *>(data[i]);
    std::vector<bool> shared =
        inSharedMemory(at, std::vector<uint64_t>(bytes, bytes + count));
    for (size_t i = 0; i < count; ++i)
      out_shared[i] = shared[i] ? 1 : 0;
  });
}
