// Small I/O helpers shared by the `hyla` subcommands.
#pragma once

#include <cstdio>
#include <string>

namespace hyla::cli {

/// Everything left in `in` (e.g. a prompt or text given on stdin).
std::string read_all(std::FILE* in);

}  // namespace hyla::cli
