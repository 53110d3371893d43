#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"

namespace headroom::safetensors {

namespace {

using nlohmann::json;

struct DtypeInfo {
    Dtype dtype;
    const char* name;
    uint32_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {Dtype::F32, "F32", 4},   {Dtype::F16, "F16", 2},         {Dtype::BF16, "BF16", 2},
    {Dtype::F64, "F64", 8},   {Dtype::I64, "I64", 8},         {Dtype::I32, "I32", 4},
    {Dtype::I16, "I16", 2},   {Dtype::I8, "I8", 1},           {Dtype::U8, "U8", 1},
    {Dtype::Bool, "BOOL", 1}, {Dtype::F8_E4M3, "F8_E4M3", 1}, {Dtype::F8_E5M2, "F8_E5M2", 1},
};

constexpr uint32_t kMaxDims = 4;
// No real dimension is near this; it keeps every product below 2^62.
constexpr int64_t kMaxDim = int64_t{1} << 40;

std::string dtype_names() {
    std::string s;
    for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
    return s;
}

}  // namespace

const char* name(Dtype d) {
    for (const auto& info : kDtypes)
        if (info.dtype == d) return info.name;
    return "?";
}

uint32_t size_bytes(Dtype d) {
    for (const auto& info : kDtypes)
        if (info.dtype == d) return info.size;
    return 0;
}

uint64_t Tensor::n_elements() const {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return n;
}

Header parse_header(std::span<const uint8_t> bytes, const std::string& label) {
    if (bytes.size() < 8)
        fail("{}: {} bytes, too short for a safetensors file (8-byte header length first)", label,
             bytes.size());
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    if (n > kMaxHeaderBytes || n > bytes.size() - 8)
        fail("{}: the header is said to be {} bytes but the file has {} after its length{}", label,
             n, bytes.size() - 8, n > kMaxHeaderBytes ? " (and the limit is 100 MB)" : "");
    json j;
    try {
        j = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<ptrdiff_t>(n));
    } catch (const json::exception& e) {
        fail("{}: the header is not valid JSON ({})", label, e.what());
    }
    if (!j.is_object()) fail("{}: the header is {}, expected a JSON object", label, j.type_name());
    Header h;
    h.data_offset = 8 + n;
    const uint64_t data_size = bytes.size() - h.data_offset;
    for (const auto& [key, v] : j.items()) {
        if (key == "__metadata__") continue;
        if (key.empty()) fail("{}: a tensor has an empty name", label);
        const std::string where = fmt::format("{}: tensor '{}'", label, clipped(key));
        if (!v.is_object()) fail("{} is {}, expected an object", where, v.type_name());
        Tensor t;
        t.name = key;
        const auto dt = v.find("dtype");
        if (dt == v.end() || !dt->is_string())
            fail("{}: 'dtype' is missing, expected a string such as \"BF16\"", where);
        const auto* info = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                        [&](const DtypeInfo& d) { return *dt == d.name; });
        if (info == std::end(kDtypes))
            fail("{}: dtype {} is not one headroom reads ({})", where, clipped(dt->dump()),
                 dtype_names());
        t.dtype = info->dtype;
        const auto shape = v.find("shape");
        if (shape == v.end() || !shape->is_array() || shape->size() > kMaxDims)
            fail("{}: 'shape' is missing or not an array of at most {} sizes", where, kMaxDims);
        for (const auto& d : *shape) {
            if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() > kMaxDim)
                fail("{}: shape {} has a size that is not a positive integer", where,
                     clipped(shape->dump()));
            t.shape.push_back(d.get<int64_t>());
        }
        const auto offs = v.find("data_offsets");
        if (offs == v.end() || !offs->is_array() || offs->size() != 2 ||
            !(*offs)[0].is_number_unsigned() || !(*offs)[1].is_number_unsigned())
            fail("{}: 'data_offsets' is missing, expected [begin, end]", where);
        const auto begin = (*offs)[0].get<uint64_t>();
        const auto end = (*offs)[1].get<uint64_t>();
        if (begin > end || end > data_size)
            fail(
                "{}: data_offsets [{}, {}] lie outside the {} bytes of data (the file is {} bytes)",
                where, begin, end, data_size, bytes.size());
        // Every dimension is below 2^40 and there are at most 4: the product
        // can overflow only past 2^64, so compare by division first.
        uint64_t n_elem = 1;
        for (int64_t d : t.shape) {
            if (n_elem > (uint64_t{1} << 62) / static_cast<uint64_t>(d))
                fail("{}: shape {} has too many elements", where, clipped(shape->dump()));
            n_elem *= static_cast<uint64_t>(d);
        }
        if (n_elem > (end - begin) || n_elem * info->size != end - begin)
            fail("{}: shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", where,
                 clipped(shape->dump()), info->name, n_elem * info->size, begin, end, end - begin);
        t.begin = h.data_offset + begin;
        t.size_bytes = end - begin;
        h.tensors.push_back(std::move(t));
    }
    std::sort(h.tensors.begin(), h.tensors.end(),
              [](const Tensor& a, const Tensor& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < h.tensors.size(); ++i) {
        const Tensor& a = h.tensors[i - 1];
        const Tensor& b = h.tensors[i];
        if (a.begin + a.size_bytes > b.begin)
            fail("{}: tensors '{}' and '{}' overlap (bytes {} to {} and {} to {})", label,
                 clipped(a.name), clipped(b.name), a.begin, a.begin + a.size_bytes, b.begin,
                 b.begin + b.size_bytes);
    }
    return h;
}

}  // namespace headroom::safetensors
