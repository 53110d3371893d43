#include "engine/request.h"

namespace headroom {

void Request::push(TokenEvent event) {
    {
        std::lock_guard lk(mu_);
        if (event.finish != FinishReason::None && ++n_closed_ >= n_choices_) done_ = true;
        // A reader that lags keeps half the vector taken: close the gap
        // rather than grow (erasing does not reallocate).
        if (head_ > 0 && 2 * head_ >= events_.size()) {
            events_.erase(events_.begin(), events_.begin() + static_cast<ptrdiff_t>(head_));
            head_ = 0;
        }
        events_.push_back(std::move(event));
    }
    cv_.notify_all();
}

bool Request::next(TokenEvent& event, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, timeout, [&] { return head_ < events_.size() || done_; })) return false;
    if (head_ == events_.size()) return false;
    event = std::move(events_[head_++]);
    if (head_ == events_.size()) {
        events_.clear();
        head_ = 0;
    }
    return true;
}

bool Request::finished() const {
    std::lock_guard lk(mu_);
    return done_ && head_ == events_.size();
}

bool Embedding::wait(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return done_; });
}

void Embedding::finish(std::vector<float> v, std::string error) {
    {
        std::lock_guard lk(mu_);
        vector_ = std::move(v);
        error_ = std::move(error);
        done_ = true;
    }
    cv_.notify_all();
}

}  // namespace headroom
