// Small I/O helpers shared by the `hyla` subcommands (see io.h).
#include "cli/io.h"

namespace hyla::cli {

std::string read_all(std::FILE* in) {
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), in)) > 0) text.append(buffer, n);
  return text;
}

}  // namespace hyla::cli
