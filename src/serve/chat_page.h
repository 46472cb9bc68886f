// The chat web page that `hyla serve` answers at GET / (and /index.html): src/serve/chat_page.html,
// embedded into the binary at build time (src/CMakeLists.txt writes it into a raw string literal).
#pragma once

#include <string_view>

namespace hyla::serve {

/// The page: one self-contained HTML file (inline CSS and JS, no external URL).
std::string_view chat_page_html();

}  // namespace hyla::serve
