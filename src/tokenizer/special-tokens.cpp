#include "tokenizer/special-tokens.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "tokenizer/vocab.h"

namespace headroom {

namespace {

bool is_c_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

void SpecialTokenMatcher::build(const Vocab& vocab) {
    const std::vector<int32_t>& ids = vocab.special_ids();
    nodes_.assign(1, Node{});
    edges_.clear();
    starts_.fill(false);
    any_user_defined_ = false;
    if (ids.empty()) return;

    // Ranks sorted by text, so that every node's subtree is one range.
    std::vector<int32_t> order(ids.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return vocab.text(ids[a]) < vocab.text(ids[b]); });
    const auto text = [&](size_t i) { return vocab.text(ids[order[i]]); };

    struct Pending {
        uint32_t node;
        size_t lo, hi;  // range of `order` below this node
        size_t depth;
    };
    std::vector<Pending> stack{{0, 0, order.size(), 0}};
    while (!stack.empty()) {
        const Pending p = stack.back();
        stack.pop_back();
        size_t lo = p.lo;
        if (text(lo).size() == p.depth) nodes_[p.node].rank = order[lo++];  // sorted first
        const auto first_edge = static_cast<uint32_t>(edges_.size());
        for (size_t i = lo; i < p.hi;) {
            const auto byte = static_cast<uint8_t>(text(i)[p.depth]);
            size_t j = i;
            while (j < p.hi && static_cast<uint8_t>(text(j)[p.depth]) == byte) ++j;
            const auto child = static_cast<uint32_t>(nodes_.size());
            nodes_.push_back(Node{});
            edges_.push_back(Edge{byte, child});
            stack.push_back({child, i, j, p.depth + 1});
            i = j;
        }
        nodes_[p.node].first_edge = first_edge;
        nodes_[p.node].n_edges = static_cast<uint32_t>(edges_.size()) - first_edge;
    }
    for (uint32_t e = 0; e < nodes_[0].n_edges; ++e) starts_[edges_[e].byte] = true;
    for (int32_t id : ids) {
        if (!(vocab.attrs(id) & (attr::kControl | attr::kUnknown))) any_user_defined_ = true;
    }
}

int32_t SpecialTokenMatcher::child(const Node& node, uint8_t byte) const {
    const Edge* first = edges_.data() + node.first_edge;
    const Edge* last = first + node.n_edges;
    const Edge* it =
        std::lower_bound(first, last, byte, [](const Edge& e, uint8_t b) { return e.byte < b; });
    return it != last && it->byte == byte ? static_cast<int32_t>(it->child) : -1;
}

void SpecialTokenMatcher::partition(const Vocab& vocab, std::string_view text, bool parse_special,
                                    std::vector<Fragment>& out) const {
    if (text.empty()) return;
    const auto whole = [&] { out.push_back({-1, 0, static_cast<uint32_t>(text.size())}); };
    if (nodes_.size() <= 1 || (!parse_special && !any_user_defined_)) return whole();

    const std::vector<int32_t>& ids = vocab.special_ids();
    const auto eligible = [&](int32_t rank) {
        return parse_special || !(vocab.attrs(ids[rank]) & (attr::kControl | attr::kUnknown));
    };
    struct Occurrence {
        int32_t rank;
        uint32_t start;
    };
    std::vector<Occurrence> found;
    for (size_t i = 0; i < text.size(); ++i) {
        if (!starts_[static_cast<uint8_t>(text[i])]) continue;
        int32_t node = 0;
        for (size_t j = i; j < text.size(); ++j) {
            node = child(nodes_[node], static_cast<uint8_t>(text[j]));
            if (node < 0) break;
            const int32_t rank = nodes_[node].rank;
            if (rank >= 0 && eligible(rank)) found.push_back({rank, static_cast<uint32_t>(i)});
        }
    }
    if (found.empty()) return whole();
    std::sort(found.begin(), found.end(), [](const Occurrence& a, const Occurrence& b) {
        return a.rank != b.rank ? a.rank < b.rank : a.start < b.start;
    });

    // Taken spans by start: a token, or whitespace it stripped (token -1).
    struct Span {
        uint32_t end;
        int32_t token;
    };
    std::map<uint32_t, Span> taken;
    for (const Occurrence& o : found) {
        const int32_t id = ids[o.rank];
        const uint32_t start = o.start;
        const auto end = static_cast<uint32_t>(start + vocab.text(id).size());
        auto next = taken.upper_bound(start);
        if (next != taken.end() && next->first < end) continue;
        uint32_t free_from = 0;  // start of the text region holding the match
        if (next != taken.begin()) {
            free_from = std::prev(next)->second.end;
            if (free_from > start) continue;
        }
        const uint32_t free_to =
            next == taken.end() ? static_cast<uint32_t>(text.size()) : next->first;
        taken[start] = Span{end, id};
        if (vocab.attrs(id) & attr::kLstrip) {
            uint32_t s = start;
            while (s > free_from && is_c_space(text[s - 1])) --s;
            if (s < start) taken[s] = Span{start, -1};
        }
        if (vocab.attrs(id) & attr::kRstrip) {
            uint32_t e = end;
            while (e < free_to && is_c_space(text[e])) ++e;
            if (e > end) taken[end] = Span{e, -1};
        }
    }

    uint32_t pos = 0;
    for (const auto& [start, span] : taken) {
        if (start > pos) out.push_back({-1, pos, start - pos});
        if (span.token >= 0) out.push_back({span.token, start, span.end - start});
        pos = span.end;
    }
    if (pos < text.size()) out.push_back({-1, pos, static_cast<uint32_t>(text.size()) - pos});
}

size_t SpecialTokenMatcher::memory_bytes() const {
    return nodes_.capacity() * sizeof(Node) + edges_.capacity() * sizeof(Edge);
}

}  // namespace headroom
