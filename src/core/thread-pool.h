// A persistent pool of worker threads for kernels. `run(fn)` calls fn(i) on
// every thread i in [0, n_threads), the caller being thread 0, and returns
// when all are done: no thread is created per operation. Workers spin briefly
// after each job (the next op usually follows within microseconds), then
// sleep on a futex.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
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

    // Calls fn(thread_index) on every thread and waits for all. Not reentrant:
    // fn must not call run() on the same pool.
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
    void dispatch(Thunk thunk, void* ctx);
    static void* worker_main(void* arg);
    void worker_loop(int index);

    int n_threads_;
    std::vector<pthread_t> threads_;
    Thunk thunk_ = nullptr;
    void* ctx_ = nullptr;
    std::atomic<uint32_t> generation_{0};
    std::atomic<int> n_pending_{0};
    std::atomic<bool> stop_{false};
};

// Physical cores available to this process (hyperthreads counted once).
int physical_core_count();

}  // namespace headroom
