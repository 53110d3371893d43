// A persistent pool of worker threads for kernels. `run(fn)` calls fn(i) once
// for every i in [0, n_threads) and returns when all calls are done; the
// calling thread is thread 0. No thread is created per operation.
//
// Each worker has a slot that the caller sets to "pending" when it posts a
// job. A worker that wakes claims its slot (pending -> running) and runs its
// share; when the caller finishes its own share it claims every slot still
// pending and runs those shares itself. So a worker the OS has descheduled,
// or that is asleep, never holds the caller up: the caller waits only for
// shares that are actually running. Workers spin for about a millisecond
// after each job (the next op usually follows within microseconds), then
// sleep on a futex; the caller wakes them only if one sleeps.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace headroom {

class ThreadPool {
  public:
    // Stack reserved per worker; accounted in the runtime memory term.
    static constexpr size_t kWorkerStackBytes = 512 * 1024;

    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int n_threads() const { return n_threads_; }

    // Calls fn(thread_index) for every index and waits for all. fn(i) may run
    // on any thread, but never two shares at once with the same index. Not
    // reentrant: fn must not call run() on the same pool.
    template <class Fn>
    void run(Fn&& fn) {
        auto thunk = [](void* ctx, int i) { (*static_cast<Fn*>(ctx))(i); };
        dispatch(thunk, &fn);
    }

    // Splits [0, n) into n_threads contiguous ranges: fn(begin, end, thread_index).
    template <class Fn>
    void parallel_for(int64_t n, Fn&& fn) {
        run([&](int i) {
            const int64_t begin = n * i / n_threads_;
            const int64_t end = n * (i + 1) / n_threads_;
            if (begin < end) fn(begin, end, i);
        });
    }

  private:
    using Thunk = void (*)(void*, int);
    enum : uint32_t { kIdle = 0, kPending = 1, kRunning = 2 };
    struct alignas(64) Slot {
        std::atomic<uint32_t> state{kIdle};
    };

    void dispatch(Thunk thunk, void* ctx);
    static void* worker_main(void* arg);
    void worker_loop(int index);

    int n_threads_;
    std::vector<pthread_t> threads_;
    std::unique_ptr<Slot[]> slots_;  // [n_threads]; slot 0 unused
    Thunk thunk_ = nullptr;
    void* ctx_ = nullptr;
    alignas(64) std::atomic<uint32_t> generation_{0};
    alignas(64) std::atomic<int> n_sleeping_{0};
    std::atomic<bool> stop_{false};
};

// Physical cores available to this process (hyperthreads counted once).
int physical_core_count();

// Logical CPUs this process may run on (its affinity mask).
int usable_cpu_count();

}  // namespace headroom
