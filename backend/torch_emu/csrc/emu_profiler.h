// emu's kernels as device events for torch.profiler.
//
// The core times each kernel it runs while a profiler session with the device's
// activity is recording (``KernelTimer`` below); emu_profiler.cpp hands the events to
// Kineto through torch's PrivateUse1 profiler registry, linked to the ATen op that
// launched them, so ``torch.profiler`` reports them with the PrivateUse1 device type and
// their time as device time.  Outside a session the cost is one relaxed atomic load.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace emu::profiler {

enum class EventKind { kernel, memcpy };

extern std::atomic<bool> recording;

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Appends one finished device event to the recording session (a no-op when none is).
void record(EventKind kind, std::string name, int device, int64_t start_ns, int64_t end_ns);

// Times a scope as one device event, when a session is recording at its start.
class KernelTimer {
 public:
  KernelTimer(EventKind kind, const char* name, int device)
      : kind_(kind), name_(name), device_(device),
        start_(recording.load(std::memory_order_relaxed) ? now_ns() : -1) {}
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;
  ~KernelTimer() {
    if (start_ >= 0) record(kind_, name_, device_, start_, now_ns());
  }

 private:
  EventKind kind_;
  const char* name_;
  int device_;
  int64_t start_;
};

}  // namespace emu::profiler
