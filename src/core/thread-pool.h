// A persistent pool of worker threads for kernels. `run(fn)` calls fn(i) once
// for every i in [0, n_threads) and returns when all calls are done; the
// calling thread is thread 0. No thread is created per operation.
//
// Jobs are numbered (the generation). The caller posts one, runs its own
// share, then, for each worker, either finds that the worker claimed the
// share and waits for it to finish, or claims the share itself and runs it.
// So a worker the OS has descheduled, or that is asleep, never holds the
// caller up: the caller waits only for shares that are actually running.
// Workers spin for about a millisecond after each job (the next op usually
// follows within microseconds), then sleep on a futex; the caller wakes them
// only if one sleeps.
//
// A kernel's op may last only microseconds, so the path from post to a
// worker's start and from its end back to the caller is kept to one cache
// line transfer each way, and the caller never waits to post:
// - the job's function, its context and its generation share one line,
//   written with plain stores: a spinning worker fetches all three at once,
//   and the caller goes on to its own share while its stores drain (where
//   two CPUs sit far apart, a locked instruction would stall it for a round
//   trip between them);
// - a worker claims a share on a line of its own, which stays in its cache
//   unless the caller had to claim a share there;
// - it reports the share done on another line, which the caller watches.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
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
        using F = std::remove_reference_t<Fn>;
        auto thunk = [](void* ctx, int i) { (*static_cast<F*>(ctx))(i); };
        dispatch(thunk, const_cast<void*>(static_cast<const void*>(&fn)));
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

    // The job posted last: the caller writes thunk and ctx, then the
    // generation (release).
    struct alignas(64) Post {
        std::atomic<uint32_t> generation{0};
        Thunk thunk = nullptr;
        void* ctx = nullptr;
    };
    // A worker's share of job g is claimed, by the worker or by the caller,
    // by moving `claimed` from g - 1 to g; the worker sets `done` to g once it
    // has run a share it claimed. Generations wrap; only equality is used.
    struct Worker {
        alignas(64) std::atomic<uint32_t> claimed{0};
        alignas(64) std::atomic<uint32_t> done{0};
    };

    int n_threads_;
    std::vector<pthread_t> threads_;
    std::unique_ptr<Worker[]> workers_;  // [n_threads]; entry 0 unused
    Post post_;
    alignas(64) std::atomic<int> n_sleeping_{0};
    std::atomic<bool> stop_{false};
};

// Physical cores available to this process (hyperthreads counted once).
int physical_core_count();

// Logical CPUs this process may run on (its affinity mask).
int usable_cpu_count();

}  // namespace headroom
