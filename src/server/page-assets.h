// The live page's files (src/server/page), embedded in the binary by the
// build (cmake/embed-files.cmake): `serve` answers GET / with index.html and
// the files it loads from the same origin, nothing fetched from elsewhere.
#pragma once

#include <string_view>

namespace headroom::server {

struct PageAsset {
    std::string_view name;  // "index.html", "page.css", "page.js"
    std::string_view bytes;
};

// The file of that name, or null.
const PageAsset* find_page_asset(std::string_view name);

}  // namespace headroom::server
